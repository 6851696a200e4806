/*
 * tests/fuzz_argv.h: turns a fuzzer's input into a command line for the
 * targets that fuzz the tools' option parsers: the input, split at its NUL
 * bytes, gives the arguments after argv[0], each in its own allocation so
 * that a read past one's end is caught.  Also resets getopt, whose state
 * outlives a parse and would otherwise point into the last input's freed
 * arguments.
 */
#ifndef PP_TESTS_FUZZ_ARGV_H
#define PP_TESTS_FUZZ_ARGV_H

#include <getopt.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_MAX_ARGS 32

/* A command line: argc arguments in argv (argv[argc] is NULL), each malloc'd. */
struct fuzz_argv {
	int argc;
	char *argv[FUZZ_MAX_ARGS + 2];
};

/* Builds a->argv from argv0 and the NUL-separated arguments in data; aborts if out of memory. */
static inline void fuzz_argv_make(struct fuzz_argv *a, const char *argv0, const uint8_t *data,
				  size_t len)
{
	size_t at = 0;

	a->argc = 0;
	a->argv[a->argc++] = strdup(argv0);
	while (at < len && a->argc <= FUZZ_MAX_ARGS) {
		const uint8_t *nul = memchr(data + at, 0, len - at);
		size_t n = nul != NULL ? (size_t)(nul - (data + at)) : len - at;
		char *arg = malloc(n + 1);

		if (arg == NULL)
			abort();
		memcpy(arg, data + at, n);
		arg[n] = '\0';
		a->argv[a->argc++] = arg;
		at += n + 1;
	}
	a->argv[a->argc] = NULL;
	if (a->argv[0] == NULL)
		abort();
}

/* Frees the arguments (the parser may have permuted them) and resets getopt. */
static inline void fuzz_argv_free(struct fuzz_argv *a)
{
	char *none[] = {(char *)"x", NULL};

	for (int i = 0; i < a->argc; i++)
		free(a->argv[i]);
	optind = 0;
	opterr = 0;
	getopt(1, none, "");
}

#endif
