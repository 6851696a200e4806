/*
 * bench/bench_tokens.c: tokens per second of token loaders alone, run by
 * hand, side by side in one run, on GPT-2 shards (uint16) that it writes
 * once and reads from the page cache:
 *   llmc     llm.c's loader as its llmc/dataloader.h documents it, one
 *            thread: per batch an fseek and an fread of B x T + 1 tokens,
 *            then the widening to int inputs and targets; shuffled, its
 *            permutation of a shard's batches (a Fisher-Yates here)
 *   pp       examples/llmc/dataloader.c (llm.c's interface on pinpipe) at
 *            W workers: the same int batches, read ahead; shuffled,
 *            pinpipe's plan (windows permuted over all shards)
 *   pp16     the token source through the loader at W workers, fields as
 *            stored (uint16 inputs and targets: what crosses the bus when
 *            the device widens)
 *   memcpy   one thread's plain memcpy of the same bytes as pp16 from the
 *            shards mapped and cached: each window's inputs and targets
 *            (T uint16 each) into a batch buffer, windows in order or,
 *            shuffled, drawn at random from all the shards
 *   uring    the floor of any loader that reads: one thread's io_uring
 *            reads of the same windows into a registered buffer, nothing
 *            else (in order, a batch as one read; shuffled, a read a window)
 *   nanogpt  nanoGPT's get_batch (bench/bench_tokens.py: np.memmap made
 *            every batch, B random offsets, astype(int64), torch.stack),
 *            when -p names the script
 * Tokens per second counts the B x T inputs of each batch.
 *
 *   bench_tokens [-d DIR] [-s SHARDS] [-n TOKENS] [-t SECONDS] [-T SEQ]
 *                [-p bench/bench_tokens.py] [-P PYTHON] [-S]
 * -S: the pinpipe rows with the loader's consumer never polling for a batch
 * (PP_LOADER_NO_SPIN): it sleeps for each one it waits for, as before the poll.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "examples/llmc/dataloader.h"

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static char dir[256] = "/tmp/pp-bench-tokens";
static int nshards = 4;
static long ntok = 50000000;
static double secs = 1.0;
static size_t T = 1024;
static uint32_t spin_us;  /* -S: PP_LOADER_NO_SPIN, the consumer sleeps for every batch it waits for */

static void shard_path(char *buf, size_t len, int s)
{
	snprintf(buf, len, "%s/tok_train_%06d.bin", dir, s);
}

/* Writes the shards that are missing (or of another size), then reads each once into the page cache. */
static int prepare(void)
{
	uint16_t *buf = malloc((size_t)ntok * 2);
	static char page[1 << 20];
	char path[512];

	if (buf == NULL)
		return -ENOMEM;
	mkdir(dir, 0755);
	for (int s = 0; s < nshards; s++) {
		struct stat st;
		int32_t h[256] = { 20240520, 1, (int32_t)ntok };
		FILE *f;
		shard_path(path, sizeof(path), s);
		if (stat(path, &st) != 0 || st.st_size != 1024 + ntok * 2) {
			uint64_t x = 88172645463325252ull + (uint64_t)s;
			for (long j = 0; j < ntok; j++) {
				x ^= x << 13, x ^= x >> 7, x ^= x << 17;
				buf[j] = (uint16_t)(x % 50257);
			}
			if ((f = fopen(path, "wb")) == NULL || fwrite(h, sizeof(h), 1, f) != 1 ||
			    fwrite(buf, 2, (size_t)ntok, f) != (size_t)ntok || fclose(f) != 0) {
				perror(path);
				free(buf);
				return -EIO;
			}
		}
		if ((f = fopen(path, "rb")) != NULL) {
			while (fread(page, 1, sizeof(page), f) > 0)
				;
			fclose(f);
		}
	}
	free(buf);
	return 0;
}

/* llm.c's loader for one process: batches of shard after shard until 'secs' passed; returns tokens/s. */
static double run_llmc(size_t B, int shuffle)
{
	uint16_t *buf = malloc((B * T + 1) * 2);
	int *inputs = malloc(B * T * sizeof(int)), *targets = malloc(B * T * sizeof(int));
	size_t per = (size_t)(ntok - 1) / (B * T), *perm = malloc(per * sizeof(size_t));
	uint64_t x = 42, batches = 0;
	double t0 = now_s(), t;
	long sink = 0;
	char path[512];

	for (int s = 0;; s = (s + 1) % nshards) {
		FILE *f;
		shard_path(path, sizeof(path), s);
		f = fopen(path, "rb");
		for (size_t i = 0; i < per; i++)
			perm[i] = i;
		for (size_t i = per; shuffle && i > 1; i--) {
			size_t j, tmp;
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			j = x % i;
			tmp = perm[i - 1], perm[i - 1] = perm[j], perm[j] = tmp;
		}
		for (size_t i = 0; i < per; i++) {
			fseek(f, (long)(1024 + perm[i] * B * T * 2), SEEK_SET);
			if (fread(buf, 2, B * T + 1, f) != B * T + 1)
				abort();
			for (size_t k = 0; k < B * T; k++) {
				inputs[k] = buf[k];
				targets[k] = buf[k + 1];
			}
			sink += inputs[B * T / 2] + targets[0];
			batches++;
			if ((batches & 7) == 0 && now_s() - t0 > secs)
				break;
		}
		fclose(f);
		if (now_s() - t0 > secs)
			break;
	}
	t = now_s() - t0;
	if (sink == -1)
		puts("");
	free(buf), free(inputs), free(targets), free(perm);
	return (double)batches * B * T / t;
}

/* The drop-in at 'workers' workers; returns tokens/s. */
static double run_pinpipe(size_t B, int shuffle, unsigned workers)
{
	DataLoader dl;
	char pattern[512];
	uint64_t batches = 0;
	double t0, t;
	long sink = 0;

	snprintf(pattern, sizeof(pattern), "%s/tok_train_*.bin", dir);
	if (dataloader_open(&dl, pattern, B, T, 0, 1, shuffle,
			    &(DataLoaderOptions){ .workers = workers, .spin_us = spin_us }) < 0) {
		fprintf(stderr, "bench_tokens: %s\n", pp_last_error());
		exit(1);
	}
	dataloader_next_batch(&dl); /* the first fill, and the workers' start */
	t0 = now_s();
	do {
		dataloader_next_batch(&dl);
		sink += dl.inputs[B * T / 2] + dl.targets[0];
		batches++;
	} while ((batches & 7) != 0 || now_s() - t0 < secs);
	t = now_s() - t0;
	if (sink == -1)
		puts("");
	dataloader_free(&dl);
	return (double)batches * B * T / t;
}

/* The token source as stored (uint16) at 'workers' workers; returns tokens/s. */
static double run_stored(size_t B, int shuffle, unsigned workers)
{
	struct pp_tokens_config tc = { .seq_len = (uint32_t)T };
	struct pp_loader_config cfg = { .batch_size = (uint32_t)B, .shuffle = shuffle,
					.workers = workers, .spin_us = spin_us };
	struct pp_tokens *tk;
	struct pp_loader *l;
	struct pp_batch *b;
	char pattern[512];
	uint64_t batches = 0;
	uint64_t epoch = 0;
	double t0 = 0, t;
	long sink = 0;
	int ret;

	snprintf(pattern, sizeof(pattern), "%s/tok_train_*.bin", dir);
	if (pp_tokens_open(pattern, &tc, &tk) < 0)
		goto fail;
	cfg.source = pp_tokens_source(tk);
	if (pp_loader_create(&cfg, &l) < 0 || pp_loader_begin_epoch(l, 0) < 0)
		goto fail;
	for (;;) {
		while ((ret = pp_loader_next(l, &b)) == 1) {
			sink += ((uint16_t *)b->fields[0])[B * T / 2] + ((uint16_t *)b->fields[1])[0];
			pp_loader_release(l, b);
			if (batches++ == 0)
				t0 = now_s();
			if ((batches & 7) == 0 && now_s() - t0 > secs)
				break;
		}
		if (ret < 0)
			goto fail;
		if (ret == 1 || pp_loader_begin_epoch(l, ++epoch) < 0)
			break;
	}
	t = now_s() - t0;
	if (sink == -1)
		puts("");
	pp_loader_destroy(l);
	pp_tokens_close(tk);
	return (double)(batches - 1) * B * T / t;
fail:
	fprintf(stderr, "bench_tokens: %s\n", pp_last_error());
	exit(1);
}

/*
 * memcpy of each window's inputs and targets from the cached mappings of
 * all the shards: in order shard after shard, shuffled windows drawn at
 * random from all of them (as pinpipe's plan and the uring floor draw
 * them); returns tokens/s.
 */
static double run_memcpy(size_t B, int shuffle)
{
	size_t per = (size_t)(ntok - 1) / (B * T), nwin = (size_t)(ntok - 1) / T;
	size_t len = 1024 + (size_t)ntok * 2;
	uint8_t *dst = malloc(B * T * 4), **m = calloc((size_t)nshards, sizeof(*m));
	uint64_t batches = 0, x = 7;
	double t0, t;
	char path[512];

	for (int s = 0; s < nshards; s++) {
		int fd;
		shard_path(path, sizeof(path), s);
		fd = open(path, O_RDONLY);
		m[s] = mmap(NULL, len, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
		close(fd);
		if (m[s] == MAP_FAILED)
			abort();
	}
	t0 = now_s();
	for (size_t i = 0;; i = (i + 1) % (per * (size_t)nshards)) {
		for (size_t k = 0; k < B; k++) {
			size_t s = i / per, w = i % per * B + k;
			const uint8_t *src;
			if (shuffle) {
				x ^= x << 13, x ^= x >> 7, x ^= x << 17;
				s = x % (uint64_t)nshards;
				w = x / (uint64_t)nshards % nwin;
			}
			src = m[s] + 1024 + w * T * 2;
			memcpy(dst + k * T * 2, src, T * 2);
			memcpy(dst + (B + k) * T * 2, src + 2, T * 2);
		}
		__asm__ volatile("" : : "r"(dst) : "memory");
		batches++;
		if ((batches & 7) == 0 && now_s() - t0 > secs)
			break;
	}
	t = now_s() - t0;
	for (int s = 0; s < nshards; s++)
		munmap(m[s], len);
	free(m);
	free(dst);
	return (double)batches * B * T / t;
}

/*
 * The floor of a loader that reads: one thread's io_uring reads of the same
 * windows into a registered buffer, nothing else (no split, no widening, no
 * hand-over).  In order, a batch's B x T + 1 tokens as one read; shuffled,
 * B reads of T + 1 tokens at random windows of all shards, all of a batch
 * in flight at once.  Returns tokens/s, or 0 where io_uring is refused.
 */
static double run_uring(size_t B, int shuffle)
{
	size_t nwin = (size_t)(ntok - 1) / T, per = nwin / B, win = (T + 1) * 2;
	size_t cap = B * win > (B * T + 1) * 2 ? B * win : (B * T + 1) * 2;
	uint64_t batches = 0, x = 7;
	struct io_uring ring;
	struct iovec iov;
	int fds[64], n = nshards < 64 ? nshards : 64;
	double t0, t;
	char path[512];

	if (io_uring_queue_init((unsigned)B, &ring, 0) < 0)
		return 0;
	iov.iov_len = cap;
	if (posix_memalign(&iov.iov_base, 4096, cap) || io_uring_register_buffers(&ring, &iov, 1) < 0)
		abort();
	for (int s = 0; s < n; s++) {
		shard_path(path, sizeof(path), s);
		if ((fds[s] = open(path, O_RDONLY)) < 0)
			abort();
	}
	t0 = now_s();
	for (size_t i = 0;; i = (i + 1) % (per * (size_t)n)) {
		struct io_uring_cqe *cqe;
		unsigned head, seen = 0, want = shuffle ? (unsigned)B : 1;
		for (unsigned k = 0; k < want; k++) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
			size_t s = i / per, w = i % per * B, len = (B * T + 1) * 2;
			if (shuffle) {
				x ^= x << 13, x ^= x >> 7, x ^= x << 17;
				s = x % (uint64_t)n;
				w = x / (uint64_t)n % nwin;
				len = win;
			}
			io_uring_prep_read_fixed(sqe, fds[s], (char *)iov.iov_base + k * win,
						 (unsigned)len, 1024 + w * T * 2, 0);
		}
		if (io_uring_submit_and_wait(&ring, want) < 0)
			abort();
		io_uring_for_each_cqe(&ring, head, cqe) {
			if (cqe->res <= 0)
				abort();
			seen++;
		}
		io_uring_cq_advance(&ring, seen);
		if (seen != want)
			abort();
		batches++;
		if ((batches & 7) == 0 && now_s() - t0 > secs)
			break;
	}
	t = now_s() - t0;
	for (int s = 0; s < n; s++)
		close(fds[s]);
	io_uring_queue_exit(&ring);
	free(iov.iov_base);
	return (double)batches * B * T / t;
}

/* nanoGPT's get_batch through the script; tokens/s, or 0 when it cannot run. */
static double run_nanogpt(const char *python, const char *script, size_t B)
{
	char cmd[1024], path[512];
	double v = 0;
	FILE *p;

	shard_path(path, sizeof(path), 0);
	snprintf(cmd, sizeof(cmd), "%s %s %s %zu %zu %g", python, script, path, B, T, secs);
	if ((p = popen(cmd, "r")) == NULL)
		return 0;
	if (fscanf(p, "%lf", &v) != 1)
		v = 0;
	pclose(p);
	return v;
}

int main(int argc, char **argv)
{
	const char *script = NULL, *python = "/usr/bin/python3";
	static const size_t bs[] = { 8, 16, 32, 64 };
	int c;

	while ((c = getopt(argc, argv, "d:s:n:t:T:p:P:S")) != -1) {
		switch (c) {
		case 'd': snprintf(dir, sizeof(dir), "%s", optarg); break;
		case 's': nshards = atoi(optarg); break;
		case 'n': ntok = atol(optarg); break;
		case 't': secs = atof(optarg); break;
		case 'T': T = (size_t)atol(optarg); break;
		case 'p': script = optarg; break;
		case 'P': python = optarg; break;
		case 'S': spin_us = PP_LOADER_NO_SPIN; break;
		default:
			fprintf(stderr, "usage: bench_tokens [-d DIR] [-s SHARDS] [-n TOKENS] "
				"[-t SECONDS] [-T SEQ] [-p bench/bench_tokens.py] [-P PYTHON] [-S]\n");
			return 2;
		}
	}
	if (nshards < 1 || ntok < 2 || T < 1 || secs <= 0 || prepare() < 0)
		return 1;
	printf("%d shards of %ld uint16 tokens in %s, T = %zu, %.1f s a run; Mtok/s of inputs; "
	       "the consumer's poll %s\n", nshards, ntok, dir, T, secs,
	       spin_us ? "off (-S)" : "as the loader's default");
	printf("%3s %7s %8s %8s %7s %7s %8s %8s %7s %7s %7s %7s %7s %7s %7s\n", "B", "shuffle",
	       "nanogpt", "llmc", "pp w=1", "pp w=2", "pp16 w1", "pp16 w2", "memcpy", "uring",
	       "w1/llmc", "w2/llmc", "16w1/cp", "16w2/cp", "ur/cp");
	for (size_t i = 0; i < sizeof(bs) / sizeof(bs[0]); i++) {
		for (int shuffle = 0; shuffle < 2; shuffle++) {
			double ng = script && shuffle ? run_nanogpt(python, script, bs[i]) : 0;
			double lc = run_llmc(bs[i], shuffle);
			double p1 = run_pinpipe(bs[i], shuffle, 1);
			double p2 = run_pinpipe(bs[i], shuffle, 2);
			double s1 = run_stored(bs[i], shuffle, 1);
			double s2 = run_stored(bs[i], shuffle, 2);
			double mc = run_memcpy(bs[i], shuffle);
			double ur = run_uring(bs[i], shuffle);
			printf("%3zu %7s %8.1f %8.1f %7.0f %7.0f %8.0f %8.0f %7.0f %7.0f %7.2f %7.2f %7.2f "
			       "%7.2f %7.2f\n", bs[i], shuffle ? "yes" : "no", ng / 1e6, lc / 1e6, p1 / 1e6,
			       p2 / 1e6, s1 / 1e6, s2 / 1e6, mc / 1e6, ur / 1e6, p1 / lc, p2 / lc, s1 / mc,
			       s2 / mc, ur / mc);
			fflush(stdout);
		}
	}
	return 0;
}
