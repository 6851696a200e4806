/*
 * trainer/tensorboard.c: pinpipe-train's TensorBoard events (--logdir;
 * trainer/tensorboard.h): a run's directory, its scalars, the image grid
 * of its first batch and the histograms of its parameters and gradients.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "trainer/grid.h"
#include "trainer/run.h"
#include "trainer/tensorboard.h"

void tr_tb_failed(struct tr_run *r)
{
	fprintf(stderr, "pinpipe-train: warning: --logdir: %s; the run goes on without its "
		"TensorBoard events\n", pp_last_error());
	pp_summary_writer_destroy(r->tb);
	r->tb = NULL;
}

/* Adds a scalar to the run's events, if it still has them. */
static void tb_scalar(struct tr_run *r, const char *tag, int64_t step, double value)
{
	if (r->tb != NULL && pp_summary_writer_add_scalar(r->tb, tag, step, value) < 0)
		tr_tb_failed(r);
}

/*
 * Makes the TensorBoard directory name of a run from its parameters, its
 * device as the rows name it; the '/', ',' and ':' of a model spec or a
 * sim's options ("sim:bw=25GB/s,call_us=20") are '_' in it.
 */
static void run_dirname(const struct tr_params *p, unsigned run, char *buf, size_t len)
{
	char model[64];

	snprintf(model, sizeof(model), "%.63s", p->model);
	snprintf(buf, len, "run%u-device=%s-bs=%u-workers=%u-pin=%s-lr=%g-model=%s-opt=%s", run,
		 p->device, p->batch_size, p->workers, p->pin_memory ? "on" : "off", p->lr, model,
		 p->optimizer);
	for (size_t i = 0; buf[i] != '\0'; i++)
		if (buf[i] == ':' || buf[i] == '/' || buf[i] == ',')
			buf[i] = '_';
}

void tr_tb_image_grid(struct tr_run *r, const struct pp_device_batch *b, const struct pp_tensor *in,
		      const struct pp_sample_info *info, uint64_t step)
{
	size_t bytes = b->size * b->sample_bytes;
	uint8_t *host = malloc(bytes ? bytes : 1);
	struct tr_grid grid = { 0 };
	const char *why = NULL;
	int ret;

	r->tb_image_done = true;
	if (host == NULL) {
		why = pp_strerror(-ENOMEM);
		goto out;
	}
	/* The batch is on the device once its copy is: wait for it, then bring it back. */
	ret = pp_event_synchronize(b->ready);
	if (ret == 0)
		ret = pp_tensor_copy_to_host(in, host, bytes);
	if (ret < 0) {
		why = pp_last_error();
		goto out;
	}
	ret = tr_grid_make(host, b->size, info, &grid);
	if (ret < 0) {
		why = ret == -EINVAL ? "the samples are too large for a grid" : pp_strerror(ret);
		goto out;
	}
	ret = pp_summary_writer_add_image(r->tb, "images/first_batch", (int64_t)step, grid.pixels,
					  grid.height, grid.width, grid.channels);
	if (ret == -EIO)
		tr_tb_failed(r);
	else if (ret < 0)
		why = pp_last_error();
out:
	if (why != NULL)
		fprintf(stderr, "pinpipe-train: warning: no image grid: %s\n", why);
	free(grid.pixels);
	free(host);
}

/*
 * Writes a histogram of each parameter tensor and of its gradient in the
 * last step ("params/0.conv.weight", "grads/0.conv.weight", ...) at the
 * global step 'step', after each epoch.  A failure is a warning.
 */
static void tb_histograms(struct tr_run *r, int64_t step)
{
	size_t count = pp_model_param_count(r->model);
	size_t n = pp_model_param_list(r->model, NULL, 0);
	struct pp_model_param *list = calloc(n ? n : 1, sizeof(*list));
	float *params = calloc(count ? count : 1, sizeof(float));
	float *grads = calloc(count ? count : 1, sizeof(float));
	int ret = -ENOMEM;

	if (list == NULL || params == NULL || grads == NULL)
		goto out;
	pp_model_param_list(r->model, list, n);
	ret = pp_model_params_read(r->model, params, count);
	if (ret == 0)
		ret = pp_model_grads_read(r->model, grads, count);
	for (size_t i = 0; i < n && ret == 0; i++) {
		char tag[64];

		snprintf(tag, sizeof(tag), "params/%s", list[i].name);
		ret = pp_summary_writer_add_histogram(r->tb, tag, step, params + list[i].offset,
						      list[i].count);
		snprintf(tag, sizeof(tag), "grads/%s", list[i].name);
		if (ret == 0)
			ret = pp_summary_writer_add_histogram(r->tb, tag, step, grads + list[i].offset,
							      list[i].count);
	}
out:
	if (ret == -EIO)
		tr_tb_failed(r);
	else if (ret < 0)
		fprintf(stderr, "pinpipe-train: warning: no histograms: %s\n",
			pp_last_error()[0] ? pp_last_error() : pp_strerror(ret));
	free(grads);
	free(params);
	free(list);
}

int tr_tb_open(const struct tr_options *opt, const struct tr_params *p, unsigned run,
	       struct tr_run *r)
{
	int ret = 0;

	if (opt->logdir[0] != '\0') {
		char dir[4096 + 512], name[512];

		run_dirname(p, run, name, sizeof(name));
		snprintf(dir, sizeof(dir), "%s/%s", opt->logdir, name);
		ret = pp_summary_writer_create(dir, &r->tb);
	}
	return ret;
}

int tr_tb_step(struct tr_run *r, uint64_t steps)
{
	struct pp_model_metrics m;
	int ret;

	/* The running totals since the last point give the mean loss of these steps. */
	ret = pp_model_metrics(r->model, false, &m);
	if (ret == 0 && m.samples > r->tb_samples) {
		tb_scalar(r, "loss/train_step", (int64_t)steps + 1,
			  (m.loss_sum - r->tb_loss) / (double)(m.samples - r->tb_samples));
		r->tb_loss = m.loss_sum;
		r->tb_samples = m.samples;
	}
	return ret;
}

void tr_tb_epoch(struct tr_run *r, const struct tr_row *row, uint64_t steps)
{
	if (r->tb == NULL)
		return;
	tb_scalar(r, "loss/train", (int64_t)steps, row->train_loss);
	tb_scalar(r, "accuracy/train", (int64_t)steps, row->train_acc);
	if (!isnan(row->val_acc)) {
		tb_scalar(r, "loss/val", (int64_t)steps, row->val_loss);
		tb_scalar(r, "accuracy/val", (int64_t)steps, row->val_acc);
	}
	if (!isnan(row->test_acc)) {
		tb_scalar(r, "loss/test", (int64_t)steps, row->test_loss);
		tb_scalar(r, "accuracy/test", (int64_t)steps, row->test_acc);
	}
	/* Everything at the global step, as the curves: one axis in TensorBoard. */
	tb_scalar(r, "time/epoch_s", (int64_t)steps, row->epoch_s);
	tb_scalar(r, "time/samples_per_s", (int64_t)steps, row->samples_per_s);
	tb_scalar(r, "time/wait_s", (int64_t)steps, row->wait_s);
	if (r->dist->size > 1)
		tb_scalar(r, "time/allreduce_s", (int64_t)steps, row->allreduce_s);
	if (r->tb != NULL)
		tb_histograms(r, (int64_t)steps);
	/* The writer buffers: a full disk shows at the flush, once per epoch. */
	if (r->tb != NULL && pp_summary_writer_flush(r->tb) < 0)
		tr_tb_failed(r);
}

void tr_tb_close(struct tr_run *r)
{
	if (r->tb != NULL && pp_summary_writer_flush(r->tb) < 0)
		tr_tb_failed(r);
	pp_summary_writer_destroy(r->tb);
	r->tb = NULL;
}
