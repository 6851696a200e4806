/*
 * tests/fuzz_replay.c: the main() that replays a fuzz target's corpus
 * without libFuzzer, so that any compiler (and any sanitizer, or valgrind)
 * checks the inputs found so far.  Each argument is a file, or a directory
 * whose files are read; each file goes once through the target's
 * LLVMFuzzerTestOneInput().  Exits 0, or 1 if a file cannot be read (a
 * crash is the target's own).
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);

/* Runs one file through the target; 0, or 1 after saying why it could not be read. */
static int replay_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	uint8_t *data = NULL;
	size_t len = 0, cap = 0, n;

	if (f == NULL) {
		fprintf(stderr, "fuzz_replay: %s: %s\n", path, strerror(errno));
		return 1;
	}
	do {
		if (len == cap) {
			uint8_t *bigger = realloc(data, cap = cap ? 2 * cap : 4096);

			if (bigger == NULL) {
				fprintf(stderr, "fuzz_replay: %s: out of memory\n", path);
				free(data);
				fclose(f);
				return 1;
			}
			data = bigger;
		}
		n = fread(data + len, 1, cap - len, f);
		len += n;
	} while (n > 0);
	if (ferror(f)) {
		fprintf(stderr, "fuzz_replay: %s: read error\n", path);
		free(data);
		fclose(f);
		return 1;
	}
	fclose(f);
	LLVMFuzzerTestOneInput(data, len);
	free(data);
	return 0;
}

/* Replays a file, or every file in a directory in name order; returns the files that failed. */
static int replay(const char *path, unsigned *count_p)
{
	struct dirent **names;
	struct stat st;
	int n, bad = 0;

	if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
		(*count_p)++;
		return replay_file(path);
	}
	n = scandir(path, &names, NULL, alphasort);
	if (n < 0) {
		fprintf(stderr, "fuzz_replay: %s: %s\n", path, strerror(errno));
		return 1;
	}
	for (int i = 0; i < n; i++) {
		if (names[i]->d_name[0] != '.') {
			size_t len = strlen(path) + strlen(names[i]->d_name) + 2;
			char *file = malloc(len);

			if (file == NULL) {
				bad++;
			} else {
				snprintf(file, len, "%s/%s", path, names[i]->d_name);
				bad += replay(file, count_p);
				free(file);
			}
		}
		free(names[i]);
	}
	free(names);
	return bad;
}

int main(int argc, char **argv)
{
	unsigned count = 0;
	int bad = 0;

	for (int i = 1; i < argc; i++)
		bad += replay(argv[i], &count);
	printf("fuzz_replay: %u inputs replayed, %d unreadable\n", count, bad);
	return bad == 0 ? 0 : 1;
}
