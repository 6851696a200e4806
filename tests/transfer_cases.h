/*
 * tests/transfer_cases.h: the transfer-stage tests that every device with a
 * queue of its own passes (sim and cuda), shared by tests/test_transfer.c
 * and tests/test_transfer_cuda.c.
 */
#ifndef PP_TESTS_TRANSFER_CASES_H
#define PP_TESTS_TRANSFER_CASES_H

#include <check.h>
#include <stdbool.h>
#include <stdint.h>

#include "pinpipe/transfer.h"

/*
 * Adds to 's' a test case named 'tcase_name' that runs each shared test
 * once on every device of names[0..n-1] (which must outlive the suite).
 */
void pp_transfer_cases_add(Suite *s, const char *tcase_name, const char *const *names, int n);

/* A synthetic dataset, a loader on it through 'dev', and a transfer stage on both. */
struct pp_tfix {
	struct pp_device *dev;
	struct pp_dataset *ds;
	struct pp_loader *loader;
	struct pp_transfer *t;
	struct pp_stream *compute;
	struct pp_loader_config cfg; /* the loader's settings */
};

/*
 * Opens device 'name' and builds the fixture: 'count' uint8 samples of
 * 1x28x28 in batches of 'batch', shuffled, 2 workers, output 'dtype'
 * (0: as stored), ring pinned when 'pin', a stage of 'depth' and 'slots'.
 * Fails the test on error.
 */
void pp_tfix_open(struct pp_tfix *f, const char *name, uint64_t count, uint32_t batch,
		  enum pp_dtype dtype, bool pin, uint32_t depth, uint32_t slots);

/*
 * Makes *st the counters since *s0 (taken from the same stage earlier), with
 * the hidden share of those (NaN when nothing was timed).
 */
void pp_tstats_sub(struct pp_transfer_stats *st, const struct pp_transfer_stats *s0);

/* Destroys what pp_tfix_open() built, in reverse order. */
void pp_tfix_close(struct pp_tfix *f);

/*
 * A checker of the batches a stage hands out, with a reference loader of the
 * same settings but no device and no workers.  pp_tcheck_epoch() begins an
 * epoch on the reference.  pp_tcheck_batch() checks 'b' and gives it back on
 * f->compute: it is the reference's next batch (epoch, index, ids, size), its
 * host labels equal the dataset's, and the
 * device samples and labels, read back on the compute stream after 'delay_us'
 * of synthetic compute, equal the dataset's.  The read-back is checked on the
 * stream later; pp_tcheck_finish() waits for every check, fails the test on
 * any mismatch, frees the checker and returns the batches checked.
 */
struct pp_tcheck;
struct pp_tcheck *pp_tcheck_create(struct pp_tfix *f);
void pp_tcheck_epoch(struct pp_tcheck *c, uint64_t epoch);
/* Skips the reference's next n batches. */
void pp_tcheck_skip(struct pp_tcheck *c, uint64_t n);
void pp_tcheck_batch(struct pp_tcheck *c, struct pp_device_batch *b, uint32_t delay_us);
uint64_t pp_tcheck_finish(struct pp_tcheck *c);

#endif
