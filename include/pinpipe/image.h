/*
 * pinpipe/image.h: JPEG images decoded and augmented on the loader's
 * workers, with libjpeg-turbo (Debian's libturbojpeg0-dev; without it at
 * configure time every function here refuses with -ENOTSUP and a message
 * naming the package).
 *
 * A JPEG decoder (struct pp_decoder, named "jpeg") turns a record holding
 * a JPEG file's bytes into a field of uint8 pixels, channels x size x size
 * (CHW), cropped and resized while it decodes, since a field has one shape:
 *   train  torchvision's RandomResizedCrop(size, scale=(0.08, 1),
 *          ratio=(3/4, 4/3)), its ten tries and its centre-crop fallback,
 *          then RandomHorizontalFlip(0.5), drawn from the sample's generator
 *          (s->rng): the same crop for the same (seed, epoch, index),
 *          whatever the worker, rank or resume;
 *   eval   Resize(size * 8 / 7) (the shorter side) then CenterCrop(size).
 * The image is decoded at the smallest of the library's DCT scales (1/1,
 * 1/2, 1/4, 1/8) that still holds the crop at its output size or more
 * (only the crop's rows and columns, where pinpipe was built with
 * libjpeg-turbo's libjpeg API too: Debian's libjpeg62-turbo-dev; the same
 * pixels), and resized from there bilinearly (pixel centres, as
 * align_corners=False; 8-bit weights, within one value of the exact one).
 * A file that is truncated, corrupt (a libjpeg-turbo warning is an error:
 * never a partly grey image), empty, not a JPEG, CMYK, or larger than
 * max_pixels is refused with a message; the loader names the shard and
 * record, the folder source the file.
 *
 * The folder source reads torchvision's ImageFolder layout: ROOT/CLASS/FILE
 * with FILE ending in .jpg or .jpeg (any case), in CLASS or in folders
 * below it, classes sorted by name, labels their index; within a class the
 * folders in the order of their paths and each one's files by name, as
 * torchvision walks them.  Names sort as Python sorts them: by code point,
 * strcmp()'s order for UTF-8, a byte that is no UTF-8 (a Latin-1 name) as
 * U+DC80..U+DCFF, between U+D7FF and U+E000, as os.fsdecode() makes it
 * under a UTF-8 locale or C/POSIX (Python 3.7's default); under another,
 * such as ISO-8859-1, Python's order of those names is strcmp()'s.
 *
 *	struct pp_jpeg_config jc = { .size = 224, .channels = 3, .mode = PP_JPEG_TRAIN };
 *	struct pp_image_folder *f;
 *	pp_image_folder_open("imagenet/train", &jc, &f);
 *	cfg.source = pp_image_folder_source(f);   ... pp_loader_create(&cfg, &l) ...
 */
#ifndef PINPIPE_IMAGE_H
#define PINPIPE_IMAGE_H

#include <stdint.h>

#include "pinpipe/common.h"
#include "pinpipe/source.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How an image becomes the output square. */
enum pp_jpeg_mode {
	PP_JPEG_TRAIN = 0, /* RandomResizedCrop(size) + RandomHorizontalFlip */
	PP_JPEG_EVAL = 1,  /* Resize(size * 8 / 7) + CenterCrop(size) */
};

/* The default bound of an image's pixels (width x height, as its header says). */
#define PP_JPEG_MAX_PIXELS (64u << 20)

/* What a JPEG decoder makes. */
struct pp_jpeg_config {
	uint32_t size;        /* output height and width, 8..4096 */
	uint32_t channels;    /* 3 (RGB) or 1 (grayscale); 0: 3 */
	enum pp_jpeg_mode mode;
	uint64_t max_pixels;  /* images with more pixels are refused before any
	                         allocation; 0: PP_JPEG_MAX_PIXELS */
};

struct pp_jpeg_decoder;

/*
 * Creates a JPEG decoder.  Returns 0 and the decoder in *d_p, or -EINVAL (a
 * setting out of range, named), -ENOTSUP (built without libjpeg-turbo) or
 * -ENOMEM.
 */
PP_API int pp_jpeg_decoder_create(const struct pp_jpeg_config *cfg, struct pp_jpeg_decoder **d_p);

/* Frees the decoder and the libjpeg-turbo state of every thread it ran on; NULL is allowed. */
PP_API void pp_jpeg_decoder_destroy(struct pp_jpeg_decoder *d);

/*
 * Returns the decoder as the loader takes it (pp_loader_config.decoders):
 * named "jpeg", it writes the layout's field "image" (else its first
 * field), which must be uint8 [channels][size][size].  Valid while the
 * decoder lives; the decoder must outlive the loaders that use it.
 */
PP_API const struct pp_decoder *pp_jpeg_decoder_get(const struct pp_jpeg_decoder *d);

/*
 * Writes the layout of the decoder's samples to *lay: "image", uint8
 * [channels][size][size], normalize; then, with 'labels', "labels", int32.
 * Returns 0 or -EINVAL (a bad configuration, named).
 */
PP_API int pp_jpeg_layout(const struct pp_jpeg_config *cfg, bool labels, struct pp_layout *lay);

/*
 * Decodes one JPEG file's bytes into 'out' (channels x size x size uint8,
 * CHW) as the decoder does for a sample with generator 'rng' (train mode
 * draws from it; eval mode does not).  For tools and tests; thread-safe.
 * Returns 0, -EBADMSG (not a JPEG, truncated, corrupt), -E2BIG (over
 * max_pixels), -ENOTSUP (CMYK, or no libjpeg-turbo) or -ENOMEM, with a message.
 */
PP_API int pp_jpeg_decode(const struct pp_jpeg_decoder *d, const void *jpeg, size_t len,
			  struct pp_rng *rng, uint8_t *out);

struct pp_image_folder;

/*
 * Whether 'dir' looks like a folder of JPEGs (torchvision's ImageFolder):
 * JPEG files (.jpg or .jpeg, either case) in DIR/train/CLASS/ or in
 * DIR/CLASS/, or in folders under a class (8 deep at most) where the root
 * holds folders alone (beside a dataset's own files, a deep JPEG is a
 * sample or a preview, no class's).  For programs that choose how to open a --data directory;
 * answers without libjpeg-turbo too.
 */
PP_API bool pp_image_folder_probe(const char *dir);

/*
 * Lists the ImageFolder at 'root' (ROOT/CLASS/FILE.jpg or .jpeg, also in
 * folders under a class, in torchvision's order: the folders by path, each
 * one's files by name; a folder reached through two names is listed under
 * both, as torchvision lists it; a link to a folder that holds it, a loop,
 * is refused with -ELOOP) and makes a
 * source of it, whose samples ("image" by cfg, "labels") each worker reads
 * from its file (pread, whole) and decodes as pp_jpeg_decode() does.
 * Returns 0 and the folder in *f_p, or -ENOENT (no such directory, no
 * class, or a class without an image, as torchvision refuses), -EINVAL, -ENOTSUP or -ENOMEM, with a message.
 */
PP_API int pp_image_folder_open(const char *root, const struct pp_jpeg_config *cfg,
				struct pp_image_folder **f_p);

/* Frees the folder and its source; NULL is allowed. */
PP_API void pp_image_folder_close(struct pp_image_folder *f);

/* Returns the folder's source (pp_loader_config.source), valid while the folder is open. */
PP_API const struct pp_source *pp_image_folder_source(const struct pp_image_folder *f);

/* Returns the number of images. */
PP_API uint64_t pp_image_folder_count(const struct pp_image_folder *f);

/* Returns the number of classes (the subdirectories of the root). */
PP_API uint32_t pp_image_folder_classes(const struct pp_image_folder *f);

/* Returns the name of class i (0..classes-1), or NULL. */
PP_API const char *pp_image_folder_class(const struct pp_image_folder *f, uint32_t i);

/*
 * Returns the path of image i (0..count-1, in the source's order: by class,
 * then by folder and name, as pp_image_folder_open() lists them), or NULL.
 */
PP_API const char *pp_image_folder_path(const struct pp_image_folder *f, uint64_t i);

/* Returns the label of image i, or -1 for an index out of range. */
PP_API int32_t pp_image_folder_label(const struct pp_image_folder *f, uint64_t i);

/*
 * Checks that folder 'b' (an evaluation split) has the classes of 'a' (the
 * training split), by name and in order, so that a label names one class
 * in both: each folder labels its images by its own sorted classes, as
 * torchvision's ImageFolder does, so a class missing from one shifts the
 * labels of the classes after it.  Returns 0, or -EINVAL with a message
 * naming both roots and the first class that differs.
 */
PP_API int pp_image_folder_same_classes(const struct pp_image_folder *a,
					const struct pp_image_folder *b);

#ifdef __cplusplus
}
#endif
#endif
