/*
 * tests/fuzz_train.c: a libFuzzer target for pinpipe-train's command line,
 * tr_options_parse() in trainer/options.c, and the grid it spans: the input,
 * split at NUL bytes, is the argument list (tests/fuzz_argv.h).  When it
 * parses, the number of runs and the parameters of the first and the last
 * run are computed too, as pinpipe-train does before it starts.
 * Any crash, leak, sanitizer report or hang is a bug; rejection is not.
 * Built by `make fuzz` (tests/fuzz.inc); replayed over
 * tests/corpus/fuzz_train by `make check` through tests/fuzz_replay.c.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>

#include "tests/fuzz_argv.h"
#include "trainer/options.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
	struct tr_options *opt = malloc(sizeof(*opt));
	struct tr_params p;
	struct fuzz_argv a;
	size_t runs;

	if (opt == NULL)
		abort();
	fuzz_argv_make(&a, "pinpipe-train", data, len);
	if (tr_options_parse(a.argc, a.argv, opt) == 0) {
		runs = tr_options_runs(opt);
		if (runs == 0)
			abort();
		tr_options_run_params(opt, 0, &p);
		tr_options_run_params(opt, runs - 1, &p);
	}
	fflush(stdout);
	fuzz_argv_free(&a);
	free(opt);
	return 0;
}
