/*
 * tests/fuzz_jpeg.c: a libFuzzer target for the JPEG path: the first input
 * byte picks the decoder (bit 0: eval or train, bit 1: grayscale or RGB,
 * bits 2-3: output size 8, 16, 24 or 32; bits 4-7: the generator's
 * index), the rest is the file, decoded by pp_jpeg_decode() with a bound
 * of 4 Mpixels.  libjpeg-turbo's errors must come back as a refusal, never
 * an exit or a crash; any crash, leak, sanitizer report or hang is a bug.
 * Built by `make fuzz` (tests/fuzz.inc); replayed over tests/corpus/fuzz_jpeg
 * by `make check` through tests/fuzz_replay.c.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>

#include "pinpipe/image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct pp_jpeg_decoder *dec[16];
	static uint8_t out[3 * 32 * 32];
	struct pp_rng rng;
	unsigned k;

	if (size < 1)
		return 0;
	k = data[0] & 15;
	if (dec[k] == NULL) {
		struct pp_jpeg_config jc = { .mode = k & 1 ? PP_JPEG_TRAIN : PP_JPEG_EVAL,
					     .channels = k & 2 ? 1 : 3, .size = 8 * (1 + (k >> 2)),
					     .max_pixels = 4u << 20 };
		if (pp_jpeg_decoder_create(&jc, &dec[k]) < 0)
			return 0; /* built without libjpeg-turbo */
	}
	pp_rng_init(&rng, 1, 0, data[0] >> 4);
	(void)pp_jpeg_decode(dec[k], data + 1, size - 1, &rng, out);
	return 0;
}
