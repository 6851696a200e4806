/*
 * trainer/dist.c: pinpipe-train on several ranks (trainer/dist.h).
 *
 * Averaging is the library's (pinpipe/grad_sync.h): buckets of
 * consecutive layers of --bucket-kb, each allreduce started as the
 * backward pass makes it; or, with --deterministic, M fixed micro-batches
 * of the global batch reduced in a fixed order, so that N ranks and one
 * process with the same global batch hold the same parameters bit for bit.
 *
 * --deterministic here: the global batch of B samples (positions
 * q = 0..B-1 of the epoch's order) is cut into M micro-batches,
 * micro-batch k holding the positions q = k (mod M) in increasing order.
 * Rank r of N holds the positions q = r (mod N) (the loader's plan), that
 * is the micro-batches k = r + N j, and finds micro-batch j's samples at
 * its local indices j, j + M/N, j + 2M/N...: tr_dist_deterministic_step()
 * trains them in that order, one step each, as the grad sync expects.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/dist.h"

/*
 * A failure of this rank: "rank R of N: " and the message, kept in d->why
 * (the failed run's row says it: the library's last error may be another's)
 * and said on stderr.  Returns err.
 */
static int __attribute__((format(printf, 3, 4))) dist_fail(struct tr_dist *d, int err, const char *fmt, ...)
{
	char msg[sizeof(d->why)];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	snprintf(d->why, sizeof(d->why), "rank %d of %d: %.*s", d->rank, d->size,
		 (int)(sizeof(d->why) - 32), msg);
	fprintf(stderr, "pinpipe-train: %s\n", d->why);
	return err;
}

int tr_dist_open(const struct tr_options *opt, struct tr_dist *d)
{
	struct pp_comm_config cfg;
	int ret;

	memset(d, 0, sizeof(*d));
	/* Each rank of a launch would train alone, and all write the same files. */
	if (strcmp(opt->comm, "local") == 0 && pp_comm_launched()) {
		fprintf(stderr, "pinpipe-train: --comm=local: started by an MPI launcher with several "
			"ranks, each of which would train alone and write the same files: use "
			"--comm=auto or --comm=mpi, or run one process\n");
		return -EINVAL;
	}
	pp_comm_config_init(&cfg);
	/* nccl reduces device buffers of a run's GPU: the job's ranks are MPI's (or one). */
	d->nccl = strcmp(opt->comm, "nccl") == 0;
	cfg.backend = d->nccl ? "auto" : opt->comm;
	cfg.timeout_s = opt->comm_timeout;
	d->timeout_s = opt->comm_timeout;
	ret = pp_comm_create(&cfg, &d->comm);
	if (ret < 0) {
		fprintf(stderr, "pinpipe-train: --comm=%s: %s\n", opt->comm, pp_last_error());
		return ret;
	}
	d->rank = pp_comm_rank(d->comm);
	d->size = pp_comm_size(d->comm);
	d->deterministic = opt->deterministic;
	d->micro_opt = opt->micro_batches;
	d->bucket_bytes = (size_t)opt->bucket_kb * 1024; /* 0: each range a bucket */
	return 0;
}

/* Appends a line "--name=value" to buf[0..cap) at *len (cut where the buffer ends). */
static void __attribute__((format(printf, 4, 5))) opt_line(char *buf, size_t cap, size_t *len,
							   const char *fmt, ...)
{
	va_list ap;
	int n;

	if (*len + 1 >= cap)
		return;
	va_start(ap, fmt);
	n = vsnprintf(buf + *len, cap - *len - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	*len = *len + (size_t)n < cap - 2 ? *len + (size_t)n : cap - 2;
	buf[(*len)++] = '\n';
	buf[*len] = '\0';
}

static void axis_line(char *buf, size_t cap, size_t *len, const char *name, const struct tr_axis *a)
{
	char v[TR_MAX_VALUES * 161] = "";
	size_t n = 0;

	for (size_t i = 0; i < a->n; i++)
		n += (size_t)snprintf(v + n, sizeof(v) - n, "%s%s", i ? "," : "", a->values[i]);
	opt_line(buf, cap, len, "--%s=%s", name, v);
}

/*
 * The options every rank must be given alike, one "--name=value" a line:
 * those of the data's order, the model and its training, and the grid's
 * shape (its number of runs; a run's collectives are the same on every
 * rank only where the runs are).  Left out: paths (each rank reads --data
 * and --checkpoint itself), the output, the loader's threads and pinning.
 */
static size_t options_text(const struct tr_options *o, char *buf, size_t cap)
{
	size_t len = 0;

	buf[0] = '\0';
	axis_line(buf, cap, &len, "batch-size", &o->batch_size);
	axis_line(buf, cap, &len, "lr", &o->lr);
	axis_line(buf, cap, &len, "model", &o->model);
	axis_line(buf, cap, &len, "optimizer", &o->optimizer);
	opt_line(buf, cap, &len, "--epochs=%u", o->epochs);
	opt_line(buf, cap, &len, "--max-steps=%" PRIu64, o->max_steps);
	opt_line(buf, cap, &len, "--seed=%" PRIu64, o->seed);
	opt_line(buf, cap, &len, "--momentum=%.17g", o->momentum);
	opt_line(buf, cap, &len, "--weight-decay=%.17g", o->weight_decay);
	opt_line(buf, cap, &len, "--nesterov=%d", o->nesterov);
	opt_line(buf, cap, &len, "--val-split=%" PRIu64, o->val_split);
	opt_line(buf, cap, &len, "--no-shuffle=%d", !o->shuffle);
	opt_line(buf, cap, &len, "--drop-last=%d", o->drop_last);
	opt_line(buf, cap, &len, "--no-eval=%d", !o->eval);
	opt_line(buf, cap, &len, "--resume=%d", o->resume);
	opt_line(buf, cap, &len, "--stream=%d:%" PRIu32, o->stream, o->window_chunks);
	opt_line(buf, cap, &len, "--keep-denormals=%d", o->keep_denormals);
	/* the samples' shape: the gradients' and metrics' sizes follow from it */
	opt_line(buf, cap, &len, "--image-size=%" PRIu32, o->image_size);
	opt_line(buf, cap, &len, "--comm=%s", o->comm);
	opt_line(buf, cap, &len, "--deterministic=%d", o->deterministic);
	opt_line(buf, cap, &len, "--micro-batches=%u", o->micro_batches);
	opt_line(buf, cap, &len, "--bucket-kb=%u", o->bucket_kb);
	/* Last: an axis above names the difference first where it can. */
	opt_line(buf, cap, &len, "the grid's runs=%zu", tr_options_runs(o));
	return len;
}

/* The option of a line: "--seed" of "--seed=2". */
static int option_name_len(const char *line)
{
	return (int)strcspn(line, "=\n");
}

int tr_dist_check_options(struct tr_dist *d, const struct tr_options *opt, char *why, size_t len)
{
	enum { CAP = 16384 };
	char *mine = calloc(2, CAP), *theirs = mine + CAP;
	double *first = calloc((size_t)d->size, sizeof(double));
	const char *a, *b;
	size_t n, line = 0;
	int ret = 0, bad = 0, differ = 0;

	if (d->size < 2) {
		free(mine);
		free(first);
		return 0;
	}
	if (mine == NULL || first == NULL) {
		ret = -ENOMEM;
		snprintf(why, len, "the ranks' options: no memory");
		goto out;
	}
	n = options_text(opt, mine, CAP);
	memcpy(theirs, mine, n + 1);
	ret = pp_comm_broadcast(d->comm, theirs, CAP, 0, NULL);
	if (ret < 0) {
		snprintf(why, len, "the ranks' options: %s", pp_last_error());
		goto out;
	}
	/* The first line of this rank's options that is not rank 0's. */
	for (a = mine, b = theirs; *a != '\0' || *b != '\0'; line++) {
		size_t la = strcspn(a, "\n"), lb = strcspn(b, "\n");

		if (la != lb || memcmp(a, b, la) != 0) {
			bad = (int)line + 1;
			fprintf(stderr, "pinpipe-train: rank %d of %d: %.*s, but rank 0 has %.*s\n", d->rank,
				d->size, (int)la, a, (int)lb, b);
			break;
		}
		a += la + (a[la] == '\n');
		b += lb + (b[lb] == '\n');
	}
	/* Every rank learns which ranks differ, and on which option. */
	first[d->rank] = bad;
	ret = pp_comm_allreduce(d->comm, first, (size_t)d->size, PP_COMM_F64, PP_COMM_SUM, NULL);
	if (ret < 0) {
		snprintf(why, len, "the ranks' options: %s", pp_last_error());
		goto out;
	}
	for (int r = 0; r < d->size; r++) {
		size_t at = 0;
		const char *l = theirs;

		if (first[r] == 0)
			continue;
		for (size_t k = 1; k < (size_t)first[r] && *l != '\0'; k++)
			l += strcspn(l, "\n") + 1;
		if (differ++ == 0)
			at = (size_t)snprintf(why, len, "the ranks of the job were given other options "
					      "(each rank must be given the same):");
		else
			at = strlen(why);
		if (at < len)
			snprintf(why + at, len - at, "%s %.*s on rank %d", differ > 1 ? ";" : "",
				 option_name_len(l), l, r);
		ret = -EINVAL;
	}
out:
	free(mine);
	free(first);
	return ret;
}

int tr_dist_run_begin(struct tr_dist *d, struct pp_device *dev)
{
	struct pp_comm_config cfg;
	struct pp_grad_sync_config gc;
	int ret;

	d->grads = d->comm;
	/* The gradients of a device the host cannot address are staged through
	 * pinned memory of that device: by a communicator of the run's own,
	 * destroyed before the device is closed. */
	if (d->nccl || (d->size > 1 && !pp_device_get_props(dev)->host_addressable)) {
		pp_comm_config_init(&cfg);
		cfg.backend = d->nccl ? "nccl" : pp_comm_backend(d->comm);
		cfg.timeout_s = d->timeout_s;
		cfg.device = dev;
		ret = pp_comm_create(&cfg, &d->grads);
		if (ret < 0) {
			d->grads = NULL;
			fprintf(stderr, "pinpipe-train: --comm=%s: %s\n", cfg.backend, pp_last_error());
			return ret;
		}
	}
	if (d->size < 2 && !d->deterministic)
		return 0;
	pp_grad_sync_config_init(&gc);
	gc.comm = d->grads;
	gc.bucket_bytes = d->bucket_bytes;
	gc.micro_batches = d->deterministic ? d->micro : 0;
	ret = pp_grad_sync_create(&gc, &d->sync);
	if (ret < 0)
		return dist_fail(d, ret, "%s", pp_last_error());
	return 0;
}

void tr_dist_run_end(struct tr_dist *d)
{
	struct pp_grad_sync_stats st;

	pp_grad_sync_get_stats(d->sync, &st);
	d->comm_ns += st.hook_ns + st.sync_ns;
	pp_grad_sync_destroy(d->sync);
	d->sync = NULL;
	d->model = NULL;
	if (d->grads != d->comm)
		pp_comm_destroy(d->grads);
	d->grads = NULL;
}

void tr_dist_close(struct tr_dist *d)
{
	tr_dist_run_end(d);
	pp_comm_destroy(d->comm);
	memset(d, 0, sizeof(*d));
}

void tr_dist_device(const struct tr_dist *d, const char *name, char *buf, size_t len)
{
	int gpus;

	snprintf(buf, len, "%s", name);
	if (d->size < 2 || (strcmp(name, "cuda") != 0 && strcmp(name, "auto") != 0))
		return;
	gpus = pp_device_cuda_count();
	if (gpus > 0)
		snprintf(buf, len, "cuda:%d", pp_comm_local_rank(d->comm) % gpus);
}

static unsigned gcd(unsigned a, unsigned b)
{
	while (b != 0) {
		unsigned t = a % b;

		a = b;
		b = t;
	}
	return a;
}

int tr_dist_check_state(struct tr_dist *d, const uint64_t *mine, const char *const *names,
			size_t n, char *why, size_t len)
{
	uint64_t theirs[TR_DIST_STATE_MAX];
	double differ = 0;
	int ret;

	if (d->size < 2)
		return 0;
	if (n > TR_DIST_STATE_MAX) {
		snprintf(why, len, "the ranks' state: %zu values, %d at most", n, TR_DIST_STATE_MAX);
		return -EINVAL;
	}
	memcpy(theirs, mine, n * sizeof(*mine));
	ret = pp_comm_broadcast(d->comm, theirs, n * sizeof(*theirs), 0, NULL);
	for (size_t k = 0; ret == 0 && k < n; k++)
		if (mine[k] != theirs[k]) {
			fprintf(stderr, "pinpipe-train: rank %d of %d: %s %" PRIu64 ", but rank 0's is "
				"%" PRIu64 "\n", d->rank, d->size, names[k], mine[k], theirs[k]);
			differ = 1;
			break;
		}
	/* Every rank learns how many differ: all fail, or none. */
	if (ret == 0)
		ret = pp_comm_allreduce(d->comm, &differ, 1, PP_COMM_F64, PP_COMM_SUM, NULL);
	if (ret < 0) {
		snprintf(why, len, "the ranks' state: %s", pp_last_error());
		return ret;
	}
	if (differ > 0) {
		snprintf(why, len, "the ranks do not hold the same checkpoint or data: %.0f of %d "
			 "ranks differ from rank 0 (each says how above)", differ, d->size);
		return -EINVAL;
	}
	return 0;
}

int tr_dist_check_batch(struct tr_dist *d, unsigned batch_size, char *why, size_t len)
{
	const unsigned long long global = (unsigned long long)batch_size * (unsigned)d->size;
	unsigned micro = d->micro_opt;

	d->why[0] = '\0';
	if (!d->deterministic)
		return 0;
	/* The default, computed for each run of a grid from its own global batch:
	 * the global batch's common divisor with 12 (1, 2, 3, 4, 6 or 12). */
	if (micro == 0)
		micro = gcd(12, (unsigned)(global % 12));
	if (global % micro != 0 || micro % (unsigned)d->size != 0) {
		snprintf(why, len, "--deterministic: %d ranks x --batch-size=%u = a global batch of "
			 "%llu samples in %u micro-batches: the micro-batches must divide the global "
			 "batch, and the ranks the micro-batches (--micro-batches)", d->size, batch_size,
			 global, micro);
		return -EINVAL;
	}
	d->local_count = micro / (unsigned)d->size;
	d->micro = micro;
	return 0;
}

int tr_dist_start_model(struct tr_dist *d, struct pp_model *model)
{
	d->model = model;
	return d->sync != NULL ? pp_grad_sync_start(d->sync, model) : 0;
}

uint64_t tr_dist_comm_ns(const struct tr_dist *d)
{
	struct pp_grad_sync_stats st;

	pp_grad_sync_get_stats(d->sync, &st);
	return d->comm_ns + st.hook_ns + st.sync_ns;
}

int tr_dist_deterministic_step(struct tr_dist *d, struct pp_device *dev, const void *samples,
			       const int32_t *labels, size_t n, enum pp_dtype dtype,
			       size_t sample_bytes, int ndim, const size_t *sample_shape)
{
	const size_t local = d->local_count, per = n / local;
	size_t shape[PP_TENSOR_MAX_DIMS];
	struct pp_tensor *in = NULL;
	int32_t *lab = NULL;
	int ret;

	if (n == 0 || n % local != 0)
		return dist_fail(d, -EINVAL, "--deterministic: a step: a batch of %zu samples is not "
				 "%zu micro-batches of this rank", n, local);
	shape[0] = per;
	for (int i = 1; i < ndim && i < PP_TENSOR_MAX_DIMS; i++)
		shape[i] = sample_shape[i - 1];
	ret = pp_tensor_create(dev, dtype, ndim, shape, &in);
	if (ret == 0)
		ret = pp_device_alloc(dev, per * sizeof(int32_t), (void **)&lab);
	for (size_t j = 0; j < local && ret == 0; j++) {
		char *dst = pp_tensor_data(in);

		for (size_t i = 0; i < per; i++) {
			memcpy(dst + i * sample_bytes, (const char *)samples + (j + local * i) * sample_bytes,
			       sample_bytes);
			lab[i] = labels[j + local * i];
		}
		ret = pp_model_train_step(d->model, in, lab);
	}
	pp_device_free(dev, lab);
	pp_tensor_destroy(in);
	return ret;
}

int tr_dist_sum_metrics(struct tr_dist *d, struct pp_model_metrics *m)
{
	double v[3] = { m->loss_sum, (double)m->correct, (double)m->samples };
	int ret;

	if (d->size < 2)
		return 0;
	ret = pp_comm_allreduce(d->comm, v, 3, PP_COMM_F64, PP_COMM_SUM, NULL);
	if (ret < 0)
		return ret;
	m->loss_sum = v[0];
	m->correct = (uint64_t)v[1];
	m->samples = (uint64_t)v[2];
	return 0;
}

bool tr_dist_any(struct tr_dist *d, bool stop, int *err_p)
{
	float f = stop ? 1.0f : 0.0f;
	int ret;

	*err_p = 0;
	if (d->size < 2)
		return stop;
	ret = pp_comm_allreduce(d->comm, &f, 1, PP_COMM_F32, PP_COMM_SUM, NULL);
	if (ret < 0) {
		*err_p = ret;
		return true;
	}
	return f > 0.0f;
}
