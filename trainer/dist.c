/*
 * trainer/dist.c: pinpipe-train on several ranks (trainer/dist.h).
 *
 * Averaging: the model hands the gradient over range by range (a layer's
 * parameters), from the last layer down, as the backward pass makes them
 * (pp_model_config.grad_hook); consecutive ranges are gathered into
 * buckets of --bucket-kb, and each bucket's average over the ranks
 * (pp_comm_iallreduce, mean) is started as soon as it is full, so that it
 * runs while the backward pass goes on, as PyTorch's
 * DistributedDataParallel does.  The model's grad_sync starts the last
 * bucket and waits for them all before the optimizer reads the gradient,
 * so that every rank applies the same update to the same parameters: one
 * model on the global batch of N x --batch-size samples, to float
 * tolerance (the sum's order depends on N; with 2 ranks, on nothing).
 *
 * --deterministic: the global batch of B samples (positions q = 0..B-1 of
 * the epoch's order) is cut into M fixed micro-batches, micro-batch k
 * holding the positions q = k (mod M) in increasing order.  Rank r of N
 * holds the positions q = r (mod N) (the loader's plan), that is the
 * micro-batches k = r + N j, and finds micro-batch j's samples at its local
 * indices j, j + M/N, j + 2M/N...  Each micro-batch's gradient is computed
 * alone (its arithmetic depends on its samples only: the CPU step is
 * bit-identical whatever the thread count) and kept in slot k; the slots
 * of all ranks are summed by an allreduce in which every slot has a single
 * non-zero contributor, which is exact in any order; each rank then adds
 * the M slots from k = 0 up and divides by M.  The result depends on
 * neither N nor which rank computed what, so N ranks and one process with
 * the same global batch hold the same parameters bit for bit, for every N
 * that divides M.  It costs M forward and backward passes of B/M samples
 * in place of one, and an allreduce of M gradients in place of one.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Whether an MPI launcher started this process as one of several ranks (its environment). */
static bool launched_ranks(void)
{
	static const char *const vars[] = { "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE",
					    "MPI_LOCALNRANKS", "SLURM_NTASKS" };

	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
		const char *v = getenv(vars[i]);

		if (v != NULL && strtol(v, NULL, 10) > 1)
			return true;
	}
	return false;
}

int tr_dist_open(const struct tr_options *opt, struct tr_dist *d)
{
	struct pp_comm_config cfg;
	int ret;

	memset(d, 0, sizeof(*d));
	/* Each rank of a launch would train alone, and all write the same files. */
	if (strcmp(opt->comm, "local") == 0 && launched_ranks()) {
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
	d->bucket_floats = (size_t)opt->bucket_kb * 1024 / sizeof(float);
	if (d->bucket_floats == 0)
		d->bucket_floats = 1; /* --bucket-kb=0: each range a bucket */
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
	int ret;

	d->grads = d->comm;
	/* The gradients of a device the host cannot address are staged through
	 * pinned memory of that device: by a communicator of the run's own,
	 * destroyed before the device is closed. */
	if (!d->nccl && (d->size < 2 || pp_device_get_props(dev)->host_addressable))
		return 0;
	pp_comm_config_init(&cfg);
	cfg.backend = d->nccl ? "nccl" : pp_comm_backend(d->comm);
	cfg.timeout_s = d->timeout_s;
	cfg.device = dev;
	ret = pp_comm_create(&cfg, &d->grads);
	if (ret < 0) {
		d->grads = NULL;
		fprintf(stderr, "pinpipe-train: --comm=%s: %s\n", cfg.backend, pp_last_error());
	}
	return ret;
}

void tr_dist_run_end(struct tr_dist *d)
{
	if (d->grads != d->comm)
		pp_comm_destroy(d->grads);
	d->grads = NULL;
}

void tr_dist_close(struct tr_dist *d)
{
	tr_dist_run_end(d);
	free(d->slots);
	free(d->reqs);
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
	d->local_done = 0;
	d->micro = micro;
	return 0;
}

/* Forgets the step's allreduces: after a failure, the communicator frees them (pp_comm_destroy()). */
static void drop_requests(struct tr_dist *d)
{
	d->n_reqs = 0;
	d->lo = d->hi = 0;
}

/* Starts the average of the open bucket over the ranks. */
static int start_bucket(struct tr_dist *d, struct pp_stream *stream)
{
	struct pp_comm_request *req;
	int ret;

	if (d->lo == d->hi)
		return 0;
	if (d->n_reqs == d->cap_reqs) {
		const size_t cap = d->cap_reqs ? 2 * d->cap_reqs : 16;
		struct pp_comm_request **r = realloc(d->reqs, cap * sizeof(*r));

		if (r == NULL)
			return dist_fail(d, -ENOMEM, "averaging the gradient: no memory for %zu "
					 "requests", cap);
		d->reqs = r;
		d->cap_reqs = cap;
	}
	ret = pp_comm_iallreduce(d->grads, d->base + d->lo, d->hi - d->lo, PP_COMM_F32,
				 PP_COMM_MEAN, stream, &req);
	if (ret < 0)
		return ret;
	d->reqs[d->n_reqs++] = req;
	d->buckets++;
	d->lo = d->hi = 0;
	return 0;
}

/* --deterministic: keeps a range of this micro-batch's gradient in its slot. */
static int keep_range(struct tr_dist *d, const float *grads, size_t offset, size_t count)
{
	const unsigned k = (unsigned)d->rank + (unsigned)d->size * d->local_done;

	if (d->slots == NULL || offset > d->n_params || count > d->n_params - offset)
		return dist_fail(d, -EINVAL, "--deterministic: the gradient hook: floats %zu..%zu of "
				 "a gradient of %zu%s", offset, offset + count, d->n_params,
				 d->slots == NULL ? " (no micro-batch slots)" : "");
	memcpy(d->slots + (size_t)k * d->n_params + offset, grads, count * sizeof(float));
	return 0;
}

/*
 * --deterministic, once a micro-batch's gradient is whole: after this
 * rank's last, reduces them all into the gradient, else keeps it (no update).
 */
static int reduce_micro(struct tr_dist *d)
{
	const size_t p = d->n_params;
	int ret;

	if (++d->local_done < d->local_count)
		return PP_MODEL_GRAD_KEEP;
	d->local_done = 0;
	ret = pp_comm_allreduce(d->comm, d->slots, (size_t)d->micro * p, PP_COMM_F32, PP_COMM_SUM, NULL);
	if (ret < 0)
		return ret;
	for (size_t i = 0; i < p; i++) {
		float s = 0.0f;

		for (unsigned m = 0; m < d->micro; m++)
			s += d->slots[(size_t)m * p + i];
		d->base[i] = s / (float)d->micro;
	}
	return 0;
}

int tr_dist_grad_hook(void *arg, float *grads, size_t offset, size_t count, struct pp_stream *stream)
{
	struct tr_dist *d = arg;
	const uint64_t t0 = now_ns();
	int ret = 0;

	if (count == 0) {
		/* a tick of the backward pass: the buckets in flight moved on */
		ret = d->n_reqs > 0 ? pp_comm_progress(d->grads) : 0;
		if (ret < 0)
			drop_requests(d);
		d->hook_ns += now_ns() - t0;
		return ret;
	}
	d->base = grads - offset;
	if (d->deterministic) {
		ret = keep_range(d, grads, offset, count);
		d->hook_ns += now_ns() - t0;
		return ret;
	}
	/* ranges come from the last layer down: a bucket grows downwards */
	if (d->lo != d->hi && offset + count != d->lo)
		ret = start_bucket(d, stream);
	if (ret == 0) {
		if (d->lo == d->hi)
			d->hi = offset + count;
		d->lo = offset;
		if (d->hi - d->lo >= d->bucket_floats)
			ret = start_bucket(d, stream);
	}
	/* MPI moves the buckets in flight on only inside its calls */
	if (ret == 0 && d->n_reqs > 0)
		ret = pp_comm_progress(d->grads);
	if (ret < 0)
		drop_requests(d);
	d->hook_ns += now_ns() - t0;
	return ret;
}

int tr_dist_grad_sync(void *arg, struct pp_stream *stream)
{
	struct tr_dist *d = arg;
	const uint64_t t0 = now_ns();
	int ret;

	if (d->deterministic) {
		ret = reduce_micro(d);
		d->sync_ns += now_ns() - t0;
		return ret;
	}
	ret = start_bucket(d, stream);
	for (size_t i = 0; i < d->n_reqs && ret == 0; i++) {
		ret = pp_comm_wait(d->reqs[i], stream);
		d->reqs[i] = NULL;
	}
	if (ret < 0) {
		/* those not waited for are the communicator's to free */
		for (size_t i = 0; i < d->n_reqs; i++)
			d->reqs[i] = NULL;
	}
	drop_requests(d);
	d->sync_ns += now_ns() - t0;
	return ret;
}

int tr_dist_start_model(struct tr_dist *d, struct pp_model *model)
{
	size_t n = pp_model_param_count(model);
	float *params;
	int ret;

	d->model = model;
	d->n_params = n;
	drop_requests(d); /* a failed run's: its communicator has them */
	free(d->slots);
	d->slots = NULL;
	if (d->deterministic) {
		d->slots = calloc((size_t)d->micro * (n ? n : 1), sizeof(float));
		if (d->slots == NULL)
			return dist_fail(d, -ENOMEM, "--deterministic: starting the model: no memory "
					 "for %u gradients of %zu floats", d->micro, n);
	}
	if (d->size < 2)
		return 0;
	params = malloc((n ? n : 1) * sizeof(float));
	if (params == NULL)
		return dist_fail(d, -ENOMEM, "broadcasting the model: no memory for %zu parameters", n);
	ret = pp_model_params_read(model, params, n);
	if (ret == 0)
		ret = pp_comm_broadcast(d->comm, params, n * sizeof(float), 0, NULL);
	if (ret == 0)
		ret = pp_model_params_write(model, params, n);
	free(params);
	return ret;
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
	memset(d->slots, 0, (size_t)d->micro * d->n_params * sizeof(float));
	d->local_done = 0;
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
