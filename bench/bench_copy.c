/*
 * bench/bench_copy.c: host-to-device copy bandwidth and the time the host
 * is blocked, from pinned and from pageable memory, on any device
 * ("sim", "sim:bw=4GB/s", "cuda").  Each run copies --total bytes in
 * --chunk pieces round-robin over --streams streams, from a 64 MiB ring of
 * host memory into a 64 MiB ring of device memory per stream (larger than
 * the caches, as a loader's ring is), and reports throughput (issue to last completion), the host's time inside
 * the copy calls per copy, and its share of the wall time.  Memcpy within
 * the host is measured alongside, as the ceiling of this machine.
 *
 *   bench_copy [--device NAME] [--chunk MiB] [--total MiB] [--streams N] [--reps N]
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pinpipe/device.h"

struct options {
	const char *device; /* device name */
	size_t chunk;       /* bytes per copy */
	size_t total;       /* bytes per run */
	int streams;        /* streams copies are spread over */
	int reps;           /* runs per mode; the median is reported */
};

/* Bytes of the host ring and of each stream's device ring. */
#define RING_BYTES ((size_t)64 << 20)

struct run_result {
	double gbps;         /* bytes / wall time, GB/s */
	double blocked_us;   /* host time inside pp_memcpy_async per copy, µs */
	double blocked_share; /* host_blocked / wall */
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static int fail(const char *what, int ret)
{
	fprintf(stderr, "bench_copy: %s: %s (%s)\n", what, pp_strerror(ret), pp_last_error());
	return 1;
}

/* Chunks in a ring. */
static size_t ring_chunks(const struct options *o)
{
	size_t n = RING_BYTES / o->chunk;

	return n > 0 ? n : 1;
}

/* One run: total bytes from the ring 'host' in chunks to the rings 'dbuf[stream]'. */
static int run_once(const struct options *o, struct pp_device *dev, struct pp_stream **s,
		    void **dbuf, const uint8_t *host, struct run_result *r)
{
	struct pp_device_stats st0, st1;
	size_t n = o->total / o->chunk, ring = ring_chunks(o);
	double t0, t1;
	int ret;

	pp_device_get_stats(dev, &st0);
	t0 = now_s();
	for (size_t i = 0; i < n; i++) {
		int k = (int)(i % (size_t)o->streams);
		size_t at = (i % ring) * o->chunk;
		ret = pp_memcpy_async((uint8_t *)dbuf[k] + at, host + at, o->chunk, PP_COPY_H2D, s[k]);
		if (ret < 0)
			return fail("pp_memcpy_async", ret);
	}
	for (int k = 0; k < o->streams; k++) {
		ret = pp_stream_synchronize(s[k]);
		if (ret < 0)
			return fail("pp_stream_synchronize", ret);
	}
	t1 = now_s();
	pp_device_get_stats(dev, &st1);
	r->gbps = (double)(n * o->chunk) / (t1 - t0) / 1e9;
	r->blocked_us = (double)(st1.host_blocked_ns - st0.host_blocked_ns) / 1e3 / (double)n;
	r->blocked_share = (double)(st1.host_blocked_ns - st0.host_blocked_ns) / 1e9 / (t1 - t0);
	return 0;
}

static int bench_mode(const struct options *o, struct pp_device *dev, bool pinned)
{
	struct pp_stream *s[16] = { NULL };
	void *dbuf[16] = { NULL };
	struct run_result r[64];
	double gbps[64], blocked[64], share[64];
	bool got_pinned = false;
	uint8_t *host = NULL;
	int ret, rc = 1;

	ret = pp_host_alloc(dev, ring_chunks(o) * o->chunk, pinned, (void **)&host, &got_pinned);
	if (ret < 0)
		return fail("pp_host_alloc", ret);
	if (pinned && !got_pinned)
		fprintf(stderr, "bench_copy: pinned memory refused, measuring pageable: %s\n",
			pp_last_error());
	memset(host, 0x5a, ring_chunks(o) * o->chunk);
	for (int k = 0; k < o->streams; k++) {
		ret = pp_stream_create(dev, &s[k]);
		if (ret == 0)
			ret = pp_device_alloc(dev, ring_chunks(o) * o->chunk, &dbuf[k]);
		if (ret < 0) {
			fail("stream or device buffer", ret);
			goto out;
		}
	}
	if (run_once(o, dev, s, dbuf, host, &r[0]) != 0) /* warm-up */
		goto out;
	for (int i = 0; i < o->reps; i++) {
		if (run_once(o, dev, s, dbuf, host, &r[i]) != 0)
			goto out;
		gbps[i] = r[i].gbps;
		blocked[i] = r[i].blocked_us;
		share[i] = r[i].blocked_share;
	}
	qsort(gbps, (size_t)o->reps, sizeof(double), cmp_double);
	qsort(blocked, (size_t)o->reps, sizeof(double), cmp_double);
	qsort(share, (size_t)o->reps, sizeof(double), cmp_double);
	printf("%-22s %-9s %10.2f %16.1f %14.0f%%\n", o->device, got_pinned ? "pinned" : "pageable",
	       gbps[o->reps / 2], blocked[o->reps / 2], 100 * share[o->reps / 2]);
	rc = 0;
out:
	for (int k = 0; k < o->streams; k++) {
		pp_device_free(dev, dbuf[k]);
		pp_stream_destroy(s[k]);
	}
	pp_host_free(dev, host);
	return rc;
}

/* Host memcpy of the same chunks between two rings, the ceiling of a copy on this machine. */
static void bench_memcpy(const struct options *o)
{
	size_t ring = ring_chunks(o), bytes = ring * o->chunk;
	uint8_t *a = malloc(bytes), *b = malloc(bytes);
	volatile unsigned sink = 0; /* keeps the copies from being optimised away */
	double v[64];

	if (a == NULL || b == NULL) {
		free(a);
		free(b);
		return;
	}
	memset(a, 1, bytes);
	memset(b, 2, bytes);
	for (int i = 0; i < o->reps; i++) {
		size_t n = o->total / o->chunk;
		double t0 = now_s();
		for (size_t j = 0; j < n; j++) {
			size_t at = (j % ring) * o->chunk;
			memcpy(b + at, a + at, o->chunk);
			sink = sink + b[at + j % o->chunk];
		}
		v[i] = (double)(n * o->chunk) / (now_s() - t0) / 1e9;
	}
	qsort(v, (size_t)o->reps, sizeof(double), cmp_double);
	printf("%-22s %-9s %10.2f %16s %15s\n", "host memcpy", "-", v[o->reps / 2], "-", "-");
	free(a);
	free(b);
}

static int parse_args(int argc, char **argv, struct options *o)
{
	static const struct option longopts[] = {
		{ "device", required_argument, NULL, 'd' }, { "chunk", required_argument, NULL, 'c' },
		{ "total", required_argument, NULL, 't' },  { "streams", required_argument, NULL, 's' },
		{ "reps", required_argument, NULL, 'r' },   { "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	while ((c = getopt_long(argc, argv, "d:c:t:s:r:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'd':
			o->device = optarg;
			break;
		case 'c':
			o->chunk = (size_t)(atof(optarg) * 1048576.0);
			break;
		case 't':
			o->total = (size_t)(atof(optarg) * 1048576.0);
			break;
		case 's':
			o->streams = atoi(optarg);
			break;
		case 'r':
			o->reps = atoi(optarg);
			break;
		default:
			fprintf(c == 'h' ? stdout : stderr, "usage: bench_copy [--device NAME] [--chunk MiB] [--total MiB] "
					"[--streams N (1-16)] [--reps N (1-64)]\n");
			return c == 'h' ? 0 : 2;
		}
	}
	if (o->chunk == 0 || o->total < o->chunk || o->streams < 1 || o->streams > 16 ||
	    o->reps < 1 || o->reps > 64) {
		fprintf(stderr, "bench_copy: --chunk must be > 0 and <= --total, --streams 1-16, "
				"--reps 1-64\n");
		return 2;
	}
	return -1;
}

int main(int argc, char **argv)
{
	struct options o = { "sim", 1 << 20, 512u << 20, 1, 5 };
	struct pp_device *dev;
	int ret = parse_args(argc, argv, &o);

	if (ret >= 0)
		return ret;
	ret = pp_device_open(o.device, &dev);
	if (ret < 0)
		return fail(o.device, ret);
	printf("device %s (%s): %zu copies of %.2f MiB on %d stream(s), median of %d\n",
	       pp_device_get_props(dev)->name, pp_device_get_props(dev)->description,
	       o.total / o.chunk, (double)o.chunk / 1048576.0, o.streams, o.reps);
	printf("%-22s %-9s %10s %16s %15s\n", "device", "host mem", "GB/s", "blocked us/copy",
	       "blocked share");
	ret = bench_mode(&o, dev, true);
	if (ret == 0)
		ret = bench_mode(&o, dev, false);
	if (ret == 0)
		bench_memcpy(&o);
	pp_device_close(dev);
	return ret;
}
