/*
 * tests/fuzz_nn.c: a libFuzzer target for the nn module's parsers of outside
 * input.  The first input byte picks the parser, the rest is its input:
 *   0 a model spec (pp_model_create on the cpu device): 3 bytes give the
 *     input shape (1..8 channels, 1..32 rows, 1..32 columns), the rest is
 *     the spec; a model that builds is trained one step and evaluated on a
 *     batch of one, when it is small enough to do so quickly
 *   1 a checkpoint file (pp_model_load on the cpu device)
 *   2 a checkpoint as in 1, with its CRC-32 made right first, so that the
 *     checks behind the CRC are reached
 * Any crash, leak, sanitizer report or hang is a bug; rejection is not.
 * Built by `make fuzz` (tests/fuzz.inc); replayed over tests/corpus/fuzz_nn
 * by `make check` through tests/fuzz_replay.c.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/common_impl.h"
#include "nn/nn_impl.h"
#include "pinpipe/device.h"
#include "pinpipe/nn.h"

/* Beyond these, a spec that builds is not run: a step would take too long for a fuzzer. */
#define FUZZ_MAX_PARAMS ((size_t)1 << 18)
#define FUZZ_MAX_ACTS ((size_t)1 << 18)
#define FUZZ_MAX_FLOPS ((size_t)1 << 24)
/*
 * Beyond this many parameters, floats of activations per sample, or floats
 * of a convolution's columns, a spec is not even built: building it would
 * take gigabytes (as asked; that is not a bug).
 */
#define FUZZ_MAX_BUILD ((size_t)1 << 22)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);

/*
 * How far a spec may go: 0 it does not parse (pp_model_create must say so),
 * 1 it parses but is too large to build here, 2 build it, 3 build it and
 * run a step.  *classes_p gets the last layer's output size.
 */
static int how_far(const char *spec, int c, int h, int w, uint32_t *classes_p)
{
	struct nn_layer *layers;
	char *expanded;
	size_t n, params = 0, acts = 0, cols = 0, flops = 0;
	int far;

	if (pp_nn_spec_parse(spec, c, h, w, &layers, &n, &expanded) != 0)
		return 0;
	for (size_t i = 0; i < n; i++) {
		params += layers[i].n_w + layers[i].n_b;
		acts += layers[i].out_size;
		if (layers[i].kind == NN_CONV)
			cols = PP_MAX(cols, layers[i].n_w / (size_t)layers[i].out_c *
						    layers[i].out_h * layers[i].out_w);
		flops += layers[i].kind == NN_CONV ? layers[i].n_w * layers[i].out_h * layers[i].out_w
						   : layers[i].n_w + layers[i].out_size;
	}
	far = params > FUZZ_MAX_BUILD || acts > FUZZ_MAX_BUILD || cols > FUZZ_MAX_BUILD ||
			      layers[n - 1].out_size > UINT32_MAX ? 1
	      : params <= FUZZ_MAX_PARAMS && acts <= FUZZ_MAX_ACTS && flops <= FUZZ_MAX_FLOPS ? 3
	      : 2;
	*classes_p = (uint32_t)layers[n - 1].out_size;
	free(layers);
	free(expanded);
	return far;
}

/* One training step and one evaluation on a batch of one sample of zeros, label 0. */
static void step(struct pp_model *model, int c, int h, int w)
{
	size_t shape[4] = {1, (size_t)c, (size_t)h, (size_t)w};
	struct pp_model_metrics metrics;
	struct pp_tensor *inputs;
	int32_t label = 0;

	if (pp_tensor_create(NULL, PP_DTYPE_U8, 4, shape, &inputs) != 0)
		abort();
	if (pp_model_train_step(model, inputs, &label) != 0)
		abort();
	if (pp_model_evaluate(model, inputs, &label, NULL) != 0)
		abort();
	if (pp_model_metrics(model, true, &metrics) != 0 || metrics.samples != 2)
		abort();
	pp_tensor_destroy(inputs);
}

static void fuzz_spec(struct pp_device *dev, const uint8_t *data, size_t len)
{
	struct pp_model_config cfg;
	struct pp_model *model;
	char *spec;
	int c, h, w, far;

	if (len < 3)
		return;
	c = data[0] % 8 + 1;
	h = data[1] % 32 + 1;
	w = data[2] % 32 + 1;
	spec = malloc(len - 3 + 1);
	if (spec == NULL)
		abort();
	memcpy(spec, data + 3, len - 3);
	spec[len - 3] = '\0';
	pp_model_config_init(&cfg);
	cfg.in_channels = (uint32_t)c;
	cfg.in_height = (uint32_t)h;
	cfg.in_width = (uint32_t)w;
	far = how_far(spec, c, h, w, &cfg.num_classes);
	if (far != 1 && pp_model_create(spec, dev, &cfg, &model) == 0) {
		if (far == 0)
			abort();
		if (far == 3)
			step(model, c, h, w);
		pp_model_destroy(model);
	}
	free(spec);
}

static void fuzz_checkpoint(struct pp_device *dev, const uint8_t *data, size_t len, int fix_crc)
{
	struct pp_model_config cfg;
	struct pp_model *model;
	char path[64];
	uint8_t *f;
	FILE *out;

	f = malloc(len + 1);
	if (f == NULL)
		abort();
	memcpy(f, data, len);
	if (fix_crc && len >= 4)
		pp_put_le32(f + len - 4, pp_crc32(0, f, len - 4));
	snprintf(path, sizeof(path), "/tmp/pp-fuzz-nn-%d", (int)getpid());
	out = fopen(path, "wb");
	if (out == NULL || (len > 0 && fwrite(f, 1, len, out) != len) || fclose(out) != 0)
		abort();
	free(f);
	pp_model_config_init(&cfg);
	if (pp_model_load(path, dev, &cfg, &model) == 0)
		pp_model_destroy(model);
	unlink(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
	struct pp_device *dev;

	if (len < 1)
		return 0;
	if (pp_device_open("cpu", &dev) != 0)
		abort();
	switch (data[0] % 3) {
	case 0:
		fuzz_spec(dev, data + 1, len - 1);
		break;
	case 1:
	case 2:
		fuzz_checkpoint(dev, data + 1, len - 1, data[0] % 3 == 2);
		break;
	}
	pp_device_close(dev);
	return 0;
}
