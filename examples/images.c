/*
 * examples/images.c: a folder of JPEGs in torchvision's ImageFolder layout
 * (DIR/train/CLASS/FILE.jpg and DIR/val/CLASS/FILE.jpg or DIR/test/...,
 * or DIR/CLASS/FILE.jpg alone) through pinpipe's loader and transfer stage.  The workers read
 * each file and decode it with libjpeg-turbo straight to SIZE x SIZE:
 * RandomResizedCrop + RandomHorizontalFlip for training, Resize +
 * CenterCrop for evaluation, as torchvision's transforms do.  The batches
 * cross to the device as uint8 (a quarter of float32's bytes); a trainer
 * normalises them there.  It prints each split's images per class and
 * the images per second of the training epoch.
 *
 *   cc images.c $(pkg-config --cflags --libs pinpipe) -o images
 *   ./images DIR [DEVICE] [SIZE]        e.g. ./images imagenet sim 224
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>

#include <pinpipe/pinpipe.h>

/* Prints the library's message for a failed call and exits. */
static void check(int ret, const char *what)
{
	if (ret < 0) {
		fprintf(stderr, "images: %s: %s\n", what, pp_last_error());
		exit(1);
	}
}

static void out_of_memory(void)
{
	fprintf(stderr, "images: out of memory\n");
	exit(1);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/*
 * One epoch of folder 'f' on 'dev': counts its images by label into
 * per_class[0..classes) and returns how many arrived, each once.
 */
static uint64_t epoch(struct pp_image_folder *f, bool train, struct pp_device *dev,
		      struct pp_stream *compute, uint64_t *per_class)
{
	struct pp_loader *loader;
	struct pp_transfer *xfer;
	struct pp_device_batch *b;
	uint64_t n = 0, count = pp_image_folder_count(f);
	char *seen = calloc(count, 1);
	int ret;

	if (seen == NULL)
		out_of_memory();
	/* The folder is the loader's source: every worker (here 2) reads and
	 * decodes whole files, into a ring of pinned host buffers. */
	struct pp_loader_config lc = { .source = pp_image_folder_source(f), .batch_size = 32,
				       .shuffle = train, .seed = 1, .workers = 2, .device = dev,
				       .pin_memory = true };
	check(pp_loader_create(&lc, &loader), "loader");
	struct pp_transfer_config tc = { .loader = loader, .device = dev };
	check(pp_transfer_create(&tc, &xfer), "transfer");
	check(pp_transfer_begin_epoch(xfer, 0), "epoch");
	while ((ret = pp_transfer_next(xfer, compute, &b)) == 1) {
		/* b->samples: b->size images of 3 x SIZE x SIZE bytes (CHW) on the device. */
		for (uint32_t i = 0; b->host_labels != NULL && i < b->size; i++) {
			if (b->host_labels[i] >= 0 &&
			    (uint32_t)b->host_labels[i] < pp_image_folder_classes(f))
				per_class[b->host_labels[i]]++;
			if (b->host_ids[i] < count && !seen[b->host_ids[i]]++)
				n++;
		}
		check(pp_transfer_release(xfer, b, compute), "release");
	}
	check(ret, "next");
	pp_transfer_destroy(xfer);
	pp_loader_destroy(loader);
	free(seen);
	return n;
}

static void report(const char *name, const struct pp_image_folder *f, uint64_t n,
		   const uint64_t *per_class)
{
	printf("%s: %llu of %llu images, %u classes:", name, (unsigned long long)n,
	       (unsigned long long)pp_image_folder_count(f), pp_image_folder_classes(f));
	for (uint32_t k = 0; k < pp_image_folder_classes(f); k++)
		printf(" %s %llu", pp_image_folder_class(f, k), (unsigned long long)per_class[k]);
	printf("\n");
}

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : NULL;
	const char *device = argc > 2 ? argv[2] : "auto";
	const uint32_t size = argc > 3 ? (uint32_t)strtoul(argv[3], NULL, 10) : 224;
	char train_dir[4096], val_dir[4096];
	const char *eval_name = "val";
	struct pp_image_folder *train, *val = NULL;
	struct pp_device *dev;
	struct pp_stream *compute;
	uint64_t *per_class, n;
	struct stat st;
	double t0;
	int ok;

	if (dir == NULL) {
		fprintf(stderr, "usage: images DIR [DEVICE] [SIZE]\n");
		return 2;
	}
	/* ImageNet's layout: train/ and val/; else the folder's classes are the training split. */
	snprintf(train_dir, sizeof(train_dir), "%s/train", dir);
	snprintf(val_dir, sizeof(val_dir), "%s/val", dir);
	if (stat(train_dir, &st) != 0 || !S_ISDIR(st.st_mode))
		snprintf(train_dir, sizeof(train_dir), "%s", dir);
	/* The split to evaluate on: val/, else test/. */
	if (stat(val_dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
		snprintf(val_dir, sizeof(val_dir), "%s/test", dir);
		eval_name = "test";
	}

	struct pp_jpeg_config jc = { .size = size, .channels = 3, .mode = PP_JPEG_TRAIN };
	check(pp_image_folder_open(train_dir, &jc, &train), "image folder");
	if (stat(val_dir, &st) == 0 && S_ISDIR(st.st_mode)) {
		struct pp_jpeg_config ev = { .size = size, .channels = 3, .mode = PP_JPEG_EVAL };

		check(pp_image_folder_open(val_dir, &ev, &val), "image folder");
		/* Each folder labels by its own sorted classes: they must be the same. */
		check(pp_image_folder_same_classes(train, val), "classes");
	}
	check(pp_device_open(device, &dev), device);
	check(pp_stream_create(dev, &compute), "stream");
	per_class = calloc(pp_image_folder_classes(train), sizeof(*per_class));
	if (per_class == NULL)
		out_of_memory();

	t0 = now_s();
	n = epoch(train, true, dev, compute, per_class);
	report("train", train, n, per_class);
	printf("%.0f images/s at %u x %u on %s\n", n / (now_s() - t0), size, size,
	       pp_device_get_props(dev)->name);
	ok = n == pp_image_folder_count(train);
	if (val != NULL) {
		for (uint32_t k = 0; k < pp_image_folder_classes(val); k++)
			per_class[k] = 0;
		n = epoch(val, false, dev, compute, per_class);
		report(eval_name, val, n, per_class);
		ok = ok && n == pp_image_folder_count(val);
	}

	free(per_class);
	pp_stream_destroy(compute);
	pp_device_close(dev);
	pp_image_folder_close(val);
	pp_image_folder_close(train);
	return ok ? 0 : 1;
}
