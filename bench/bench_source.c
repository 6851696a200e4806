/*
 * bench/bench_source.c: what a source of one's own costs per sample, run by
 * hand.  A source that copies Fashion-MNIST-sized samples (u8[1,28,28] and
 * an int32 label) out of memory, through the loader sample by sample
 * (read) and in bulk (read_batch), at 1..N workers, against a hand-written
 * loop that fills the same slots in the same order on one thread: the
 * gathers of the loader's own plan, with nothing around them.
 *
 *   bench_source [-n SAMPLES] [-b BATCH] [-e EPOCHS] [-w MAX_WORKERS] [-f]
 *
 * -f converts the image to float32 (normalize), as a trainer on the CPU
 * asks.  Prints one line per run: ns per sample (wall clock / samples) and,
 * for the loader, its ratio to the hand-written loop's ns per sample
 * divided by the workers (1.00: no overhead at all).  Workers = 0 is the
 * like-for-like figure: the consumer's thread fills each batch, as the hand
 * loop does; at W workers the ratio says how close W workers come to W
 * such loops, the hand-off of batches between threads included.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pinpipe/pinpipe.h"

#define SAMPLE 784

static uint8_t *images;
static int32_t *labels;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int read_one(void *ctx, void *wctx, const struct pp_sample *s)
{
	(void)ctx, (void)wctx;
	memcpy(s->fields[0], images + s->index * SAMPLE, SAMPLE);
	*(int32_t *)s->fields[1] = labels[s->index];
	return 0;
}

static int read_bulk(void *ctx, void *wctx, const uint64_t *ids, size_t n, void *const *fields)
{
	uint8_t *img = fields[0];
	int32_t *lab = fields[1];

	(void)ctx, (void)wctx;
	for (size_t k = 0; k < n; k++) {
		memcpy(img + k * SAMPLE, images + ids[k] * SAMPLE, SAMPLE);
		lab[k] = labels[ids[k]];
	}
	return 0;
}

/* One epoch of the loader: wall seconds; the ids seen go to order[] when it is not NULL. */
static double loader_epoch(struct pp_loader *l, uint64_t epoch, uint64_t *order)
{
	struct pp_batch *b;
	double t0 = now_s();
	size_t at = 0;
	int ret;

	if (pp_loader_begin_epoch(l, epoch) < 0)
		return -1;
	while ((ret = pp_loader_next(l, &b)) == 1) {
		if (order != NULL)
			memcpy(order + at, b->ids, b->size * sizeof(uint64_t));
		at += b->size;
		pp_loader_release(l, b);
	}
	return ret < 0 ? -1 : now_s() - t0;
}

int main(int argc, char **argv)
{
	uint64_t n = 60000;
	uint32_t bs = 100, epochs = 5, maxw = 2;
	bool f32 = false;
	struct pp_layout lay = { .nfields = 2, .fields = {
		{ .name = "image", .dtype = PP_DTYPE_U8, .ndim = 3, .shape = { 1, 28, 28 },
		  .normalize = true },
		{ .name = "labels", .dtype = PP_DTYPE_I32 } } };
	static const struct pp_source_ops ops1 = { .read = read_one };
	static const struct pp_source_ops opsb = { .read_batch = read_bulk };
	struct pp_loader_config cfg = { .batch_size = 0, .shuffle = true, .seed = 1 };
	uint64_t *order;
	uint8_t *slot;
	int32_t *slot_lab;
	float *slotf;
	double hand = 1e30;
	int c;

	while ((c = getopt(argc, argv, "n:b:e:w:f")) != -1) {
		switch (c) {
		case 'n': n = strtoull(optarg, NULL, 10); break;
		case 'b': bs = (uint32_t)strtoul(optarg, NULL, 10); break;
		case 'e': epochs = (uint32_t)strtoul(optarg, NULL, 10); break;
		case 'w': maxw = (uint32_t)strtoul(optarg, NULL, 10); break;
		case 'f': f32 = true; break;
		default:
			fprintf(stderr, "usage: bench_source [-n SAMPLES] [-b BATCH] [-e EPOCHS] "
				"[-w MAX_WORKERS] [-f]\n");
			return 2;
		}
	}
	if (n == 0 || bs == 0 || epochs == 0) {
		fprintf(stderr, "bench_source: -n, -b and -e must be at least 1\n");
		return 2;
	}
	images = malloc(n * SAMPLE);
	labels = malloc(n * sizeof(int32_t));
	order = malloc(n * sizeof(uint64_t));
	slot = aligned_alloc(64, (size_t)bs * SAMPLE * 4);
	slot_lab = malloc(bs * sizeof(int32_t));
	slotf = (float *)slot;
	if (images == NULL || labels == NULL || order == NULL || slot == NULL || slot_lab == NULL)
		return 1;
	for (uint64_t i = 0; i < n; i++) {
		labels[i] = (int32_t)(i % 10);
		for (int j = 0; j < SAMPLE; j++)
			images[i * SAMPLE + j] = (uint8_t)(i * 7 + j);
	}
	cfg.batch_size = bs;
	cfg.dtype = f32 ? PP_DTYPE_F32 : 0;

	for (int bulk = 0; bulk < 2; bulk++) {
		struct pp_source_desc d = { .name = "bench", .count = n, .layout = &lay,
					    .num_classes = 10, .ops = bulk ? &opsb : &ops1 };
		struct pp_source *src;
		if (pp_source_create(&d, &src) < 0)
			goto fail;
		cfg.source = src;
		for (uint32_t w = 0; w <= maxw; w++) {
			struct pp_loader *l;
			double best = 1e30;
			cfg.workers = w;
			if (pp_loader_create(&cfg, &l) < 0)
				goto fail;
			/* the hand loop gathers the loader's own order of epoch 0 */
			if (w == 0 && bulk == 0 && loader_epoch(l, 0, order) < 0)
				goto fail;
			for (uint32_t e = 0; e < epochs; e++) {
				double t = loader_epoch(l, e + 1, NULL);
				if (t < 0)
					goto fail;
				best = t < best ? t : best;
			}
			pp_loader_destroy(l);
			if (w == 0 && bulk == 0) {
				/* the same slots, filled by one plain loop: a gather and, with -f, the conversion */
				for (uint32_t e = 0; e < epochs; e++) {
					double t0 = now_s(), t;
					for (uint64_t i = 0; i < n; i += bs) {
						uint32_t m = (uint32_t)(n - i < bs ? n - i : bs);
						for (uint32_t k = 0; k < m; k++) {
							const uint8_t *src8 = images + order[i + k] * SAMPLE;
							if (f32)
								for (int j = 0; j < SAMPLE; j++)
									slotf[k * SAMPLE + j] = src8[j] * (1.0f / 255.0f);
							else
								memcpy(slot + (size_t)k * SAMPLE, src8, SAMPLE);
							slot_lab[k] = labels[order[i + k]];
						}
						__asm__ volatile("" : : "r"(slot), "r"(slot_lab) : "memory");
					}
					t = now_s() - t0;
					hand = t < hand ? t : hand;
				}
				printf("hand_loop threads=1 %s ns_per_sample=%.1f\n", f32 ? "f32" : "u8",
				       hand * 1e9 / (double)n);
			}
			printf("source %s workers=%u %s ns_per_sample=%.1f ratio_to_hand_per_worker=%.2f\n",
			       bulk ? "read_batch" : "read", w, f32 ? "f32" : "u8",
			       best * 1e9 / (double)n, best / (hand / (w ? w : 1)));
		}
		pp_source_destroy(src);
	}
	free(images), free(labels), free(order), free(slot), free(slot_lab);
	return 0;
fail:
	fprintf(stderr, "bench_source: %s\n", pp_last_error());
	return 1;
}
