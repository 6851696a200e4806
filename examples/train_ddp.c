/*
 * examples/train_ddp.c: data-parallel training with pinpipe.  Each rank of
 * `mpirun -np N` loads its own share of every epoch (the loader's rank and
 * world size), trains pinpipe's MLP on it, and averages the gradient over
 * the ranks every step, bucket by bucket while the backward pass goes on
 * (pinpipe/grad_sync.h): the N ranks hold one model trained on global
 * batches of N x 100 samples.  Run alone, it is a world of one.
 *
 *   cc train_ddp.c $(pkg-config --cflags --libs pinpipe) -o train_ddp
 *   mpirun -np 2 ./train_ddp [DATA_DIR] [DEVICE] [EPOCHS]   # as root: --allow-run-as-root
 *
 * DATA_DIR holds MNIST, Fashion-MNIST or CIFAR-10 (default: Debian's Fashion-MNIST),
 * DEVICE is cpu, sim or cuda.  Rank 0 says each epoch's loss and accuracy
 * over every rank's samples;
 * at the end each rank compares its parameters with rank 0's, bit for bit.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pinpipe/pinpipe.h>

#define BATCH 100 /* samples a step on each rank */

static struct pp_comm *comm;

/* A failure on this rank ends the job: the other ranks may be waiting for it in a collective. */
static void check(int ret, const char *what)
{
	if (ret >= 0)
		return;
	fprintf(stderr, "train_ddp: rank %d: %s: %s\n", comm ? pp_comm_rank(comm) : 0, what,
		pp_last_error());
	if (comm != NULL)
		pp_comm_abort(comm, 1);
	exit(1);
}

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : "/usr/share/datasets/fashion-mnist";
	const char *device = argc > 2 ? argv[2] : "cpu";
	const int epochs = argc > 3 ? atoi(argv[3]) : 1;
	struct pp_dataset *ds;
	struct pp_device *dev;
	struct pp_stream *compute;
	struct pp_loader *loader;
	struct pp_transfer *xfer;
	struct pp_device_batch *b;
	struct pp_grad_sync *gs;
	struct pp_grad_sync_config gc;
	struct pp_grad_sync_stats st;
	struct pp_model *model;
	struct pp_model_config mc;
	int rank, size, ret;

	check(pp_comm_create(NULL, &comm), "communicator"); /* mpi under mpirun, else local */
	rank = pp_comm_rank(comm);
	size = pp_comm_size(comm);
	check(pp_dataset_open_dir(dir, "train", &ds), dir);
	check(pp_device_open(device, &dev), device);
	check(pp_stream_create(dev, &compute), "stream");
	struct pp_loader_config lc = { .dataset = ds, .batch_size = BATCH, .shuffle = true,
				       .seed = 1, .workers = 2, .device = dev, .pin_memory = true,
				       .rank = (uint32_t)rank, .world_size = (uint32_t)size };
	check(pp_loader_create(&lc, &loader), "loader");
	struct pp_transfer_config tc = { .loader = loader, .device = dev };
	check(pp_transfer_create(&tc, &xfer), "transfer");
	const struct pp_sample_info *info = pp_loader_info(loader);

	/* The model averages its gradient through the grad sync, in buckets of 64 KiB. */
	pp_grad_sync_config_init(&gc);
	gc.comm = comm;
	gc.bucket_bytes = 64 << 10;
	check(pp_grad_sync_create(&gc, &gs), "grad sync");
	pp_model_config_init(&mc);
	mc.in_channels = info->shape[0]; /* images: channels, height, width */
	mc.in_height = info->shape[1];
	mc.in_width = info->shape[2];
	mc.num_classes = info->num_classes;
	mc.stream = compute;
	check(pp_grad_sync_attach(gs, &mc), "attach");
	check(pp_model_create("mlp", dev, &mc, &model), "model");
	check(pp_grad_sync_start(gs, model), "start"); /* rank 0's parameters on every rank */
	/* Room and kernels for steps of BATCH before the first epoch: no setting up inside it. */
	check(pp_model_prepare(model, BATCH), "prepare");

	for (int epoch = 0; epoch < epochs; epoch++) {
		struct pp_model_metrics m;

		pp_model_metrics(model, true, &m);
		check(pp_transfer_begin_epoch(xfer, (uint64_t)epoch), "epoch");
		while ((ret = pp_transfer_next(xfer, compute, &b)) == 1) {
			size_t shape[4] = { b->size, info->shape[0], info->shape[1], info->shape[2] };
			struct pp_tensor *in;

			/* The CPU kernels read the batch where its copy puts it (sim): wait. */
			if (pp_device_get_props(dev)->host_addressable)
				check(pp_event_synchronize(b->ready), "batch");
			check(pp_tensor_wrap(dev, b->samples, b->dtype, 4, shape, &in), "tensor");
			check(pp_model_train_step(model, in, b->labels), "step");
			pp_tensor_destroy(in);
			check(pp_transfer_release(xfer, b, compute), "release");
		}
		check(ret, "next batch");
		check(pp_stream_synchronize(compute), "compute");
		check(pp_model_metrics(model, true, &m), "metrics");
		/* The job's figures: every rank's samples. */
		double v[3] = { m.loss_sum, (double)m.correct, (double)m.samples };
		check(pp_comm_allreduce(comm, v, 3, PP_COMM_F64, PP_COMM_SUM, NULL), "metrics");
		if (rank == 0)
			printf("epoch %d: %.0f samples on %d ranks, train loss %.4f acc %.4f\n",
			       epoch + 1, v[2], size, v[0] / v[2], v[1] / v[2]);
	}

	/* One model: every rank's parameters are rank 0's, bit for bit. */
	size_t n = pp_model_param_count(model);
	float *mine = malloc(n * sizeof(float)), *first = malloc(n * sizeof(float));
	if (mine == NULL || first == NULL)
		check(-ENOMEM, "parameters");
	check(pp_model_params_read(model, mine, n), "parameters");
	memcpy(first, mine, n * sizeof(float));
	check(pp_comm_broadcast(comm, first, n * sizeof(float), 0, NULL), "broadcast");
	pp_grad_sync_get_stats(gs, &st);
	printf("rank %d of %d: %llu steps, %llu allreduces; parameters identical to rank 0's: %s\n",
	       rank, size, (unsigned long long)st.steps, (unsigned long long)st.allreduces,
	       memcmp(mine, first, n * sizeof(float)) == 0 ? "yes" : "no");
	free(first);
	free(mine);
	pp_model_destroy(model);
	pp_grad_sync_destroy(gs);
	check(pp_comm_barrier(comm), "barrier");
	pp_comm_destroy(comm); /* before the device: mpi's staging memory of a GPU is pinned for it */
	pp_transfer_destroy(xfer);
	pp_loader_destroy(loader);
	pp_stream_destroy(compute);
	pp_device_close(dev);
	pp_dataset_destroy(ds);
	return 0;
}
