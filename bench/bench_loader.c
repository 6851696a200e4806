/*
 * bench/bench_loader.c: samples per second of the loader, run by hand.
 *
 *   bench_loader [options] DIR           an in-memory dataset (pp_dataset_open_dir)
 *   bench_loader [options] --shards F... a shard set, cached or streamed
 *
 * Prints one line per run ("key=value" pairs): samples/s, MB/s of output,
 * the loader's statistics and the peak RSS.  --baseline adds two reference
 * figures for the same output bytes: a plain memcpy of them into a ring of
 * batch buffers, and (for shards) inflating every chunk on one thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pinpipe/pinpipe.h"

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Peak resident memory of this process in kB (VmHWM; unlike ru_maxrss, not inherited across exec). */
static long peak_rss_kb(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kb = -1;

	if (f == NULL)
		return -1;
	while (fgets(line, sizeof(line), f) != NULL)
		if (sscanf(line, "VmHWM: %ld kB", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

/* Evicts the files from the page cache, so that the next epoch reads them from the disk. */
static void evict(char **paths, int n)
{
	for (int i = 0; i < n; i++) {
		int fd = open(paths[i], O_RDONLY);
		if (fd < 0)
			continue;
		fdatasync(fd);
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
		close(fd);
	}
}

/*
 * Runs 'epochs' epochs after one warm-up epoch; returns seconds per epoch,
 * samples in *n_p.  With 'cold', the files are evicted from the page cache
 * before every timed epoch (outside the timing).
 */
static int run(struct pp_loader *l, int epochs, char **cold, int ncold, double *secs_p,
	       uint64_t *n_p)
{
	double paused = 0;
	struct pp_batch *b;
	uint64_t n = 0;
	double t0 = 0;
	int ret;

	for (int e = 0; e <= epochs; e++) {
		if (e == 1)
			t0 = now_s();
		if (e > 0 && cold != NULL) {
			double p0 = now_s();
			evict(cold, ncold);
			paused += now_s() - p0;
		}
		if ((ret = pp_loader_begin_epoch(l, (uint64_t)e)) < 0)
			return ret;
		while ((ret = pp_loader_next(l, &b)) == 1) {
			if (e > 0)
				n += b->size;
			pp_loader_release(l, b);
		}
		if (ret < 0)
			return ret;
	}
	*secs_p = (now_s() - t0 - paused) / epochs;
	*n_p = n / (uint64_t)epochs;
	return 0;
}

/* A plain memcpy of 'bytes' in batch-sized pieces into a ring of 'slots' buffers. */
static double memcpy_seconds(size_t bytes, size_t batch_bytes, int slots, int reps)
{
	unsigned char *src = malloc(bytes), *dst = malloc(batch_bytes * (size_t)slots);
	double best = 1e9;

	memset(src, 1, bytes);
	memset(dst, 0, batch_bytes * (size_t)slots);
	for (int r = 0; r < reps; r++) {
		double t0 = now_s();
		for (size_t off = 0, k = 0; off < bytes; off += batch_bytes, k++) {
			size_t n = bytes - off < batch_bytes ? bytes - off : batch_bytes;
			memcpy(dst + (k % (size_t)slots) * batch_bytes, src + off, n);
		}
		double t = now_s() - t0;
		if (t < best)
			best = t;
	}
	if (dst[batch_bytes / 2] != 1)
		fprintf(stderr, "memcpy baseline: unexpected byte\n");
	free(src);
	free(dst);
	return best;
}

/* Reads and inflates every chunk of the shards on this thread; returns the raw bytes per second. */
static double inflate_rate(char **paths, int n)
{
	uint64_t raw = 0;
	double secs = 0;

	for (int i = 0; i < n; i++) {
		struct pp_shard *sh;
		const struct pp_sample_info *info;
		void *samples;
		int32_t *labels;
		if (pp_shard_open(paths[i], &sh) < 0)
			return -1;
		info = pp_shard_info(sh);
		samples = malloc(1024ull * 1024 * 64);
		labels = malloc(1024ull * 1024 * 4);
		for (uint64_t c = 0; c < pp_shard_chunk_count(sh); c++) {
			struct pp_shard_chunk_info ci;
			double t0 = now_s();
			pp_shard_chunk(sh, c, &ci);
			if (pp_shard_read_chunk(sh, c, samples, labels) < 0)
				return -1;
			secs += now_s() - t0;
			raw += (uint64_t)ci.records * info->sample_bytes;
		}
		free(samples);
		free(labels);
		pp_shard_close(sh);
	}
	return (double)raw / secs;
}

static void usage(void)
{
	fprintf(stderr,
		"Usage: bench_loader [-w WORKERS] [-b BATCH] [-e EPOCHS] [-d SLOTS] [-p] [-u] [-S]\n"
		"                    [-W WINDOW] [-P] [-D] [-C] [-m BUDGET_MB] [--baseline]\n"
		"                    (DIR | --shards FILE...)\n"
		"  -w workers (0)  -b batch (100)  -e timed epochs after a warm-up one (3)\n"
		"  -d ring slots (prefetch; 0, the default: 2 x workers + 2, twice that with -S)\n"
		"  -p pin_memory (ring from the cpu device's pinned allocator)  -u uint8 output\n"
		"  -S stream shards (default: decode them into memory)  -W window chunks (8)\n"
		"  -P force pread  -D O_DIRECT  -C cold: evict the shards from the page cache\n"
		"  before each timed epoch  -m memory budget in MB\n");
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "shards", no_argument, NULL, 's' },
		{ "baseline", no_argument, NULL, 'B' },
		{ NULL, 0, NULL, 0 },
	};
	struct pp_loader_config cfg = { .batch_size = 100, .shuffle = true, .seed = 1,
					.dtype = PP_DTYPE_F32, .mean = { 0.2860f },
					.std = { 0.3530f } };
	struct pp_dataset *ds = NULL;
	struct pp_device *dev = NULL;
	struct pp_loader *l = NULL;
	struct pp_loader_stats st;
	bool shards = false, baseline = false, cold = false;
	int epochs = 3, c, ret;
	double secs;
	uint64_t n;

	while ((c = getopt_long(argc, argv, "w:b:e:d:puSW:PDCm:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'w': cfg.workers = (uint32_t)atoi(optarg); break;
		case 'b': cfg.batch_size = (uint32_t)atoi(optarg); break;
		case 'd': cfg.prefetch = (uint32_t)atoi(optarg); break;
		case 'e': epochs = atoi(optarg); break;
		case 'p': cfg.pin_memory = true; break;
		case 'u': cfg.dtype = PP_DTYPE_U8; break;
		case 'S': cfg.cache = PP_LOADER_CACHE_STREAM; break;
		case 'W': cfg.window_chunks = (uint32_t)atoi(optarg); break;
		case 'P': cfg.io = PP_LOADER_IO_PREAD; break;
		case 'D': cfg.direct_io = true; break;
		case 'C': cold = true; break;
		case 'm': cfg.memory_budget = (size_t)atol(optarg) << 20; break;
		case 's': shards = true; break;
		case 'B': baseline = true; break;
		default: usage(); return c == 'h' ? 0 : 2;
		}
	}
	if (optind >= argc || epochs < 1) {
		usage();
		return 2;
	}
	if (shards) {
		cfg.shard_paths = (const char *const *)argv + optind;
		cfg.nshards = (size_t)(argc - optind);
	} else if ((ret = pp_dataset_open_dir(argv[optind], "train", &ds)) < 0) {
		fprintf(stderr, "bench_loader: %s\n", pp_last_error());
		return 1;
	} else {
		cfg.dataset = ds;
	}
	if (cfg.pin_memory && (ret = pp_device_open("cpu", &dev)) < 0) {
		fprintf(stderr, "bench_loader: %s\n", pp_last_error());
		return 1;
	}
	cfg.device = dev;
	if ((ret = pp_loader_create(&cfg, &l)) < 0 || (ret = run(l, epochs, cold && shards ? argv + optind : NULL, argc - optind,
					      &secs, &n)) < 0) {
		fprintf(stderr, "bench_loader: %s\n", pp_last_error());
		pp_loader_destroy(l);
		return 1;
	}
	pp_loader_get_stats(l, &st);
	size_t out_bytes = (size_t)n * (st.bytes / (st.samples ? st.samples : 1));
	printf("cold=%d source=%s cache=%s workers=%u pin=%d dtype=%s batch=%u samples=%llu "
	       "epoch_s=%.4f samples_per_s=%.0f out_MB_per_s=%.1f io=%s direct=%d fixed=%d pinned=%d "
	       "consumer_wait_s=%.3f read_s=%.3f decode_s=%.3f fill_s=%.3f slot_wait_s=%.3f "
	       "loader_MB=%.1f peak_rss_MB=%.1f\n",
	       cold, shards ? "shards" : "memory", shards ? (cfg.cache ? "stream" : "memory") : "-",
	       cfg.workers, cfg.pin_memory, cfg.dtype == PP_DTYPE_F32 ? "f32" : "u8",
	       cfg.batch_size, (unsigned long long)n, secs, (double)n / secs,
	       (double)out_bytes / secs / 1e6, st.io_path, st.direct_io, st.fixed_buffers, st.pinned,
	       st.consumer_wait_ns * 1e-9, st.read_ns * 1e-9, st.decode_ns * 1e-9,
	       st.fill_ns * 1e-9, st.slot_wait_ns * 1e-9, st.memory_bytes / 1e6,
	       peak_rss_kb() / 1e3);
	if (baseline) {
		size_t batch_bytes = (size_t)cfg.batch_size * (out_bytes / (n ? n : 1));
		double m = memcpy_seconds(out_bytes, batch_bytes, 4, 5);
		printf("baseline memcpy_samples_per_s=%.0f memcpy_GB_per_s=%.2f loader_vs_memcpy=%.2f\n",
		       (double)n / m, (double)out_bytes / m / 1e9, m / secs);
		if (shards)
			printf("baseline inflate_1core_MB_per_s=%.1f\n",
			       inflate_rate(argv + optind, argc - optind) / 1e6);
	}
	pp_loader_destroy(l);
	pp_device_close(dev);
	pp_dataset_destroy(ds);
	return 0;
}
