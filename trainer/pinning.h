/*
 * trainer/pinning.h: what pinning bought in a grid (pairs of runs that
 * differ only in --pin-memory: the step's time on against off), and
 * whether the host was too loaded for the timings to mean anything (the
 * run delay of the process's threads while they trained, common/hostload.h).
 */
#ifndef PP_TRAINER_PINNING_H
#define PP_TRAINER_PINNING_H

#include <stdio.h>

#include "trainer/results.h"

/* Notes that run 'run' had 'waiting' threads waiting for a core on average in an epoch (NAN: unknown). */
void tr_pinning_note_wait(unsigned run, double waiting);

/*
 * Prints to f (stderr, after the table, which stays the last of stdout): for each pair of runs whose settings
 * differ only in --pin-memory and which trained an epoch at least, the
 * mean step time (batch_size / samples_per_s over their epochs) on against
 * off and the exposed copy time an epoch; then, when a run had 0.25
 * threads or more waiting for a core on average (the run delay of all its
 * threads over an epoch's time), that the timings measure the host.  Prints nothing when there is neither.
 */
void tr_pinning_print(const struct tr_results *res, FILE *f);

/* Frees what tr_pinning_note_wait() kept. */
void tr_pinning_free(void);

#endif
