/*
 * trainer/pinning.c: what pinning bought, and the host's load
 * (trainer/pinning.h).  The hidden share of each row is its own mode's:
 * a pageable copy's time, as timed, includes the host's staging of it,
 * which overlaps compute, so pageable can show more of its (longer) copy
 * hidden than pinned does while its steps take longer.  The step's time
 * is the comparison.
 */
#include "config.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/cpu.h"
#include "common/hostload.h"
#include "trainer/pinning.h"

static double *waits;     /* [nwaits] the most each run's threads waited, by run - 1 */
static unsigned nwaits;

void tr_pinning_note_wait(unsigned run, double waiting)
{
	if (run == 0 || isnan(waiting))
		return;
	if (run > nwaits) {
		double *w = realloc(waits, run * sizeof(*w));

		if (w == NULL)
			return;
		for (unsigned i = nwaits; i < run; i++)
			w[i] = NAN;
		waits = w;
		nwaits = run;
	}
	if (isnan(waits[run - 1]) || waiting > waits[run - 1])
		waits[run - 1] = waiting;
}

void tr_pinning_free(void)
{
	free(waits);
	waits = NULL;
	nwaits = 0;
}

/* The settings of a and b alike but for --pin-memory. */
static bool pinning_pair(const struct tr_params *a, const struct tr_params *b)
{
	return a->pin_memory && !b->pin_memory && strcmp(a->device, b->device) == 0 &&
	       a->batch_size == b->batch_size && a->workers == b->workers && a->lr == b->lr &&
	       strcmp(a->model, b->model) == 0 && strcmp(a->optimizer, b->optimizer) == 0 &&
	       a->threads == b->threads;
}

/* Run 'run''s mean step time (s) and exposed copy an epoch (s) over its trained epochs; false if none. */
static bool run_means(const struct tr_results *res, unsigned run, const struct tr_params **p_p,
		      double *step_p, double *exposed_p)
{
	double step = 0, exposed = 0;
	unsigned n = 0, ne = 0;

	for (size_t i = 0; i < res->n; i++) {
		const struct tr_row *r = &res->rows[i];

		if (r->run != run || r->epoch == 0 || !(r->samples_per_s > 0))
			continue;
		*p_p = &r->p;
		step += (double)r->p.batch_size / r->samples_per_s;
		n++;
		if (!isnan(r->exposed_s)) {
			exposed += r->exposed_s;
			ne++;
		}
	}
	*step_p = n ? step / n : NAN;
	*exposed_p = ne ? exposed / ne : NAN;
	return n > 0;
}

void tr_pinning_print(const struct tr_results *res, FILE *f)
{
	unsigned runs = 0, worst_run = 0;
	double worst = NAN;

	for (size_t i = 0; i < res->n; i++)
		if (res->rows[i].run > runs)
			runs = res->rows[i].run;
	for (unsigned on = 1; on <= runs; on++) {
		const struct tr_params *pa = NULL, *pb = NULL;
		double sa, ea, sb, eb;

		if (!run_means(res, on, &pa, &sa, &ea))
			continue;
		for (unsigned off = 1; off <= runs; off++) {
			if (off == on || !run_means(res, off, &pb, &sb, &eb) || !pinning_pair(pa, pb))
				continue;
			fprintf(f, "pinpipe-train: pinning bought (run %u against run %u, %s): a step of %.3f ms pinned "
				"against %.3f ms pageable, %.1f%% %s", on, off, pa->device, sa * 1e3,
				sb * 1e3, fabs(sb - sa) / sb * 100, sa <= sb ? "less" : "MORE");
			if (!isnan(ea) && !isnan(eb))
				fprintf(f, "; copy exposed %.3f s against %.3f s an epoch", ea, eb);
			fprintf(f, "\n");
		}
	}
	for (unsigned i = 0; i < nwaits; i++)
		if (!isnan(waits[i]) && (isnan(worst) || waits[i] > worst)) {
			worst = waits[i];
			worst_run = i + 1;
		}
	if (!isnan(worst) && worst >= PP_HOSTLOAD_TOO_LOADED) {
		bool sim = false;

		for (size_t i = 0; i < res->n; i++)
			if (res->rows[i].run == worst_run && strncmp(res->rows[i].p.device, "sim", 3) == 0)
				sim = true;
		fprintf(f, "pinpipe-train: warning: host too loaded for these timings: run %u had %.2f "
			"threads waiting for a core on average in an epoch (%d cores)%s\n", worst_run, worst,
			pp_cpu_usable_cores(), sim ? "; on sim, whose copy engine and kernels are host "
			"threads, the copy and step times measure the host" : "");
	}
}
