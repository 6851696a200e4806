/*
 * tests/fuzz_pack.c: a libFuzzer target for pinpipe-pack's command line.
 * Its parser is the option loop of main() in tools/pack.c, included here
 * with main renamed: the input, split at NUL bytes, is the argument list
 * (tests/fuzz_argv.h).  An argument holding a '/' is not passed on: the
 * files a command line names are then only names in the current directory,
 * where no dataset lies, so that a command line that parses fails at its
 * first input and nothing is read from devices or written outside.
 * Any crash, leak, sanitizer report or hang is a bug; rejection is not.
 * Built by `make fuzz` (tests/fuzz.inc); replayed over
 * tests/corpus/fuzz_pack by `make check` through tests/fuzz_replay.c.
 */
#include "config.h"

#include "tests/fuzz_argv.h"

int pinpipe_pack_main(int argc, char **argv);
#define main pinpipe_pack_main
#include "tools/pack.c"
#undef main

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
	struct fuzz_argv a;

	if (memchr(data, '/', len) != NULL)
		return 0;
	fuzz_argv_make(&a, "pinpipe-pack", data, len);
	optind = 0;
	pinpipe_pack_main(a.argc, a.argv);
	fflush(stdout);
	fuzz_argv_free(&a);
	return 0;
}
