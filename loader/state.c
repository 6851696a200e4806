/*
 * loader/state.c: what every thread of a loader does to the state they
 * share (struct pp_loader, under its mutex), below the files that run
 * them: the memory budget (create.c, ring.c, window.c, worker.c), the
 * first error, which wakes every waiter (ring.c, worker.c, window.c), and
 * whether a fill must give up (worker.c, window.c), the workers woken from
 * their slots, and a worker's counters added to the loader's.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "common/common_impl.h"
#include "loader/loader_impl.h"

/* Adds 'bytes' to the loader's memory and checks the budget. */
int pp_loader_budget_add(struct pp_loader *l, const struct pp_loader_config *cfg, size_t bytes,
			 const char *what)
{
	if (!pp_add_size(l->memory_bytes, bytes, &l->memory_bytes) ||
	    (cfg->memory_budget != 0 && l->memory_bytes > cfg->memory_budget))
		return pp_error(-ENOMEM, "loader: memory budget of %zu bytes exceeded: %zu bytes "
				"needed so far, of which %zu for %s", cfg->memory_budget,
				l->memory_bytes, bytes, what);
	return 0;
}

/* Records the first error of a worker; the caller holds mu. */
void pp_loader_error_record(struct pp_loader *l, int err)
{
	if (l->err == 0) {
		l->err = err;
		snprintf(l->errmsg, sizeof(l->errmsg), "%s", pp_last_error());
		__atomic_store_n(&l->failed, 1, __ATOMIC_RELEASE);
	}
	pthread_cond_broadcast(&l->cond_ready);
	pp_loader_wake_slots(l);
	pthread_cond_broadcast(&l->cond_window);
	pthread_cond_broadcast(&l->cond_work);
}

/* Whether a fill should give up: the epoch ends, the loader stops, or a worker failed. Caller holds mu. */
bool pp_loader_must_quit(const struct pp_loader *l)
{
	return l->cancel || l->stop || l->err != 0;
}

/* Wakes every worker waiting for a slot.  Caller holds mu. */
void pp_loader_wake_slots(struct pp_loader *l)
{
	for (uint32_t i = 0; l->slots != NULL && i < l->depth; i++)
		pthread_cond_broadcast(&l->slots[i].freed);
}

/* Adds a worker's counters to the loader's and clears them.  Caller holds mu. */
void pp_loader_work_collect(struct pp_loader *l, struct pp_loader_worker *wk)
{
	l->stats.read_ns += wk->work.read_ns;
	l->stats.decode_ns += wk->work.decode_ns;
	l->stats.bytes_read += wk->work.bytes_read;
	l->stats.chunks_decoded += wk->work.chunks;
	l->stats.fill_ns += wk->fill_ns;
	l->stats.slot_wait_ns += wk->slot_wait_ns;
	memset(&wk->work, 0, sizeof(wk->work));
	wk->fill_ns = 0;
	wk->slot_wait_ns = 0;
}
