/*
 * examples/batches.c: the smallest loop over Fashion-MNIST through pinpipe's
 * loader and transfer stage.  Each batch arrives on the device (here the CPU
 * or the simulated GPU; a real GPU where there is one), and the loop prints
 * what it got and how long it waited.
 *
 *   cc batches.c $(pkg-config --cflags --libs pinpipe) -o batches
 *   ./batches [DATA_DIR] [DEVICE]        e.g. ./batches /usr/share/datasets/fashion-mnist sim
 */
#include <stdio.h>
#include <stdlib.h>

#include <pinpipe/pinpipe.h>

/* Prints the library's message for a failed call and exits. */
static void check(int ret, const char *what)
{
	if (ret < 0) {
		fprintf(stderr, "batches: %s: %s\n", what, pp_last_error());
		exit(1);
	}
}

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : "/usr/share/datasets/fashion-mnist";
	const char *device = argc > 2 ? argv[2] : "auto";
	struct pp_dataset *ds;
	struct pp_device *dev;
	struct pp_stream *compute;
	struct pp_loader *loader;
	struct pp_transfer *xfer;
	struct pp_device_batch *b;
	struct pp_transfer_stats st;
	long labels[10] = { 0 }, samples = 0;
	int ret;

	check(pp_dataset_open_dir(dir, "train", &ds), dir);
	check(pp_device_open(device, &dev), device);
	check(pp_stream_create(dev, &compute), "stream");

	/* 2 workers fill a ring of pinned host buffers with shuffled batches of 1000. */
	struct pp_loader_config lc = { .dataset = ds, .batch_size = 1000, .shuffle = true,
				       .seed = 1, .workers = 2, .device = dev, .pin_memory = true };
	check(pp_loader_create(&lc, &loader), "loader");
	/* The transfer stage copies each batch to the device ahead of its use. */
	struct pp_transfer_config tc = { .loader = loader, .device = dev };
	check(pp_transfer_create(&tc, &xfer), "transfer");

	check(pp_transfer_begin_epoch(xfer, 0), "epoch");
	while ((ret = pp_transfer_next(xfer, compute, &b)) == 1) {
		/* b->samples and b->labels are in device memory; host copies of the labels
		 * and the sample ids stay valid until the batch is released. */
		for (uint32_t i = 0; i < b->size; i++)
			labels[b->host_labels[i]]++;
		samples += b->size;
		if (b->index % 10 == 0)
			printf("batch %3llu: %u samples of %zu bytes, first sample id %llu, label %d\n",
			       (unsigned long long)b->index, b->size, b->sample_bytes,
			       (unsigned long long)b->host_ids[0], b->host_labels[0]);
		/* A trainer would enqueue its work on 'compute' here; the slot is reused
		 * only once that stream has passed this point. */
		check(pp_transfer_release(xfer, b, compute), "release");
	}
	check(ret, "next");
	check(pp_transfer_get_stats(xfer, &st), "stats");
	printf("%ld samples on %s; per class:", samples, pp_device_get_props(dev)->name);
	for (int k = 0; k < 10; k++)
		printf(" %ld", labels[k]);
	printf("\nwaited %.3f ms for data, copied %.1f MB\n", st.wait_ns / 1e6, st.bytes / 1e6);

	pp_transfer_destroy(xfer);
	pp_loader_destroy(loader);
	pp_stream_destroy(compute);
	pp_device_close(dev);
	pp_dataset_destroy(ds);
	return samples == 60000 ? 0 : 1;
}
