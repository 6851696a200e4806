/*
 * bench/bench_jpeg.c: images/s of JPEG decoding, run by hand (figures in
 * bench/README.md; the JPEGs from bench/make_jpegs.py, torchvision's side
 * from bench/bench_jpeg.py):
 *   - libjpeg-turbo alone, one thread, each file from memory decoded whole
 *     to RGB (tjDecompress2, the library's defaults): the single-core rate
 *     that N workers can at best multiply by N;
 *   - pp_jpeg_decode on one thread, eval (Resize + CenterCrop) and train
 *     (RandomResizedCrop + flip), from memory;
 *   - the loader over the ImageFolder source (files read by the workers,
 *     page cache warm), both modes, at each worker count given: one loader
 *     a worker count, its rounds epochs of it, as a trainer's.
 * Each figure is the best of ROUNDS, in images per second of the wall
 * clock and per second of CPU time (the thread's for one thread, the
 * process's for the loader: its workers and the waiting consumer), the
 * per-core figure that other programs on a shared machine disturb less.
 *
 *   bench/bench_jpeg DIR [SIZE] [ROUNDS] [WORKERS,...]   (224, 3, 1,2)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <turbojpeg.h>

#include "pinpipe/pinpipe.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* CPU seconds of this thread (CLOCK_THREAD_CPUTIME_ID) or of the process. */
static double cpu_s(clockid_t clock)
{
	struct timespec ts;
	clock_gettime(clock, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The best of a round's wall and CPU rates. */
struct rate {
	double wall, cpu;
};

static void rate_update(struct rate *r, uint64_t n, double wall_s, double cpu_s)
{
	r->wall = n / wall_s > r->wall ? n / wall_s : r->wall;
	r->cpu = n / cpu_s > r->cpu ? n / cpu_s : r->cpu;
}

static uint8_t *slurp(const char *path, size_t *len_p)
{
	FILE *f = fopen(path, "rb");
	uint8_t *b;
	long n;

	if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0)
		exit((fprintf(stderr, "bench_jpeg: %s: cannot read\n", path), 1));
	b = malloc((size_t)n);
	if (b == NULL || fread(b, 1, (size_t)n, f) != (size_t)n)
		exit((fprintf(stderr, "bench_jpeg: %s: cannot read\n", path), 1));
	fclose(f);
	*len_p = (size_t)n;
	return b;
}

/*
 * The loader over the folder, made once for a worker count and kept for its
 * rounds, as a trainer keeps its loader for its epochs: the ring's memory,
 * its first touch and the threads' start are no part of an epoch's rate.
 */
static struct pp_loader *loader_make(const struct pp_source *src, unsigned workers)
{
	struct pp_loader_config cfg = { .source = src, .batch_size = 64, .shuffle = true, .seed = 1,
					.workers = workers };
	struct pp_loader *l;

	if (pp_loader_create(&cfg, &l) < 0)
		exit((fprintf(stderr, "bench_jpeg: %s\n", pp_last_error()), 1));
	return l;
}

/* One epoch of the loader into *r. */
static void loader_epoch(struct pp_loader *l, uint64_t epoch, struct rate *r)
{
	struct pp_batch *b;
	uint64_t n = 0;
	double t0, c0;
	int ret;

	t0 = now_s();
	c0 = cpu_s(CLOCK_PROCESS_CPUTIME_ID);
	if (pp_loader_begin_epoch(l, epoch) < 0)
		exit((fprintf(stderr, "bench_jpeg: %s\n", pp_last_error()), 1));
	while ((ret = pp_loader_next(l, &b)) == 1) {
		n += b->size - b->padding;
		pp_loader_release(l, b);
	}
	if (ret < 0)
		exit((fprintf(stderr, "bench_jpeg: %s\n", pp_last_error()), 1));
	rate_update(r, n, now_s() - t0, cpu_s(CLOCK_PROCESS_CPUTIME_ID) - c0);
}

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : NULL;
	uint32_t size = argc > 2 ? (uint32_t)atoi(argv[2]) : 224;
	int rounds = argc > 3 ? atoi(argv[3]) : 3;
	const char *wlist = argc > 4 ? argv[4] : "1,2";
	struct pp_image_folder *f;
	struct pp_jpeg_config jc = { .size = size, .mode = PP_JPEG_EVAL };
	uint64_t n;
	uint8_t **files, *pix, *out;
	size_t *lens, maxpix = 0;
	tjhandle tj = tjInitDecompress();
	struct rate best = { 0 };
	double mean_px = 0;

	if (dir == NULL || rounds < 1)
		return fprintf(stderr, "usage: bench_jpeg DIR [SIZE] [ROUNDS] [WORKERS,...]\n"), 2;
	if (pp_image_folder_open(dir, &jc, &f) < 0)
		return fprintf(stderr, "bench_jpeg: %s\n", pp_last_error()), 1;
	n = pp_image_folder_count(f);
	files = calloc(n, sizeof(*files));
	lens = calloc(n, sizeof(*lens));
	for (uint64_t i = 0; i < n; i++) {
		int w, h, ss, cs;
		files[i] = slurp(pp_image_folder_path(f, i), &lens[i]);
		tjDecompressHeader3(tj, files[i], lens[i], &w, &h, &ss, &cs);
		maxpix = (size_t)w * h > maxpix ? (size_t)w * h : maxpix;
		mean_px += (double)w * h / n;
	}
	pix = malloc(maxpix * 3);
	out = malloc(3 * size * size);
	printf("%llu JPEGs, %.0f pixels on average (%.0f x %.0f at 4:3), %s\n",
	       (unsigned long long)n, mean_px, __builtin_sqrt(mean_px * 4 / 3),
	       __builtin_sqrt(mean_px * 3 / 4), dir);
	for (int r = 0; r < rounds; r++) {
		double t0 = now_s(), c0 = cpu_s(CLOCK_THREAD_CPUTIME_ID);
		for (uint64_t i = 0; i < n; i++) {
			int w, h, ss, cs;
			tjDecompressHeader3(tj, files[i], lens[i], &w, &h, &ss, &cs);
			if (tjDecompress2(tj, files[i], lens[i], pix, w, 0, h, TJPF_RGB, 0) < 0)
				return fprintf(stderr, "bench_jpeg: %s\n", tjGetErrorStr2(tj)), 1;
		}
		rate_update(&best, n, now_s() - t0, cpu_s(CLOCK_THREAD_CPUTIME_ID) - c0);
	}
	printf("libjpeg-turbo, whole image to RGB, one thread: %.0f images/s, %.0f per CPU second "
	       "(best of %d)\n", best.wall, best.cpu, rounds);
	for (int mode = 0; mode < 2; mode++) {
		struct pp_jpeg_config mc = { .size = size,
					     .mode = mode ? PP_JPEG_TRAIN : PP_JPEG_EVAL };
		struct pp_jpeg_decoder *d;
		struct rate b2 = { 0 };
		pp_jpeg_decoder_create(&mc, &d);
		for (int r = 0; r < rounds; r++) {
			double t0 = now_s(), c0 = cpu_s(CLOCK_THREAD_CPUTIME_ID);
			for (uint64_t i = 0; i < n; i++) {
				struct pp_rng rng;
				pp_rng_init(&rng, 1, (uint64_t)r, i);
				if (pp_jpeg_decode(d, files[i], lens[i], &rng, out) < 0)
					return fprintf(stderr, "bench_jpeg: %s\n", pp_last_error()), 1;
			}
			rate_update(&b2, n, now_s() - t0, cpu_s(CLOCK_THREAD_CPUTIME_ID) - c0);
		}
		printf("pp_jpeg_decode, %s, one thread, from memory: %.0f images/s, %.0f per CPU "
		       "second (%.2fx libjpeg-turbo's whole decode; per CPU second %.2fx)\n",
		       mode ? "RandomResizedCrop(S) + flip" : "Resize(S*8/7) + CenterCrop(S)", b2.wall,
		       b2.cpu, b2.wall / best.wall, b2.cpu / best.cpu);
		pp_jpeg_decoder_destroy(d);
	}
	for (int mode = 0; mode < 2; mode++) {
		struct pp_jpeg_config mc = { .size = size,
					     .mode = mode ? PP_JPEG_TRAIN : PP_JPEG_EVAL };
		struct pp_image_folder *g;
		char ws[256], *save = NULL;
		pp_image_folder_open(dir, &mc, &g);
		snprintf(ws, sizeof(ws), "%s", wlist);
		for (char *t = strtok_r(ws, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
			unsigned w = (unsigned)atoi(t);
			struct rate b3 = { 0 };
			struct pp_loader *l = loader_make(pp_image_folder_source(g), w);

			for (int r = 0; r < rounds; r++)
				loader_epoch(l, (uint64_t)r, &b3);
			pp_loader_destroy(l);
			printf("loader, ImageFolder, %s, %u workers: %.0f images/s (%.0f%% of %u x "
			       "libjpeg-turbo's one-thread whole decode), %.0f per CPU second (%.0f%% "
			       "of its)\n",
			       mode ? "RandomResizedCrop(S) + flip" : "Resize(S*8/7) + CenterCrop(S)", w,
			       b3.wall, 100 * b3.wall / (best.wall * (w ? w : 1)), w ? w : 1, b3.cpu,
			       100 * b3.cpu / best.cpu);
		}
		pp_image_folder_close(g);
	}
	for (uint64_t i = 0; i < n; i++)
		free(files[i]);
	free(files);
	free(lens);
	free(pix);
	free(out);
	tjDestroy(tj);
	pp_image_folder_close(f);
	return 0;
}
