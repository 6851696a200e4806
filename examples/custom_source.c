/*
 * examples/custom_source.c [DEVICE]: data of your own through pinpipe: token windows (inputs,
 * targets = inputs shifted), a transform masking a random token, batches copied to DEVICE (sim).
 */
#include <pinpipe/pinpipe.h>
#include <stdio.h>
#include <string.h>

#define T 64        /* tokens a window */
#define NTOK 100000 /* tokens in the corpus */

static uint16_t corpus[NTOK];

/* Window i: tokens i*T .. i*T+T, as inputs[T] and targets[T]. */
static int read_window(void *ctx, void *wctx, const struct pp_sample *s)
{
	const uint16_t *w = corpus + s->index * T;
	uint16_t *in = s->fields[0], *tg = s->fields[1];
	(void)ctx, (void)wctx;
	for (int k = 0; k < T; k++)
		in[k] = w[k], tg[k] = w[k + 1];
	return 0;
}

/* Masks one input token (0 is the mask), drawn from the sample's own generator. */
static int mask_one(void *ctx, const struct pp_sample *s)
{
	(void)ctx;
	return ((uint16_t *)s->fields[0])[pp_rng_below(s->rng, T)] = 0;
}

/* Copies n bytes of a device batch to the host, once the work on 'compute' is done. */
static int read_back(struct pp_device *dev, struct pp_stream *compute, void *dst, const void *src,
		     size_t n)
{
	if (pp_device_get_props(dev)->host_is_device)
		return memcpy(dst, src, n), 0;
	int ret = pp_memcpy_async(dst, src, n, PP_COPY_D2H, compute);
	return ret < 0 ? ret : pp_stream_synchronize(compute);
}

int main(int argc, char **argv)
{
	static const struct pp_source_ops ops = { .read = read_window };
	const struct pp_transform mask = { .name = "mask", .apply = mask_one };
	struct pp_layout layout = { .nfields = 2, .fields = {
		{ .name = "inputs", .dtype = PP_DTYPE_U16, .ndim = 1, .shape = { T } },
		{ .name = "targets", .dtype = PP_DTYPE_U16, .ndim = 1, .shape = { T } } } };
	struct pp_source_desc desc = { .name = "windows", .count = (NTOK - 1) / T,
				       .layout = &layout, .ops = &ops };
	struct pp_loader_config cfg = { .batch_size = 32, .shuffle = true, .seed = 1, .workers = 2,
					.pin_memory = true, .transforms = &mask, .ntransforms = 1 };
	const char *name = argc > 1 ? argv[1] : "sim";
	struct pp_source *src;
	struct pp_device *dev; struct pp_stream *compute;
	struct pp_loader *l; struct pp_transfer *t; struct pp_device_batch *b;
	uint64_t windows = 0, shifted = 0, want;
	int ret;

	for (int i = 0; i < NTOK; i++)
		corpus[i] = (uint16_t)(1 + i % 50000);
	if (pp_source_create(&desc, &src) < 0 || pp_device_open(name, &dev) < 0 ||
	    pp_stream_create(dev, &compute) < 0)
		goto fail;
	cfg.source = src;
	cfg.device = dev;
	if (pp_loader_create(&cfg, &l) < 0 || pp_transfer_create(&(struct pp_transfer_config){
		.loader = l, .device = dev }, &t) < 0 || pp_transfer_begin_epoch(t, 0) < 0)
		goto fail;
	while ((ret = pp_transfer_next(t, compute, &b)) == 1) {
		/* a trainer enqueues its step on 'compute' here; this one reads the batch back */
		uint16_t in[32 * T], tg[32 * T];
		size_t n = (size_t)b->size * T * sizeof(uint16_t);
		if (read_back(dev, compute, in, b->fields[0], n) < 0 ||
		    read_back(dev, compute, tg, b->fields[1], n) < 0)
			goto fail;
		for (uint32_t i = 0; i < b->size; i++)
			for (int k = 1; k < T; k++)
				shifted += in[i * T + k] == 0 || in[i * T + k] == tg[i * T + k - 1];
		windows += b->size;
		pp_transfer_release(t, b, compute);
	}
	if (ret < 0)
		goto fail;
	want = windows * (T - 1);
	printf("%llu windows of %d tokens on %s; targets = inputs shifted: %s\n",
	       (unsigned long long)windows, T, name, shifted == want ? "yes" : "NO");
	pp_transfer_destroy(t);
	pp_loader_destroy(l);
	pp_stream_destroy(compute);
	pp_device_close(dev);
	pp_source_destroy(src);
	return shifted == want ? 0 : 1;
fail:
	fprintf(stderr, "custom_source: %s\n", pp_last_error());
	return 1;
}
