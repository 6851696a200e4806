/*
 * bench/bench_nn.c: throughput of a training step (forward, backward, Adam)
 * on the CPU, from a batch already in memory as float32, for a spec at a
 * batch size and thread count.  Prints samples/s, ms per step and the
 * GFLOP/s of the step's arithmetic (multiply-adds counted as 2), and the
 * samples per second of CPU time used by the process, which a machine
 * shared with other work disturbs less than the wall-clock rate.
 *
 *   bench/bench_nn SPEC BATCH THREADS [SECONDS]
 *   bench/bench_nn --sgemm     the machine's single-thread SGEMM rate at n = 1024
 *   bench/bench_nn --fmnist SPEC BATCH THREADS [SECONDS [DIR]]
 *       as the first form, on Fashion-MNIST's training images held in memory
 *       as uint8 (the model normalises them), consecutive batches in turn
 *   bench/bench_nn --epochs SPEC THREADS EPOCHS [DIR]
 *       Fashion-MNIST (DIR, default /usr/share/datasets/fashion-mnist) held
 *       in memory as uint8: EPOCHS epochs of shuffled batches of 100 with
 *       Adam lr 0.01, each timed, then the accuracy on the test set
 *
 * Compare with bench/bench_nn.py (PyTorch) at the same thread count.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/common_impl.h"
#include "nn/cpu/blas.h"
#include "nn/cpu/cpu_impl.h"
#include "pinpipe/dataset.h"

/*
 * Floating-point operations of one sample's forward and backward pass, as
 * dense layers do them (what PyTorch computes); the sparse convolution
 * backward does fewer, so this is the work done per sample, not the
 * arithmetic executed.
 */
static double step_flops(const struct pp_model *m)
{
	double f = 0.0;

	for (size_t i = 0; i < m->n_layers; i++) {
		const struct nn_layer *l = &m->layers[i];
		double fwd = 0.0;

		if (l->kind == NN_CONV)
			fwd = 2.0 * (double)l->n_w * l->out_h * l->out_w;
		else if (l->kind == NN_LINEAR)
			fwd = 2.0 * (double)l->n_w;
		/* backward: the weight gradient, and the input gradient past the first trainable layer */
		f += fwd * (l->need_din ? 3.0 : 2.0);
	}
	return f;
}

/* CPU time used by the process so far, in nanoseconds. */
static uint64_t cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* GFLOP/s of single-threaded SGEMM at 1024 x 1024 x 1024, best of 5. */
static int sgemm_peak(void)
{
	const int n = 1024;
	float *a = calloc((size_t)n * n, sizeof(float)), *b = calloc((size_t)n * n, sizeof(float));
	float *c = calloc((size_t)n * n, sizeof(float));
	struct pp_blas_info info;
	double best = 0.0;

	if (!a || !b || !c) {
		fprintf(stderr, "bench_nn: out of memory\n");
		return 1;
	}
	if (pp_blas_open() < 0) {
		fprintf(stderr, "bench_nn: %s\n", pp_last_error());
		free(a);
		free(b);
		free(c);
		return 1;
	}
	pp_blas_single_thread();
	pp_blas_get_info(&info);
	for (size_t i = 0; i < (size_t)n * n; i++)
		a[i] = b[i] = (float)(i % 7) * 0.1f;
	for (int r = 0; r < 5; r++) {
		uint64_t t0 = pp_now_ns();

		pp_blas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n,
			      0.0f, c, n);
		best = PP_MAX(best, 2.0 * n * n * n / (double)(pp_now_ns() - t0));
	}
	printf("openblas sgemm n=%d threads=1 core=%s (chosen by %s): %.1f GFLOP/s\n", n, info.core,
	       info.chosen_by, best);
	free(a);
	free(b);
	free(c);
	return 0;
}

static int open_split(const char *dir, const char *split, struct pp_dataset **ds_p)
{
	char images[4096], labels[4096];

	snprintf(images, sizeof(images), "%s/%s-images-idx3-ubyte.gz", dir, split);
	snprintf(labels, sizeof(labels), "%s/%s-labels-idx1-ubyte.gz", dir, split);
	return pp_dataset_open_idx(images, labels, ds_p);
}

/* Loss and accuracy of the model on a whole dataset, in batches of 100; 0 or -errno. */
static int test_pass(struct pp_model *m, const struct pp_dataset *ds, struct pp_tensor *x,
		     uint64_t *idx, int32_t *labels, struct pp_model_metrics *met)
{
	const size_t n = pp_dataset_info(ds)->count;
	int ret = pp_model_metrics(m, true, met);

	for (size_t b = 0; b + 100 <= n && !ret; b += 100) {
		for (size_t k = 0; k < 100; k++)
			idx[k] = b + k;
		ret = pp_dataset_gather(ds, idx, 100, pp_tensor_data(x), labels);
		if (!ret)
			ret = pp_model_evaluate(m, x, labels, NULL);
	}
	return ret ? ret : pp_model_metrics(m, true, met);
}

/* Epochs of Fashion-MNIST from memory, as the seeds' reference experiment. */
static int epochs(const char *spec, int threads, int count, const char *dir)
{
	const size_t shape[4] = { 100, 1, 28, 28 };
	struct pp_dataset *train = NULL, *test = NULL;
	struct pp_model_config cfg;
	struct pp_model *m = NULL;
	struct pp_tensor *x = NULL;
	struct pp_model_metrics met;
	uint64_t *order = NULL, idx[100], rng = 1;
	int32_t labels[100];
	size_t n;
	int ret;

	pp_model_config_init(&cfg);
	cfg.threads = threads;
	cfg.optim.lr = 0.01f;
	cfg.seed = 1;
	ret = open_split(dir, "train", &train);
	if (!ret)
		ret = open_split(dir, "t10k", &test);
	if (!ret)
		ret = pp_model_create(spec, NULL, &cfg, &m);
	if (!ret)
		ret = pp_tensor_create(NULL, PP_DTYPE_U8, 4, shape, &x);
	if (ret)
		goto out;
	n = pp_dataset_info(train)->count;
	order = malloc(n * sizeof(*order));
	if (!order) {
		ret = pp_error(-ENOMEM, "out of memory");
		goto out;
	}
	for (int e = 1; e <= count && !ret; e++) {
		uint64_t t0 = pp_now_ns(), c0 = cpu_ns();
		double s, cs;

		for (size_t i = 0; i < n; i++)
			order[i] = i;
		for (size_t i = n - 1; i > 0; i--) {
			size_t j;
			uint64_t t;

			rng = rng * 6364136223846793005ull + 1442695040888963407ull;
			j = (size_t)((rng >> 33) % (i + 1));
			t = order[i];
			order[i] = order[j];
			order[j] = t;
		}
		for (size_t b = 0; b + 100 <= n && !ret; b += 100) {
			ret = pp_dataset_gather(train, order + b, 100, pp_tensor_data(x), labels);
			if (!ret)
				ret = pp_model_train_step(m, x, labels);
		}
		s = (double)(pp_now_ns() - t0) / 1e9;
		cs = (double)(cpu_ns() - c0) / 1e9;
		if (!ret)
			ret = test_pass(m, test, x, idx, labels, &met);
		if (!ret)
			printf("pinpipe %s threads=%d epoch %d: %.2f s (%.2f s of CPU), test accuracy %.4f, loss %.4f\n",
			       spec, threads, e, s, cs, (double)met.correct / (double)met.samples,
			       met.loss_sum / (double)met.samples);
	}
out:
	if (ret)
		fprintf(stderr, "bench_nn: %s\n", pp_last_error());
	free(order);
	pp_tensor_destroy(x);
	pp_model_destroy(m);
	pp_dataset_destroy(test);
	pp_dataset_destroy(train);
	return ret ? 1 : 0;
}

/*
 * Training steps for 'seconds' after 3 warm-up steps, batch after batch of
 * 'count' batches of 'batch' samples: float32 (f32) or uint8 (u8), with
 * their labels, one after the other.  Prints the rates; 0 or 1.
 */
static int steps(const char *spec, size_t batch, int threads, double seconds, const float *f32,
		 const uint8_t *u8, const int32_t *labels, size_t count)
{
	const size_t shape[4] = { batch, 1, 28, 28 };
	struct pp_model_config cfg;
	struct pp_model *m = NULL;
	struct pp_tensor *x = NULL;
	uint64_t t0, t1, c0, c1;
	long n = 0;
	int ret;

	pp_model_config_init(&cfg);
	cfg.threads = threads;
	cfg.optim.lr = 0.01f;
	ret = pp_model_create(spec, NULL, &cfg, &m);
	for (size_t b = 0; b < count && !ret; b++) {
		ret = pp_tensor_wrap(NULL,
				     u8 ? (void *)(u8 + b * batch * 784) : (void *)(f32 + b * batch * 784),
				     u8 ? PP_DTYPE_U8 : PP_DTYPE_F32, 4, shape, &x);
		pp_tensor_destroy(x);
	}
	if (ret)
		goto out;
	t0 = pp_now_ns();
	c0 = cpu_ns();
	do {
		size_t b = (size_t)(n + 3) % count;

		ret = pp_tensor_wrap(NULL,
				     u8 ? (void *)(u8 + b * batch * 784) : (void *)(f32 + b * batch * 784),
				     u8 ? PP_DTYPE_U8 : PP_DTYPE_F32, 4, shape, &x);
		if (!ret)
			ret = pp_model_train_step(m, x, labels + b * batch);
		pp_tensor_destroy(x);
		if (ret)
			goto out;
		if (++n == 3) {
			t0 = pp_now_ns();
			c0 = cpu_ns();
		}
		t1 = pp_now_ns();
	} while (n <= 3 || (double)(t1 - t0) < seconds * 1e9);
	c1 = cpu_ns();
	{
		double s = (double)(t1 - t0) / 1e9, sps = (double)(n - 3) * batch / s;

		printf("pinpipe %s%s batch=%zu threads=%d: %.0f samples/s, %.3f ms/step, %.1f GFLOP/s, "
		       "%.0f samples/cpu-s\n",
		       spec, u8 ? " fmnist" : "", batch, threads, sps, 1e3 * s / (double)(n - 3),
		       sps * step_flops(m) / 1e9, (double)(n - 3) * batch / ((double)(c1 - c0) / 1e9));
	}
out:
	if (ret)
		fprintf(stderr, "bench_nn: %s\n", pp_last_error());
	pp_model_destroy(m);
	return ret ? 1 : 0;
}

/* Fashion-MNIST's training set as uint8, in batches; 0 or 1. */
static int fmnist_steps(const char *spec, size_t batch, int threads, double seconds, const char *dir)
{
	struct pp_dataset *train = NULL;
	uint8_t *u8 = NULL;
	int32_t *labels = NULL;
	uint64_t *idx = NULL;
	size_t count = 0;
	int ret = open_split(dir, "train", &train);

	if (!ret) {
		count = batch ? pp_dataset_info(train)->count / batch : 0;
		if (!count)
			ret = pp_error(-EINVAL, "batch %zu: expected 1 to %llu", batch,
				       (unsigned long long)pp_dataset_info(train)->count);
	}
	if (!ret) {
		u8 = malloc(count * batch * 784);
		labels = malloc(count * batch * sizeof(*labels));
		idx = malloc(count * batch * sizeof(*idx));
		if (!u8 || !labels || !idx)
			ret = pp_error(-ENOMEM, "out of memory");
	}
	for (size_t i = 0; !ret && i < count * batch; i++)
		idx[i] = i;
	if (!ret)
		ret = pp_dataset_gather(train, idx, count * batch, u8, labels);
	if (ret)
		fprintf(stderr, "bench_nn: %s\n", pp_last_error());
	else
		ret = steps(spec, batch, threads, seconds, NULL, u8, labels, count);
	free(idx);
	free(labels);
	free(u8);
	pp_dataset_destroy(train);
	return ret ? 1 : 0;
}

int main(int argc, char **argv)
{
	size_t batch;
	float *x;
	int32_t *labels;
	int ret;

	if (argc == 2 && strcmp(argv[1], "--sgemm") == 0)
		return sgemm_peak();
	if (argc >= 5 && strcmp(argv[1], "--epochs") == 0)
		return epochs(argv[2], atoi(argv[3]), atoi(argv[4]),
			      argc > 5 ? argv[5] : "/usr/share/datasets/fashion-mnist");
	if (argc >= 5 && strcmp(argv[1], "--fmnist") == 0)
		return fmnist_steps(argv[2], (size_t)atol(argv[3]), atoi(argv[4]),
				    argc > 5 ? atof(argv[5]) : 3.0,
				    argc > 6 ? argv[6] : "/usr/share/datasets/fashion-mnist");
	if (argc < 4) {
		fprintf(stderr, "usage: %s SPEC BATCH THREADS [SECONDS] | --sgemm |\n"
			"       --epochs SPEC THREADS EPOCHS [DIR] |\n"
			"       --fmnist SPEC BATCH THREADS [SECONDS [DIR]]\n", argv[0]);
		return 2;
	}
	batch = (size_t)atol(argv[2]);
	x = malloc(batch * 784 * sizeof(*x));
	labels = malloc(batch * sizeof(*labels));
	if (!x || !labels) {
		fprintf(stderr, "bench_nn: out of memory\n");
		return 1;
	}
	for (size_t i = 0; i < batch * 784; i++)
		x[i] = (float)((i * 2654435761u) % 1000) / 500.0f - 1.0f;
	for (size_t i = 0; i < batch; i++)
		labels[i] = (int32_t)(i % 10);
	ret = steps(argv[1], batch, atoi(argv[3]), argc > 4 ? atof(argv[4]) : 3.0, x, NULL, labels, 1);
	free(x);
	free(labels);
	return ret;
}
