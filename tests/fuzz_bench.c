/*
 * tests/fuzz_bench.c: a libFuzzer target for pinpipe-bench's command line,
 * parse_args() in tools/bench.c (included here, its main renamed,
 * so that the static parser is reached without running a benchmark): the
 * input, split at NUL bytes, is the argument list (tests/fuzz_argv.h).
 * Any crash, leak, sanitizer report or hang is a bug; rejection is not.
 * Built by `make fuzz` (tests/fuzz.inc); replayed over
 * tests/corpus/fuzz_bench by `make check` through tests/fuzz_replay.c.
 */
#include "config.h"

#include "tests/fuzz_argv.h"

int pinpipe_bench_main(int argc, char **argv);
#define main pinpipe_bench_main
#include "tools/bench.c"
#undef main

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
	struct options o;
	struct fuzz_argv a;

	fuzz_argv_make(&a, "pinpipe-bench", data, len);
	if (parse_args(a.argc, a.argv, &o) == 0 && (o.nsizes < 1 || o.nsizes > MAX_SIZES))
		abort();
	fflush(stdout);
	fuzz_argv_free(&a);
	return 0;
}
