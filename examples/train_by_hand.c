/*
 * examples/train_by_hand.c: a training loop written by hand (not pinpipe's
 * bundled nn) that consumes pinpipe's device-resident batches: softmax
 * regression on Fashion-MNIST, 784 inputs to 10 classes, plain SGD.
 *
 * The loader normalises the images to float32 on its workers; the transfer
 * stage puts each batch on the device and makes the compute stream wait for
 * it.  The matrix products run on the device: OpenBLAS on the CPU (devices
 * "cpu" and "sim"), cuBLAS on a GPU (built with -DEXAMPLE_CUDA), enqueued on
 * the same stream; the softmax and the bias, 10 numbers a sample, are done
 * on the host.
 *
 *   cc train_by_hand.c $(pkg-config --cflags --libs pinpipe openblas) -o train_by_hand
 *   cc -DEXAMPLE_CUDA train_by_hand.c $(pkg-config --cflags --libs pinpipe openblas) \
 *      -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcublas -lcudart -o train_by_hand_cuda
 *   ./train_by_hand [DATA_DIR] [DEVICE] [EPOCHS]
 *
 * Exits 0 when the test accuracy is above 75%.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>
#include <pinpipe/pinpipe.h>
#ifdef EXAMPLE_CUDA
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#endif

#define IN 784
#define OUT 10
#define BATCH 100
#define LR 0.1f

/* The model: W on the device (IN x OUT, row-major), the bias and scratch on the host. */
struct model {
	struct pp_device *dev;
	struct pp_stream *stream;
	int on_gpu;              /* cuBLAS, else CBLAS on device memory the host can read */
	float *w;                /* device: IN x OUT weights */
	float *logits_dev;       /* device: BATCH x OUT */
	float *grad_dev;         /* device: BATCH x OUT, d loss / d logits */
	float b[OUT];            /* host: bias */
	float logits[BATCH * OUT];
	float grad[BATCH * OUT];
#ifdef EXAMPLE_CUDA
	cublasHandle_t blas;
#endif
};

static void check(int ret, const char *what)
{
	if (ret < 0) {
		fprintf(stderr, "train_by_hand: %s: %s\n", what, pp_last_error());
		exit(1);
	}
}

/* logits = X W, on the device's stream, then brought to the host. */
static void forward(struct model *m, const float *x, int n)
{
	if (!m->on_gpu) {
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, OUT, IN, 1.0f, x, IN,
			    m->w, OUT, 0.0f, m->logits, OUT);
		return;
	}
#ifdef EXAMPLE_CUDA
	/* cuBLAS is column-major: row-major logits (n x OUT) is the column-major
	 * OUT x n matrix W^T X^T, and row-major W and X are W^T and X^T to it. */
	const float one = 1.0f, zero = 0.0f;
	cublasSgemm(m->blas, CUBLAS_OP_N, CUBLAS_OP_N, OUT, n, IN, &one, m->w, OUT, x, IN, &zero,
		    m->logits_dev, OUT);
	check(pp_memcpy_async(m->logits, m->logits_dev, (size_t)n * OUT * sizeof(float), PP_COPY_D2H,
			      m->stream), "copy logits");
	check(pp_stream_synchronize(m->stream), "forward");
#endif
}

/* W -= LR X^T grad, on the device's stream. */
static void update(struct model *m, const float *x, int n)
{
	if (!m->on_gpu) {
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, IN, OUT, n, -LR, x, IN, m->grad,
			    OUT, 1.0f, m->w, OUT);
		return;
	}
#ifdef EXAMPLE_CUDA
	const float alpha = -LR, one = 1.0f;
	check(pp_memcpy_async(m->grad_dev, m->grad, (size_t)n * OUT * sizeof(float), PP_COPY_H2D,
			      m->stream), "copy gradient");
	/* Column-major W^T (OUT x IN) += alpha grad^T (OUT x n) X (n x IN). */
	cublasSgemm(m->blas, CUBLAS_OP_N, CUBLAS_OP_T, OUT, IN, n, &alpha, m->grad_dev, OUT, x, IN,
		    &one, m->w, OUT);
#endif
}

/*
 * One batch: the softmax of logits + b, the mean cross-entropy, and when
 * training the gradient and the update.  Returns the correct predictions.
 */
static int step(struct model *m, struct pp_device_batch *bt, int train, double *loss)
{
	int n = (int)bt->size, right = 0;

	/* CPU code reads the batch where the device put it: wait for the copy (sim). */
	if (!m->on_gpu)
		check(pp_event_synchronize(bt->ready), "batch");
	forward(m, bt->samples, n);
	for (int i = 0; i < n; i++) {
		float *z = m->logits + i * OUT, *g = m->grad + i * OUT, max = -INFINITY, sum = 0;
		int y = bt->host_labels[i], arg = 0;

		for (int k = 0; k < OUT; k++) {
			z[k] += m->b[k];
			if (z[k] > max) {
				max = z[k];
				arg = k;
			}
		}
		for (int k = 0; k < OUT; k++)
			sum += expf(z[k] - max);
		*loss += logf(sum) - (z[y] - max);
		right += arg == y;
		for (int k = 0; k < OUT; k++)
			g[k] = (expf(z[k] - max) / sum - (k == y)) / (float)n;
	}
	if (train) {
		for (int i = 0; i < n; i++)
			for (int k = 0; k < OUT; k++)
				m->b[k] -= LR * m->grad[i * OUT + k];
		update(m, bt->samples, n);
	}
	return right;
}

/* One pass over a split; returns the accuracy. */
static double pass(struct model *m, struct pp_dataset *ds, int train, uint64_t epoch, double *loss)
{
	struct pp_loader_config lc = {
		.dataset = ds, .batch_size = BATCH, .shuffle = train, .seed = 1, .workers = 1,
		.device = m->dev, .pin_memory = true,
		.dtype = PP_DTYPE_F32, .mean = { 0.2860f }, .std = { 0.3530f },
	};
	struct pp_loader *loader;
	struct pp_transfer *xfer;
	struct pp_device_batch *b;
	long right = 0, seen = 0;
	int ret;

	check(pp_loader_create(&lc, &loader), "loader");
	struct pp_transfer_config tc = { .loader = loader, .device = m->dev };
	check(pp_transfer_create(&tc, &xfer), "transfer");
	check(pp_transfer_begin_epoch(xfer, epoch), "epoch");
	*loss = 0;
	while ((ret = pp_transfer_next(xfer, m->stream, &b)) == 1) {
		right += step(m, b, train, loss);
		seen += b->size;
		check(pp_transfer_release(xfer, b, m->stream), "release");
	}
	check(ret, "next");
	check(pp_stream_synchronize(m->stream), "stream");
	pp_transfer_destroy(xfer);
	pp_loader_destroy(loader);
	*loss /= (double)seen;
	return (double)right / (double)seen;
}

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : "/usr/share/datasets/fashion-mnist";
	const char *device = argc > 2 ? argv[2] : "auto";
	int epochs = argc > 3 ? atoi(argv[3]) : 2;
	struct pp_dataset *train, *test;
	struct model m;
	double loss, acc = 0;

	memset(&m, 0, sizeof(m));
	check(pp_dataset_open_dir(dir, "train", &train), dir);
	check(pp_dataset_open_dir(dir, "test", &test), dir);
	check(pp_device_open(device, &m.dev), device);
	check(pp_stream_create(m.dev, &m.stream), "stream");
	m.on_gpu = pp_device_get_props(m.dev)->cuda_streams;
#ifndef EXAMPLE_CUDA
	if (m.on_gpu) {
		fprintf(stderr, "train_by_hand: built without -DEXAMPLE_CUDA; use device cpu or sim\n");
		return 1;
	}
#else
	if (m.on_gpu && (cublasCreate(&m.blas) != CUBLAS_STATUS_SUCCESS ||
			 cublasSetStream(m.blas, (cudaStream_t)pp_stream_cuda_handle(m.stream)) !=
				 CUBLAS_STATUS_SUCCESS)) {
		fprintf(stderr, "train_by_hand: cuBLAS could not start\n");
		return 1;
	}
#endif
	/* W starts at zero (softmax regression needs no symmetry breaking). */
	check(pp_device_alloc(m.dev, IN * OUT * sizeof(float), (void **)&m.w), "weights");
	check(pp_device_alloc(m.dev, BATCH * OUT * sizeof(float), (void **)&m.logits_dev), "logits");
	check(pp_device_alloc(m.dev, BATCH * OUT * sizeof(float), (void **)&m.grad_dev), "gradient");
	{
		static const float zeros[IN * OUT];

		check(pp_memcpy_async(m.w, zeros, sizeof(zeros), PP_COPY_H2D, m.stream), "init");
		check(pp_stream_synchronize(m.stream), "init");
	}
	for (int e = 0; e < epochs; e++) {
		double train_acc = pass(&m, train, 1, (uint64_t)e, &loss);

		printf("epoch %d: train loss %.4f acc %.4f", e + 1, loss, train_acc);
		acc = pass(&m, test, 0, 0, &loss);
		printf(", test loss %.4f acc %.4f (%s)\n", loss, acc, pp_device_get_props(m.dev)->name);
	}
#ifdef EXAMPLE_CUDA
	if (m.on_gpu)
		cublasDestroy(m.blas);
#endif
	pp_device_free(m.dev, m.grad_dev);
	pp_device_free(m.dev, m.logits_dev);
	pp_device_free(m.dev, m.w);
	pp_stream_destroy(m.stream);
	pp_device_close(m.dev);
	pp_dataset_destroy(test);
	pp_dataset_destroy(train);
	return acc > 0.75 ? 0 : 1;
}
