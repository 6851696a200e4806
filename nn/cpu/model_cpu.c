/*
 * nn/cpu/model_cpu.c: the CPU backend of a model (the host, cpu and sim
 * devices).  A step gives bit-identical results whatever the thread count:
 * the batch is cut into chunks of consecutive samples at boundaries fixed
 * by the batch size alone (nn_chunks_for()), each chunk accumulates the
 * convolutions' gradients of its samples, in order, into its own buffer,
 * and the threads (single-threaded BLAS each) take whole chunks as they
 * come free.  Then the parameters' gradients are finished in tasks of
 * fixed slices, which the threads take in the same way (the convolutions'
 * are the chunks' added in chunk order, the linear layers' a GEMM over the
 * whole batch for a block of columns), layer by layer from the last; the
 * calling thread hands each layer's range to the gradient hook as soon as
 * its tasks are done (the trainer starts its allreduce while the threads
 * finish the layers below), and the optimizer updates the
 * parameters in fixed slices, also taken by the threads.  The samples'
 * losses (double) are added in sample order.  Which thread ran a chunk or
 * a task changes nothing in its arithmetic.
 *
 * The chunks are small (4 samples at least with convolutions, 16
 * without, NN_CHUNKS at most, fewer where their gradient buffers would
 * pass NN_CHUNK_BYTES), so that a batch of 100 keeps 8 or more
 * threads busy and one of 1000 keeps 15: with C chunks, T threads take
 * ceil(C / T) rounds (pp_model_cpu_threads()).  With convolutions a chunk
 * is run in groups of the samples whose im2col columns fit in
 * NN_GROUP_BYTES, taken forward and at once backward (a sample's gradient
 * needs only its own loss), so that the columns are made once and are
 * still in cache when the backward uses them.
 *
 * A step is three jobs for the threads (chunks, gradient tasks, optimizer
 * slices), a few hundred microseconds each at a batch of 100: a thread
 * that has finished one spins a while (NN_SPIN_NS) for the next before it
 * sleeps on the condition variable, as OpenMP's runtimes do, since a
 * futex's wake-up, and the waking threads' queue on the mutex, cost tens
 * of microseconds a job; only where the threads leave a processor free,
 * as pinpipe-train's do, so that they never spin in another's way.  The
 * counters the threads write (struct nn_sched) have a cache line each,
 * apart from the model's fields that they all read.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common_impl.h"
#include "common/normalize.h"
#include "nn/cpu/blas.h"
#include "nn/cpu/cpu_impl.h"

/* The im2col columns of a group of samples, at most: within a core's L2 (1 MiB here). */
#define NN_GROUP_BYTES (768 * 1024)
/* Samples in a group, at most. */
#define NN_GROUP_MAX 64
/* Chunks of a step, at most: each but the first has a buffer of the convolutions' gradients. */
#define NN_CHUNKS 128
/* Those buffers together, at most, unless that leaves fewer than NN_CHUNKS_LARGE chunks. */
#define NN_CHUNK_BYTES (64u << 20)
#define NN_CHUNKS_LARGE 16
/* Samples in a chunk, at least (unless the batch is smaller): with convolutions, without. */
#define NN_CHUNK_MIN_CONV 4
#define NN_CHUNK_MIN_DENSE 16
/* Columns of a linear layer's weight gradient in one task. */
#define NN_DW_COLS 32
/* Floats of a convolution's parameters in one task. */
#define NN_SUM_FLOATS 256
/* Parameters in one slice of the optimizer's update. */
#define NN_OPT_FLOATS 4096
/* How long a thread that has run its part of a job spins for the next before it sleeps. */
#define NN_SPIN_NS 50000
/* A cache line (x86-64, and the ARM cores' L1). */
#define NN_LINE 64

/*
 * What the step's threads write as they take work: each counter on a line
 * of its own (a line written by one thread is taken from all the others'
 * caches, and the model's fields beside it with it).  Allocated aligned.
 */
struct nn_sched {
	alignas(NN_LINE) size_t next_chunk;   /* the next chunk a thread takes (atomic) */
	alignas(NN_LINE) size_t next_dw_task; /* the next task, then the next optimizer slice (atomic) */
	alignas(NN_LINE) uint64_t generation; /* bumped for each job (atomic: release, acquire) */
	alignas(NN_LINE) uint64_t pending;    /* workers still running the job (atomic) */
	alignas(NN_LINE) int sleepers;        /* workers asleep on cpu->go (under cpu->lock) */
	bool caller_waits;                    /* the caller asleep on cpu->done (under cpu->lock) */
	uint64_t spin_ns;                     /* NN_SPIN_NS, or 0 where the threads have no core
					       * to spare (they would spin in the way of others) */
};

/* One thread's scratch; worker 0 is the calling thread. */
struct nn_worker {
	struct pp_model *m;
	float *col;         /* (group, col_floats): each conv's columns of the group,
			     * at group x the layer's col_off (struct nn_cpu_layer) */
	float *dcol;        /* (col_one) the column gradient of one sample, or
			     * pp_nn_conv2d_backward_pooled()'s scratch where larger */
};

/*
 * A slice of the parameters whose gradient is made final after the
 * chunks, before the optimizer's update.  Linear layer: columns j0..j1-1 of
 * the weight (and the bias when j0 = 0), their gradient one GEMM over the
 * batch.  Convolution: floats j0..j1-1 of the parameter vector (within its
 * weight or its bias), their gradient the sum of the chunks'.
 */
struct nn_dw_task {
	size_t layer;       /* index in the model's layers */
	size_t range;       /* its layer's range (struct nn_grad_range) */
	int j0, j1;         /* linear: columns (input features); conv: offsets in the parameters */
};

/*
 * A layer with parameters: its range of the gradient, whole once its
 * tasks are done, and then handed to the gradient hook by worker 0.
 */
struct nn_grad_range {
	size_t off, count;  /* floats of the parameter vector: weight, then bias */
	size_t n_tasks;     /* its tasks */
	size_t done;        /* of them, done in the step (atomic) */
};

/* A run of consecutive samples of a step, and what it produced. */
struct nn_chunk {
	float *grads;       /* (n_params) the gradient of its samples; chunk 0: the model's */
	uint64_t correct;   /* correct predictions among its samples */
	int err;            /* 0 or -errno */
	char msg[256];      /* the error message when err */
};

/*
 * The CPU backend's state (m->ctx): the step's threads, its chunks and
 * tasks, and the scratch they work in.
 */
struct nn_cpu {
	struct nn_cpu_layer *layer; /* n_layers: how each layer is run */
	size_t col_floats;        /* the im2col columns of all conv layers, one sample, floats */
	size_t group;             /* with convolutions: samples taken forward and backward
				   * together; 0 without */
	/* a step's batch is cut into at most NN_CHUNKS chunks at boundaries fixed by the
	 * batch size, whatever the thread count */
	struct nn_chunk *chunks;  /* NN_CHUNKS; chunk 0 accumulates into the model's 'grads' */
	size_t chunks_ready;      /* chunks whose gradient buffers are allocated */
	double *losses;           /* (capacity) each sample's loss in the step */
	size_t job_chunks;        /* chunks in the step being run */
	struct nn_dw_task *dw_tasks; /* n_dw_tasks: slices of the parameters, each finished
				      * (gradient, then update) by one task after the chunks */
	size_t n_dw_tasks;
	/* the layers with parameters, the last first: the gradient's ranges in the order of
	 * the tasks, each handed to the gradient hook once its tasks are done */
	struct nn_grad_range *ranges;
	size_t n_ranges;
	size_t next_range;        /* the next range for the hook (worker 0 alone) */
	int range_status;         /* the hook's: 0, PP_MODEL_GRAD_KEEP seen, or -errno (worker 0) */
	void (*work)(struct nn_worker *wk); /* what the workers run for the posted job */
	/* threads: worker 0 is the caller */
	int threads;
	struct nn_worker *workers; /* threads */
	pthread_t *tids;           /* threads - 1 */
	int threads_started;       /* of tids */
	struct nn_job *job;        /* the step being run */
	pthread_mutex_t lock;      /* guards the sleeping threads' waits (struct nn_sched), quit */
	pthread_cond_t go;         /* signalled when a job is posted or the workers are to quit */
	pthread_cond_t done;       /* signalled when the last worker finishes a job */
	struct nn_sched *sched;    /* the counters the threads take work and jobs from */
	unsigned fp_csr;           /* the caller's floating-point controls for the job (x86 MXCSR) */
	bool quit;                 /* the workers are to exit */
};

/* The max-pool behind conv i (l->sparse_dout), with a ReLU between them or not. */
static const struct nn_layer *pool_of(const struct pp_model *m, size_t i)
{
	return &m->layers[m->layers[i + 1].kind == NN_RELU ? i + 2 : i + 1];
}

/*
 * True for a max-pool (i) behind a ReLU behind a convolution whose
 * backward is pp_nn_conv2d_backward_pooled(): the ReLU is done by the pool's
 * forward (pp_nn_maxpool_relu_forward() on the convolution's output), its own
 * output is not written, and the backward reads the sign of the
 * convolution's output in place of the ReLU's.
 */
static bool relu_in_pool(const struct pp_model *m, size_t i)
{
	const struct nn_layer *L = m->layers;

	return i < m->n_layers && L[i].kind == NN_MAXPOOL && i >= 2 && L[i - 1].kind == NN_RELU &&
	       L[i - 2].kind == NN_CONV && L[i - 2].sparse_dout;
}

/*
 * Where the output of layer i lies, for the whole batch: a Flatten changes
 * only the shape, so its output is its input, never copied; past the
 * bottom (i = SIZE_MAX, the output of "layer -1") the model's input.
 */
static const float *output_of(const struct pp_model *m, const struct nn_job *job, size_t i)
{
	i = pp_nn_past_flattens(m, i);
	if (i == SIZE_MAX)
		return job->in_u8 ? m->input : job->in_f32;
	return m->acts[i];
}

/*
 * Forward, loss, and when training backward, of samples s0..s0+n-1: the
 * convolutions' gradients into G, the linear layers' input gradients only;
 * 0 or -errno.
 */
static int run_group(struct nn_worker *wk, const struct nn_job *job, float *G, size_t s0, int n,
		     uint64_t *correct)
{
	struct pp_model *m = wk->m;
	struct nn_cpu *cpu = m->ctx;
	const struct nn_layer *last = &m->layers[m->n_layers - 1];
	const float *P = m->params;
	const float *x; /* the input of the layer being run */
	int ret;

	if (job->in_u8) {
		size_t sz = m->layers[0].in_size;

		pp_normalize_u8(job->in_u8 + s0 * sz, m->input + s0 * sz, (size_t)n * sz, m->cfg.mean,
				m->cfg.std);
		x = m->input + s0 * sz;
	} else {
		x = job->in_f32 + s0 * m->layers[0].in_size;
	}
	for (size_t i = 0; i < m->n_layers; i++) {
		const struct nn_layer *l = &m->layers[i];
		float *y = m->acts[i] + s0 * l->out_size;

		switch (l->kind) {
		case NN_CONV:
			if (cpu->layer[i].direct)
				pp_nn_conv2d_direct_forward(l, y, x, P + l->w_off, P + l->b_off, n);
			else
				pp_nn_conv2d_forward(l, y, x, P + l->w_off, P + l->b_off,
					       wk->col + cpu->group * cpu->layer[i].col_off, n);
			break;
		case NN_MAXPOOL:
			if (relu_in_pool(m, i))
				pp_nn_maxpool_relu_forward(l, y, m->pool_idx[i] + s0 * l->out_size,
						     m->acts[i - 2] + s0 * l->in_size, n);
			else
				pp_nn_maxpool_forward(l, y, m->pool_idx[i] + s0 * l->out_size, x, n);
			break;
		case NN_RELU:
			if (!relu_in_pool(m, i + 1))
				pp_nn_relu_forward(y, x, (size_t)n * l->out_size);
			break;
		case NN_FLATTEN:
			continue; /* its output is its input (output_of()) */
		case NN_LINEAR:
			pp_nn_linear_forward(l, y, x, P + l->w_off, P + l->b_off, n);
			break;
		}
		x = y;
	}
	ret = pp_nn_softmax_xent(x, job->labels + s0, n, last->out_c, 1.0f / (float)job->batch,
			   job->train ? m->dacts[m->n_layers - 1] + s0 * last->out_size : NULL,
			   cpu->losses + s0, correct);
	if (ret || !job->train)
		return ret;
	for (size_t i = m->n_layers; i-- > 0 && (m->layers[i].n_w || m->layers[i].need_din);) {
		const struct nn_layer *l = &m->layers[i];
		const float *dy = m->dacts[i] + s0 * l->out_size;
		float *dx = l->need_din ? m->dacts[i - 1] + s0 * l->in_size : NULL;

		switch (l->kind) {
		case NN_CONV:
			if (l->sparse_dout) {
				const struct nn_layer *pool = pool_of(m, i);
				const size_t p = (size_t)(pool - m->layers);

				const float *dp = m->dacts[p] + s0 * pool->out_size;
				const int32_t *ix = m->pool_idx[p] + s0 * pool->out_size;
				const float *r = p == i + 2 ? m->acts[i] + s0 * l->out_size : NULL;

				if (cpu->layer[i].direct)
					pp_nn_conv2d_direct_backward_pooled(l, pool, dx, G + l->w_off,
								      G + l->b_off, dp, ix, r,
								      P + l->w_off,
								      output_of(m, job, i - 1) + s0 * l->in_size, n);
				else
					pp_nn_conv2d_backward_pooled(l, pool, dx, G + l->w_off, G + l->b_off, dp,
							       ix, r, P + l->w_off,
							       wk->col + cpu->group * cpu->layer[i].col_off,
							       wk->dcol, n);
			} else {
				pp_nn_conv2d_backward(l, dx, G + l->w_off, G + l->b_off, dy, P + l->w_off,
						wk->col + cpu->group * cpu->layer[i].col_off, wk->dcol, n);
			}
			break;
		case NN_MAXPOOL:
			if (dx && !pp_nn_behind_pooled_conv(m, i))
				pp_nn_maxpool_backward(l, dx, dy, m->pool_idx[i] + s0 * l->out_size, n);
			break;
		case NN_RELU:
			if (dx && !pp_nn_behind_pooled_conv(m, i))
				pp_nn_relu_backward(dx, dy, m->acts[i] + s0 * l->out_size, (size_t)n * l->out_size);
			break;
		case NN_FLATTEN:
			if (dx)
				memcpy(dx, dy, (size_t)n * l->out_size * sizeof(float));
			break;
		case NN_LINEAR:
			if (dx)
				pp_nn_linear_backward_input(l, dx, dy, P + l->w_off, n);
			break;
		}
	}
	return 0;
}

/*
 * Chunks of a step of 'batch' samples, from the batch size and the model
 * alone: 'conv_floats' is the size of a chunk's buffer of convolution
 * gradients (0 without convolutions), which bounds their number for a
 * model with large convolutions (NN_CHUNK_BYTES).
 */
static size_t nn_chunks_for(size_t batch, size_t conv_floats)
{
	const size_t min = conv_floats ? NN_CHUNK_MIN_CONV : NN_CHUNK_MIN_DENSE;
	size_t most = NN_CHUNKS;

	if (conv_floats)
		most = PP_MIN(most, PP_MAX(NN_CHUNK_BYTES / (conv_floats * sizeof(float)),
					   (size_t)NN_CHUNKS_LARGE));
	return PP_MIN(PP_MAX(batch / min, (size_t)1), most);
}

PP_API unsigned pp_model_cpu_threads(size_t batch, unsigned cores)
{
	const size_t chunks = nn_chunks_for(batch, 1); /* small convolutions */
	const size_t rounds = (chunks + PP_MAX(cores, 1u) - 1) / PP_MAX(cores, 1u);

	return (unsigned)((chunks + rounds - 1) / rounds);
}

/* The end of the convolutions' parameters in the parameter vector (floats): a chunk's buffer. */
static size_t conv_params_end(const struct pp_model *m)
{
	size_t end = 0;

	for (size_t i = 0; i < m->n_layers; i++)
		if (m->layers[i].kind == NN_CONV)
			end = PP_MAX(end, PP_MAX(m->layers[i].w_off + m->layers[i].n_w,
						 m->layers[i].b_off + m->layers[i].n_b));
	return end;
}

/*
 * Runs chunk c of the step, samples [c B / C, (c + 1) B / C) of a batch
 * of B in C chunks: its groups in order, its gradient from zero.
 */
static void run_chunk(struct nn_worker *wk, const struct nn_job *job, size_t c)
{
	struct pp_model *m = wk->m;
	struct nn_cpu *cpu = m->ctx;
	struct nn_chunk *ch = &cpu->chunks[c];
	const size_t s0 = c * job->batch / cpu->job_chunks;
	const size_t s1 = (c + 1) * job->batch / cpu->job_chunks;
	const size_t group = cpu->group ? cpu->group : s1 - s0;

	ch->correct = 0;
	ch->err = 0;
	if (job->train)
		for (size_t i = 0; i < m->n_layers; i++)
			if (m->layers[i].kind == NN_CONV) {
				memset(ch->grads + m->layers[i].w_off, 0, m->layers[i].n_w * sizeof(float));
				memset(ch->grads + m->layers[i].b_off, 0, m->layers[i].n_b * sizeof(float));
			}
	for (size_t s = s0; s < s1 && !ch->err; s += group)
		ch->err = run_group(wk, job, ch->grads, s, (int)PP_MIN(group, s1 - s), &ch->correct);
	if (ch->err)
		snprintf(ch->msg, sizeof(ch->msg), "%s", pp_last_error());
}

/* Takes chunks of the step until none is left. */
static void run_chunks(struct nn_worker *wk)
{
	struct pp_model *m = wk->m;
	struct nn_cpu *cpu = m->ctx;

	for (;;) {
		size_t c = __atomic_fetch_add(&cpu->sched->next_chunk, 1, __ATOMIC_RELAXED);

		if (c >= cpu->job_chunks)
			break;
		run_chunk(wk, cpu->job, c);
	}
}

/* Makes the gradient of a task's parameters final (struct nn_dw_task). */
static void finish_grads(struct pp_model *m, const struct nn_job *job, const struct nn_dw_task *task)
{
	struct nn_cpu *cpu = m->ctx;
	const struct nn_layer *l = &m->layers[task->layer];

	if (l->kind == NN_CONV) {
		for (size_t c = 1; c < cpu->job_chunks; c++) {
			const float *g = cpu->chunks[c].grads;

			for (size_t j = (size_t)task->j0; j < (size_t)task->j1; j++)
				m->grads[j] += g[j];
		}
		return;
	}
	pp_nn_linear_backward_params(l, m->grads + l->w_off, task->j0 ? NULL : m->grads + l->b_off,
				     m->dacts[task->layer], output_of(m, job, task->layer - 1),
				     (int)job->batch, task->j0, task->j1, 0.0f);
}

/*
 * Hands the ranges whose tasks are all done to the gradient hook, in
 * order, from worker 0 (the caller's thread: an MPI library may want its
 * calls there) while the other threads go on with the ranges after them;
 * stops at the first the hook fails.
 */
static void hand_over_ranges(struct pp_model *m)
{
	struct nn_cpu *cpu = m->ctx;
	const size_t first = cpu->next_range;
	int ret;

	while (cpu->range_status >= 0 && cpu->next_range < cpu->n_ranges) {
		struct nn_grad_range *r = &cpu->ranges[cpu->next_range];

		/* acquire: the other threads' writes of the range are seen */
		if (__atomic_load_n(&r->done, __ATOMIC_ACQUIRE) < r->n_tasks)
			break;
		cpu->next_range++;
		ret = pp_nn_model_grads_ready(m, r->off, r->count);
		if (ret != 0)
			cpu->range_status = ret;
	}
	/* none ready, some handed over: a tick, for the hook's work in flight to move on
	 * (MPI progresses a collective only inside its calls) */
	if (cpu->next_range == first && first > 0 && first < cpu->n_ranges && cpu->range_status >= 0) {
		ret = pp_nn_model_grads_tick(m);
		if (ret != 0)
			cpu->range_status = ret;
	}
}

/*
 * Takes the parameters' tasks until none is left; worker 0 hands each
 * range over as soon as it is whole, so that the hook's work (an
 * allreduce) overlaps the tasks after it.
 */
static void run_dw_tasks(struct nn_worker *wk)
{
	struct pp_model *m = wk->m;
	struct nn_cpu *cpu = m->ctx;
	const bool hands_over = wk == &cpu->workers[0] && m->cfg.grad_hook != NULL;

	for (;;) {
		size_t t = __atomic_fetch_add(&cpu->sched->next_dw_task, 1, __ATOMIC_RELAXED);

		if (t >= cpu->n_dw_tasks)
			break;
		finish_grads(m, cpu->job, &cpu->dw_tasks[t]);
		__atomic_fetch_add(&cpu->ranges[cpu->dw_tasks[t].range].done, 1, __ATOMIC_RELEASE);
		if (hands_over)
			hand_over_ranges(m);
	}
}

/*
 * Takes the optimizer's slices of NN_OPT_FLOATS parameters until none is
 * left: an element's update reads only its own gradient and state, so a
 * slice updated on its own is the same as the whole vector's.  Each
 * slice's update is step t + 1 of the model's optimizer, whose count is
 * incremented once they are all done.
 */
static void run_updates(struct nn_worker *wk)
{
	struct pp_model *m = wk->m;
	struct nn_cpu *cpu = m->ctx;

	for (;;) {
		size_t off = __atomic_fetch_add(&cpu->sched->next_dw_task, 1, __ATOMIC_RELAXED) *
			     NN_OPT_FLOATS;
		struct nn_optim part = m->optim;

		if (off >= m->n_params)
			break;
		part.buf1 = m->optim.buf1 + off;
		part.buf2 = m->optim.buf2 ? m->optim.buf2 + off : NULL;
		pp_nn_optim_step_cpu(&part, m->params + off, m->grads + off,
				     PP_MIN((size_t)NN_OPT_FLOATS, m->n_params - off));
	}
}

/*
 * Spins until *v is 'value' (is_value) or is not (!is_value), read with
 * acquire, for 'ns' at most; true when it came to that.
 */
static bool spin_until(const uint64_t *v, uint64_t value, bool is_value, uint64_t ns)
{
	const uint64_t t0 = pp_now_ns();

	for (unsigned i = 1;; i++) {
		if ((__atomic_load_n(v, __ATOMIC_ACQUIRE) == value) == is_value)
			return true;
#if defined(__x86_64__) || defined(__i386__)
		__builtin_ia32_pause();
#endif
		if (i % 64 == 0 && pp_now_ns() - t0 >= ns)
			return false;
	}
}

void pp_nn_cpu_set_spin(struct pp_model *m, uint64_t ns)
{
	struct nn_cpu *cpu = m->ctx;

	__atomic_store_n(&cpu->sched->spin_ns, ns, __ATOMIC_RELAXED);
}

static void *worker_main(void *arg)
{
	struct nn_worker *wk = arg;
	struct pp_model *m = wk->m;
	struct nn_cpu *cpu = m->ctx;
	struct nn_sched *s = cpu->sched;
	uint64_t seen = 0;

	nn_fp_enter(!m->cfg.keep_denormals); /* the thread's own, for its whole life */
	for (;;) {
		const uint64_t spin = __atomic_load_n(&s->spin_ns, __ATOMIC_RELAXED);

		if (!spin_until(&s->generation, seen, false, spin)) {
			pthread_mutex_lock(&cpu->lock);
			s->sleepers++;
			while (!cpu->quit && __atomic_load_n(&s->generation, __ATOMIC_ACQUIRE) == seen)
				pthread_cond_wait(&cpu->go, &cpu->lock);
			s->sleepers--;
			pthread_mutex_unlock(&cpu->lock);
		}
		/* quit is set before the generation is bumped: seen with it */
		if (__atomic_load_n(&cpu->quit, __ATOMIC_ACQUIRE))
			break;
		seen = __atomic_load_n(&s->generation, __ATOMIC_ACQUIRE);
		nn_fp_follow(cpu->fp_csr);
		cpu->work(wk);
		/* the last one wakes the caller if it sleeps; acq_rel: the caller sees the work */
		if (__atomic_sub_fetch(&s->pending, 1, __ATOMIC_ACQ_REL) == 0) {
			pthread_mutex_lock(&cpu->lock);
			if (s->caller_waits)
				pthread_cond_signal(&cpu->done);
			pthread_mutex_unlock(&cpu->lock);
		}
	}
	return NULL;
}

/* Runs cpu->work on every worker, the caller being worker 0, and waits for them all. */
static void run_workers(struct pp_model *m, void (*work)(struct nn_worker *wk))
{
	struct nn_cpu *cpu = m->ctx;
	struct nn_sched *s = cpu->sched;

	cpu->work = work;
	if (cpu->threads > 1) {
		cpu->fp_csr = nn_fp_get();
		__atomic_store_n(&s->pending, (uint64_t)cpu->threads - 1, __ATOMIC_RELAXED);
		/* release: the job, its work and the controls are seen with the generation */
		__atomic_add_fetch(&s->generation, 1, __ATOMIC_RELEASE);
		/* those that sleep are woken; one going to sleep sees the generation under the lock */
		pthread_mutex_lock(&cpu->lock);
		if (s->sleepers > 0)
			pthread_cond_broadcast(&cpu->go);
		pthread_mutex_unlock(&cpu->lock);
	}
	work(&cpu->workers[0]);
	if (cpu->threads > 1 &&
	    !spin_until(&s->pending, 0, true, __atomic_load_n(&s->spin_ns, __ATOMIC_RELAXED))) {
		pthread_mutex_lock(&cpu->lock);
		s->caller_waits = true;
		while (__atomic_load_n(&s->pending, __ATOMIC_ACQUIRE) != 0)
			pthread_cond_wait(&cpu->done, &cpu->lock);
		s->caller_waits = false;
		pthread_mutex_unlock(&cpu->lock);
	}
}

/*
 * Runs the job's chunks on the workers, then adds the losses in sample
 * order; returns the error of the first failed chunk.
 */
static int run_job(struct pp_model *m, struct nn_job *job)
{
	struct nn_cpu *cpu = m->ctx;

	cpu->job_chunks = nn_chunks_for(job->batch, conv_params_end(m));
	cpu->sched->next_chunk = 0;
	cpu->job = job;
	run_workers(m, run_chunks);
	for (size_t c = 0; c < cpu->job_chunks; c++)
		if (cpu->chunks[c].err)
			return pp_error_set(cpu->chunks[c].err, cpu->chunks[c].msg);
	for (size_t c = 0; c < cpu->job_chunks; c++)
		m->metrics.correct += cpu->chunks[c].correct;
	for (size_t i = 0; i < job->batch; i++)
		m->metrics.loss_sum += cpu->losses[i];
	m->metrics.samples += job->batch;
	return 0;
}

static void stop_workers(struct pp_model *m, int started)
{
	struct nn_cpu *cpu = m->ctx;

	pthread_mutex_lock(&cpu->lock);
	__atomic_store_n(&cpu->quit, true, __ATOMIC_RELEASE);
	/* a new generation, for those that spin */
	__atomic_add_fetch(&cpu->sched->generation, 1, __ATOMIC_RELEASE);
	pthread_cond_broadcast(&cpu->go);
	pthread_mutex_unlock(&cpu->lock);
	for (int t = 0; t < started; t++)
		pthread_join(cpu->tids[t], NULL);
}

static void cpu_teardown(struct pp_model *m)
{
	struct nn_cpu *cpu = m->ctx;

	if (!cpu)
		return;
	if (cpu->tids) {
		stop_workers(m, cpu->threads_started);
		pthread_cond_destroy(&cpu->go);
		pthread_cond_destroy(&cpu->done);
		pthread_mutex_destroy(&cpu->lock);
	}
	free(cpu->tids);
	free(cpu->sched);
	if (cpu->workers)
		for (int t = 0; t < cpu->threads; t++) {
			pp_nn_mem_free(m->dev, cpu->workers[t].col);
			pp_nn_mem_free(m->dev, cpu->workers[t].dcol);
		}
	free(cpu->workers);
	if (cpu->chunks)
		for (size_t c = 1; c < cpu->chunks_ready; c++)
			pp_nn_mem_free(m->dev, cpu->chunks[c].grads);
	free(cpu->chunks);
	free(cpu->dw_tasks);
	free(cpu->ranges);
	pp_nn_mem_free(m->dev, cpu->losses);
	free(cpu->layer);
	free(cpu);
	m->ctx = NULL;
}

/*
 * Adds the task of parameters j0..j1-1 of layer i to the last range, or
 * counts it when cpu->dw_tasks is NULL.
 */
static void add_task(struct pp_model *m, size_t i, size_t j0, size_t j1)
{
	struct nn_cpu *cpu = m->ctx;

	if (cpu->dw_tasks) {
		cpu->dw_tasks[cpu->n_dw_tasks] = (struct nn_dw_task){ .layer = i, .range = cpu->n_ranges - 1,
								  .j0 = (int)j0, .j1 = (int)j1 };
		cpu->ranges[cpu->n_ranges - 1].n_tasks++;
	}
	cpu->n_dw_tasks++;
}

/*
 * The parameters' tasks (struct nn_dw_task), layer by layer from the last
 * (the order in which a backward pass produces them, and the gradient
 * hook gets them): a linear layer's blocks of NN_DW_COLS columns, a
 * convolution's weight and bias in slices of NN_SUM_FLOATS.  Each layer
 * with parameters is a range (struct nn_grad_range).
 */
static int make_tasks(struct pp_model *m)
{
	struct nn_cpu *cpu = m->ctx;

	for (int pass = 0; pass < 2; pass++) {
		cpu->n_dw_tasks = 0;
		cpu->n_ranges = 0;
		for (size_t i = m->n_layers; i-- > 0;) {
			const struct nn_layer *l = &m->layers[i];

			if (l->kind != NN_LINEAR && l->kind != NN_CONV)
				continue;
			if (cpu->ranges)
				cpu->ranges[cpu->n_ranges] = (struct nn_grad_range){ .off = l->w_off,
										  .count = l->n_w + l->n_b };
			cpu->n_ranges++;
			for (size_t j = 0; l->kind == NN_LINEAR && j < l->in_size; j += NN_DW_COLS)
				add_task(m, i, j, PP_MIN(j + NN_DW_COLS, l->in_size));
			for (size_t j = 0; l->kind == NN_CONV && j < l->n_w; j += NN_SUM_FLOATS)
				add_task(m, i, l->w_off + j, l->w_off + PP_MIN(j + NN_SUM_FLOATS, l->n_w));
			for (size_t j = 0; l->kind == NN_CONV && j < l->n_b; j += NN_SUM_FLOATS)
				add_task(m, i, l->b_off + j, l->b_off + PP_MIN(j + NN_SUM_FLOATS, l->n_b));
		}
		if (pass == 0) {
			cpu->dw_tasks = calloc(PP_MAX(cpu->n_dw_tasks, (size_t)1), sizeof(*cpu->dw_tasks));
			cpu->ranges = calloc(PP_MAX(cpu->n_ranges, (size_t)1), sizeof(*cpu->ranges));
			if (!cpu->dw_tasks || !cpu->ranges)
				return pp_error(-ENOMEM, "model: out of memory");
		}
	}
	return 0;
}

/* Allocates the per-thread buffers and starts the threads. */
static int cpu_setup(struct pp_model *m)
{
	struct nn_cpu *cpu;
	size_t col_one = 0;
	sigset_t caller;
	bool masked;
	int ret = pp_blas_open();

	if (ret)
		return ret;
	/* OpenBLAS starts its own threads here when it has none yet (in a
	 * child after fork()): they take the mask of pinpipe's threads. */
	masked = pp_signals_block(&caller) == 0;
	pp_blas_single_thread();
	if (masked)
		pp_signals_restore(&caller);
	cpu = calloc(1, sizeof(*cpu));
	if (cpu)
		cpu->layer = calloc(m->n_layers, sizeof(*cpu->layer));
	m->ctx = cpu;
	if (!cpu || !cpu->layer)
		return pp_error(-ENOMEM, "model: out of memory");
	for (size_t i = 0; i < m->n_layers; i++) {
		struct nn_layer *l = &m->layers[i];
		size_t cols = (size_t)l->out_h * l->out_w * l->in_c * l->k * l->k;

		if (l->kind != NN_CONV)
			continue;
		cpu->layer[i].direct = pp_nn_conv2d_direct_fits(l);
		if (cpu->layer[i].direct)
			continue;
		cpu->layer[i].col_off = cpu->col_floats;
		cpu->col_floats += cols;
		col_one = PP_MAX(col_one, l->sparse_dout ? pp_nn_conv2d_backward_pooled_scratch(l, pool_of(m, i))
							 : cols);
	}
	cpu->group = cpu->col_floats ? PP_MIN(PP_MAX(NN_GROUP_BYTES / (cpu->col_floats * sizeof(float)), 1u),
					  (size_t)NN_GROUP_MAX) : 0;
	cpu->threads = m->cfg.threads;
	cpu->workers = calloc((size_t)cpu->threads, sizeof(*cpu->workers));
	cpu->chunks = calloc(NN_CHUNKS, sizeof(*cpu->chunks));
	cpu->sched = aligned_alloc(NN_LINE, sizeof(*cpu->sched));
	if (!cpu->workers || !cpu->chunks || !cpu->sched)
		return pp_error(-ENOMEM, "model: out of memory");
	memset(cpu->sched, 0, sizeof(*cpu->sched));
	cpu->sched->spin_ns = (unsigned)cpu->threads < (unsigned)pp_cpu_usable_cores() ? NN_SPIN_NS : 0;
	cpu->chunks[0].grads = m->grads;
	cpu->chunks_ready = 1;
	ret = make_tasks(m);
	if (ret)
		return ret;
	for (int t = 0; t < cpu->threads; t++) {
		struct nn_worker *wk = &cpu->workers[t];

		wk->m = m;
		ret = pp_nn_mem_alloc(m->dev, (cpu->col_floats ? cpu->group * cpu->col_floats : 0) *
							   sizeof(float), (void **)&wk->col);
		if (!ret)
			ret = pp_nn_mem_alloc(m->dev, col_one * sizeof(float), (void **)&wk->dcol);
		if (ret)
			return ret;
	}
	if (cpu->threads == 1)
		return 0;
	cpu->tids = calloc((size_t)cpu->threads - 1, sizeof(*cpu->tids));
	if (!cpu->tids)
		return pp_error(-ENOMEM, "model: out of memory");
	pthread_mutex_init(&cpu->lock, NULL);
	pthread_cond_init(&cpu->go, NULL);
	pthread_cond_init(&cpu->done, NULL);
	for (int t = 1; t < cpu->threads; t++) {
		ret = pp_thread_create(&cpu->tids[t - 1], worker_main, &cpu->workers[t]);
		if (ret)
			return pp_error(ret, "model: starting thread %d of %d: %s", t, cpu->threads,
					pp_strerror(ret));
		cpu->threads_started++;
	}
	return 0;
}


/* The samples' losses, and the gradient buffers of the chunks of a step of m->capacity samples. */
static int cpu_reserve(struct pp_model *m)
{
	struct nn_cpu *cpu = m->ctx;
	const size_t end = conv_params_end(m);
	const size_t chunks = end ? nn_chunks_for(m->capacity, end) : 1;
	int ret;

	pp_nn_mem_free(m->dev, cpu->losses);
	cpu->losses = NULL;
	ret = pp_nn_mem_alloc(m->dev, m->capacity * sizeof(double), (void **)&cpu->losses);
	/* counted once allocated: a failure leaves no slot counted without its buffer */
	while (!ret && cpu->chunks_ready < chunks) {
		ret = pp_nn_mem_alloc(m->dev, end * sizeof(float),
				      (void **)&cpu->chunks[cpu->chunks_ready].grads);
		if (!ret)
			cpu->chunks_ready++;
	}
	return ret;
}

static int run_batch(struct pp_model *m, struct nn_job *job)
{
	struct nn_cpu *cpu = m->ctx;
	const struct nn_layer *last = &m->layers[m->n_layers - 1];
	int ret;

	for (size_t i = 0; i < job->batch; i++)
		if (job->labels[i] < 0 || job->labels[i] >= last->out_c)
			return pp_error(-ERANGE, "model inputs: label %d of sample %zu is outside 0..%d",
					(int)job->labels[i], i, last->out_c - 1);
	ret = run_job(m, job);
	if (ret)
		return ret;
	if (job->logits)
		memcpy(job->logits, output_of(m, job, m->n_layers - 1),
		       job->batch * last->out_size * sizeof(float));
	if (!job->train)
		return 0;
	cpu->sched->next_dw_task = 0;
	cpu->next_range = 0;
	cpu->range_status = 0;
	for (size_t r = 0; r < cpu->n_ranges; r++)
		cpu->ranges[r].done = 0;
	/* each range to the trainer's hook (an average over ranks) as it is made whole */
	run_workers(m, run_dw_tasks);
	hand_over_ranges(m); /* those the other threads finished last */
	ret = cpu->range_status;
	if (ret >= 0) {
		/* the hook's work in flight ended, then the update */
		const int sync = pp_nn_model_grads_sync(m);

		ret = sync < 0 ? sync : ret | sync;
	}
	if (ret)
		return ret < 0 ? ret : 0;
	cpu->sched->next_dw_task = 0;
	run_workers(m, run_updates);
	m->optim.t++; /* the slices' updates were step t + 1 (run_updates()) */
	return 0;
}

/* The job in the model's floating-point environment (nn_fp_enter()), the caller's put back. */
static int cpu_run(struct pp_model *m, struct nn_job *job)
{
	const unsigned env = nn_fp_enter(!m->cfg.keep_denormals);
	const int ret = run_batch(m, job);

	nn_fp_leave(env);
	return ret;
}

static int cpu_metrics(struct pp_model *m, bool reset, struct pp_model_metrics *metrics_p)
{
	*metrics_p = m->metrics;
	if (reset)
		memset(&m->metrics, 0, sizeof(m->metrics));
	return 0;
}

const struct nn_backend pp_nn_backend_cpu = {
	.setup = cpu_setup,
	.teardown = cpu_teardown,
	.reserve = cpu_reserve,
	.run = cpu_run,
	.metrics = cpu_metrics,
	.queued = false,
};
