/*
 * bench/bench_decode.c: how fast the datasets module decodes and packs:
 * the Fashion-MNIST training images (gzip IDX, 47 MB decoded) through
 * pp_dataset_open_idx() against zlib's gzread() in the same process; writing
 * them as shards (zlib level 6 on one and two threads, 1, and stored) and
 * verifying and reading back those shards.
 * Prints one line per measurement, the median of RUNS runs:
 *   NAME SECONDS s MB/s MB/s
 * Usage: bench_decode [-r RUNS] [DIR]  (DIR: /usr/share/datasets/fashion-mnist)
 * bench/bench_decode.py runs it next to gzip -dc and torchvision.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "pinpipe/pinpipe.h"

#define MAX_RUNS 51

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static void report(const char *name, double *t, int runs, double bytes)
{
	qsort(t, (size_t)runs, sizeof(*t), cmp_double);
	printf("%-22s %.4f s %7.0f MB/s\n", name, t[runs / 2], bytes / 1e6 / t[runs / 2]);
	fflush(stdout);
}

static void die(const char *what)
{
	fprintf(stderr, "bench_decode: %s: %s\n", what, pp_last_error());
	exit(1);
}

int main(int argc, char **argv)
{
	const char *dir = "/usr/share/datasets/fashion-mnist";
	char images[4096], labels[4096], shard[4096], tmpdir[] = "/tmp/pinpipe-bench-XXXXXX";
	double t[MAX_RUNS], bytes = 0;
	int runs = 5, opt;

	while ((opt = getopt(argc, argv, "r:")) != -1) {
		if (opt != 'r' || (runs = atoi(optarg)) < 1 || runs > MAX_RUNS) {
			fprintf(stderr, "usage: bench_decode [-r RUNS (1..%d)] [DIR]\n", MAX_RUNS);
			return 2;
		}
	}
	if (optind < argc)
		dir = argv[optind];
	snprintf(images, sizeof(images), "%s/train-images-idx3-ubyte.gz", dir);
	snprintf(labels, sizeof(labels), "%s/train-labels-idx1-ubyte.gz", dir);
	if (access(images, R_OK) != 0) {
		fprintf(stderr, "bench_decode: %s: %s (install dataset-fashion-mnist)\n", images,
			strerror(errno));
		return 1;
	}
	if (mkdtemp(tmpdir) == NULL) {
		perror("bench_decode: mkdtemp");
		return 1;
	}
	printf("bench_decode: %s, median of %d runs, pinpipe %s\n", images, runs, pp_version());

	for (int r = 0; r < runs; r++) {
		struct pp_dataset *ds;
		double t0 = now_s();

		if (pp_dataset_open_idx(images, NULL, &ds) < 0)
			die(images);
		t[r] = now_s() - t0;
		bytes = (double)(pp_dataset_info(ds)->count * pp_dataset_info(ds)->sample_bytes);
		pp_dataset_destroy(ds);
	}
	report("pinpipe_idx_gz", t, runs, bytes);

	for (int r = 0; r < runs; r++) {
		double t0 = now_s();
		size_t cap = 16 + (size_t)bytes;
		unsigned char *buf = malloc(cap);
		gzFile f = gzopen(images, "rb");
		int n;

		if (buf == NULL || f == NULL || gzbuffer(f, 1 << 17) != 0) {
			fprintf(stderr, "bench_decode: %s: cannot read with zlib\n", images);
			return 1;
		}
		n = gzread(f, buf, (unsigned)cap);
		gzclose(f);
		t[r] = now_s() - t0;
		if (n != (int)cap) {
			fprintf(stderr, "bench_decode: %s: gzread gave %d bytes\n", images, n);
			return 1;
		}
		free(buf);
	}
	report("zlib_gzread", t, runs, bytes);

	{
		static const int levels[] = {6, 6, 1, 0};
		static const uint32_t threads[] = {1, 2, 1, 1};
		struct pp_dataset *ds;
		const struct pp_sample_info *info;
		double rec_bytes;

		if (pp_dataset_open_idx(images, labels, &ds) < 0)
			die(images);
		info = pp_dataset_info(ds);
		rec_bytes = (double)(info->count * (info->sample_bytes + 4));
		for (size_t l = 0; l < sizeof(levels) / sizeof(levels[0]); l++) {
			struct pp_shard_writer_config cfg = {.info = info, .records_per_chunk = 1024,
							     .level = levels[l],
							     .threads = threads[l]};
			char name[64];

			snprintf(shard, sizeof(shard), "%s/train-l%d.pps", tmpdir, levels[l]);
			for (int r = 0; r < runs; r++) {
				struct pp_shard_writer *w;
				double t0 = now_s();

				if (pp_shard_writer_create(shard, &cfg, &w) < 0 ||
				    pp_shard_writer_add(w, pp_dataset_samples(ds), pp_dataset_labels(ds),
							info->count) < 0 ||
				    pp_shard_writer_finish(w) < 0)
					die(shard);
				pp_shard_writer_destroy(w);
				t[r] = now_s() - t0;
			}
			snprintf(name, sizeof(name), "pack_level%d_threads%u", levels[l], threads[l]);
			report(name, t, runs, rec_bytes);
			if (threads[l] != 1) {
				unlink(shard);
				continue;
			}
			for (int r = 0; r < runs; r++) {
				struct pp_shard *sh;
				double t0 = now_s();

				if (pp_shard_open(shard, &sh) < 0 || pp_shard_verify(sh) < 0)
					die(shard);
				pp_shard_close(sh);
				t[r] = now_s() - t0;
			}
			snprintf(name, sizeof(name), "verify_level%d", levels[l]);
			report(name, t, runs, rec_bytes);
			for (int r = 0; r < runs; r++) {
				const char *paths[1] = {shard};
				struct pp_dataset *back;
				double t0 = now_s();

				if (pp_dataset_open_shards(paths, 1, &back) < 0)
					die(shard);
				t[r] = now_s() - t0;
				pp_dataset_destroy(back);
			}
			snprintf(name, sizeof(name), "open_shards_level%d", levels[l]);
			report(name, t, runs, rec_bytes);
			unlink(shard);
		}
		pp_dataset_destroy(ds);
	}
	rmdir(tmpdir);
	return 0;
}
