/*
 * transfer/overlap.c: the transfer stage's figures (pp_transfer_get_stats).
 * One batch in 'time_every' is timed, on the device's timeline: timing
 * events around its copy, at its hand-out on the compute stream
 * ('wanted'), and at the last release before its hand-out ('mark').  Its
 * copy's exposed time is how long compute waited for the copy (done -
 * wanted, when positive), plus the part of the copy calls the host made in
 * next() before the hand-out that fell while the compute stream was idle
 * (between mark and wanted): a copy call that blocks the host delays
 * compute only when compute has nothing queued.  The host clock and the
 * device's are related through that idle span, which ends when 'wanted' is
 * recorded (an idle stream completes a record at once).
 */
#include "config.h"

#include <math.h>
#include <stdint.h>

#include "common/common_impl.h"
#include "transfer/transfer_impl.h"

/* The ns of [a0, a1) and [b0, b1) in common. */
static uint64_t overlap_ns(uint64_t a0, uint64_t a1, uint64_t b0, uint64_t b1)
{
	uint64_t lo = PP_MAX(a0, b0), hi = PP_MIN(a1, b1);

	return hi > lo ? hi - lo : 0;
}

/* Notes a copy call's host interval for the hand-out that ends this next(). */
void pp_transfer_note_call(struct pp_transfer *t, uint64_t from, uint64_t to)
{
	struct call_spans *c = &t->calls;

	if (c->n < MAX_CALLS) {
		c->v[c->n][0] = from;
		c->v[c->n][1] = to;
		c->n++;
	} else {
		c->v[MAX_CALLS - 1][1] = to;
	}
}

/*
 * The elapsed ns from the slot's mark to its 'wanted' (complete), or 0 when
 * the mark, recorded on another stream, is not complete yet.
 */
static uint64_t elapsed_or_0(struct tslot *s, struct pp_event *mark, struct pp_event *wanted)
{
	uint64_t ns;

	if (s->mark_stream != s->want_stream && pp_event_query(mark) != 1)
		return 0;
	if (pp_event_elapsed_ns(mark, wanted, &ns) < 0)
		return 0;
	return ns;
}

/*
 * Counts the figures of a timed batch once its events are complete (its
 * 'wanted' is: compute reached the hand-out, after waiting for the copy).
 */
void pp_transfer_count_times(struct pp_transfer *t, struct tslot *s)
{
	uint64_t copy_ns, late_ns, idle_ns = 0, stalled = 0;

	if (!s->counting)
		return;
	s->counting = false;
	if (pp_event_elapsed_ns(s->t_start, s->t_done, &copy_ns) < 0 ||
	    pp_event_elapsed_ns(s->t_wanted, s->t_done, &late_ns) < 0)
		return;
	if (s->marked)
		idle_ns = elapsed_or_0(s, s->t_mark, s->t_wanted);
	for (uint32_t i = 0; idle_ns > 0 && i < s->calls.n; i++)
		stalled += overlap_ns(s->calls.v[i][0], s->calls.v[i][1],
				      s->want_ns > idle_ns ? s->want_ns - idle_ns : 0, s->want_ns);
	/* Compute may wait longer than the copy ran (queued behind others): counted to its length. */
	late_ns = PP_MIN(late_ns, copy_ns);
	t->stats.copies_timed++;
	t->stats.copy_ns += copy_ns;
	t->stats.late_ns += late_ns;
	t->stats.exposed_ns += PP_MIN(copy_ns, late_ns + stalled);
}

/* Adds the host time of a call of the stage, less its waits, to stage_ns. */
void pp_transfer_count_call(struct pp_transfer *t, uint64_t t0)
{
	uint64_t dt = pp_now_ns() - t0;

	t->stats.stage_ns += dt > t->wait_in_call ? dt - t->wait_in_call : 0;
	t->wait_in_call = 0;
}

PP_API int pp_transfer_get_stats(struct pp_transfer *t, struct pp_transfer_stats *stats_p)
{
	struct pp_transfer_stats st;

	for (uint32_t i = 0; i < t->nslots && !t->in_place; i++) {
		struct tslot *s = &t->slots[i];

		if (s->counting && pp_event_synchronize(s->t_wanted) == 0 &&
		    pp_event_synchronize(s->t_done) == 0)
			pp_transfer_count_times(t, s);
	}
	st = t->stats;
	st.hidden_share = st.copy_ns > 0 ? 1.0 - (double)st.exposed_ns / (double)st.copy_ns : NAN;
	*stats_p = st;
	return 0;
}
