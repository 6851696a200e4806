/*
 * device/device_sim.c: the sim backend, a discrete device simulated on
 * host threads.  Its memory is host memory of its own (counted against a
 * capacity); each stream has a copy-engine thread that runs the stream's
 * queue in order: copies, event records, waits on events, host functions.
 * A copy from pinned memory only enqueues; a copy from or to pageable memory
 * is staged through a bounce buffer, as the CUDA driver does: the caller
 * copies into it and waits for the engine to move it (host to device), or
 * waits for the engine to fill it and copies out of it (device to host), so
 * that a pageable copy costs the host a memcpy either way (a pageable copy
 * blocks the host, not the other streams: host functions, which stand for
 * kernels, run on beside it).  An optional bandwidth cap makes a copy of n bytes last
 * at least n / bw, and an optional call cost makes every call that reaches a
 * stream (copy, record, query, wait, synchronize, host function) spin the
 * caller's thread for that long first, as a GPU driver's calls cost the host
 * microseconds each: with it, a figure that counts host time in those calls
 * as exposed copy time shows its error on a machine without a GPU.  With poisoning on, freed
 * and released memory is overwritten, and freed memory is held back for a
 * while so that a late read of it sees the poison instead of reused memory.
 * Faults can be injected for the tests (pp_device_sim_inject).
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common/fault.h"
#include "device/device_impl.h"

/*
 * The oversleep of a capped copy (timer slack: how long after its due end
 * it ended), up to this many ns, is taken back from the next copy, so that
 * a busy stream runs at the cap.  Idle time between copies is not: a copy
 * issued after a pause still takes n / bw.
 */
#define SIM_BW_CARRY_NS 5000000u

/* Freed memory held back with poisoning on, at most, in bytes. */
#define SIM_QUARANTINE_BYTES (256u << 20)

enum sim_op_type {
	SIM_COPY = 0,
	SIM_RECORD = 1,
	SIM_WAIT = 2,
	SIM_HOST = 3,
};

struct sim_event;

/* The outcome of a staged copy, written by the engine for the caller that waits for it. */
struct sim_result {
	int ret;                   /* 0 or -EIO */
	char msg[256];             /* its message when ret < 0 */
};

/* One entry of a stream's queue. */
struct sim_op {
	struct sim_op *next;
	enum sim_op_type type;
	uint64_t seq;              /* place in the stream, from 1 */
	void *dst;                 /* COPY */
	const void *src;           /* COPY */
	size_t n;                  /* COPY: bytes */
	enum pp_copy_kind kind;    /* COPY */
	void *bounce;              /* COPY: staging buffer freed once copied, or NULL */
	bool staged;               /* COPY: from or to pageable memory */
	struct sim_result *result; /* COPY, staged: where the engine writes the outcome */
	struct sim_event *event;   /* RECORD, WAIT */
	uint64_t target;           /* RECORD: number of this record; WAIT: record to wait for */
	void (*fn)(void *arg);     /* HOST */
	void *arg;                 /* HOST */
};

/* Freed memory kept poisoned until SIM_QUARANTINE_BYTES is exceeded. */
struct sim_quarantined {
	struct sim_quarantined *next;
	void *ptr;
	size_t bytes;
};

struct sim_stream;

struct sim_device {
	uint64_t bw;                /* bandwidth cap, bytes/s; 0: none */
	uint64_t call_ns;           /* host time each call to a stream costs, ns; 0: none */
	bool poison;                /* overwrite freed and released memory */
	uint64_t capacity;          /* device memory, bytes */
	atomic_llong fail_copy_after;  /* copies left before they fail; < 0: never */
	atomic_llong fail_alloc_after; /* allocations left before they fail; < 0: never */

	pthread_mutex_t mem_mu;     /* guards used and the quarantine */
	uint64_t used;              /* device memory allocated, bytes */
	struct sim_quarantined *q_head, *q_tail; /* oldest first */
	size_t q_bytes;             /* bytes in the quarantine */

	pthread_mutex_t streams_mu; /* guards streams */
	struct sim_stream *streams; /* linked by next */

	pthread_mutex_t ev_mu;      /* guards every sim_event */
	pthread_cond_t ev_cv;       /* broadcast when an event completes or a wait ends */
};

struct sim_stream {
	struct sim_device *sim;
	struct pp_stream *stream;   /* the public handle (device, id) */
	struct sim_stream *next;    /* in sim->streams */
	pthread_t thread;           /* the copy engine */
	pthread_mutex_t mu;         /* guards everything below */
	pthread_cond_t work_cv;     /* signalled when an op is queued or stop is set */
	pthread_cond_t done_cv;     /* broadcast when an op completes */
	struct sim_op *head, *tail; /* queued ops; head is running */
	uint64_t issued;            /* ops queued so far */
	uint64_t completed;         /* seq of the last op completed */
	uint64_t bw_credit;         /* engine only: oversleep of capped copies not taken back yet, ns */
	bool stop;                  /* the engine exits once the queue is empty */
	int error;                  /* first error since the last synchronize, or 0 */
	char msg[256];              /* its message */
};

struct sim_event {
	uint64_t recorded;          /* records issued */
	uint64_t done;              /* number of the latest record completed */
	uint64_t done_ns;           /* when it completed (pp_now_ns) */
	int error;                  /* error of the stream when it completed, or 0 */
	char msg[256];              /* its message */
	unsigned waiters;           /* WAIT ops queued on it */
	unsigned pending_records;   /* RECORD ops queued on any stream, not run yet */
};

static struct sim_device *sim_of(struct pp_device *dev)
{
	return dev->ctx;
}

/* True when the fault counter says this operation fails; counts it down otherwise. */
static bool take_fault(atomic_llong *after)
{
	long long v = atomic_load(after);

	for (;;) {
		if (v < 0)
			return false;
		if (v == 0)
			return true;
		if (atomic_compare_exchange_weak(after, &v, v - 1))
			return false;
	}
}

/* ------------------------------------------------------------------ the copy engine */

/* Sleeps until the pp_now_ns() time 'when'. */
static void sleep_until(uint64_t when)
{
	struct timespec ts = { .tv_sec = (time_t)(when / 1000000000u),
			       .tv_nsec = (long)(when % 1000000000u) };

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		continue;
}

/* Runs a copy; returns 0 or -EIO with s->msg written (s->mu not held). */
static int engine_copy(struct sim_stream *s, struct sim_op *op, char *msg, size_t msg_size)
{
	struct sim_device *sim = s->sim;
	uint64_t t0;
	int ret = 0;

	t0 = pp_now_ns();
	if (take_fault(&sim->fail_copy_after)) {
		snprintf(msg, msg_size, "sim: stream %u: copy %llu (%zu bytes, %s) failed: injected fault",
			 s->stream->id, (unsigned long long)op->seq, op->n, pp_copy_kind_name(op->kind));
		ret = -EIO;
	} else {
		memmove(op->dst, op->src, op->n);
	}
	if (sim->bw > 0) {
		uint64_t need = (uint64_t)((double)op->n * 1e9 / (double)sim->bw);
		uint64_t credit = PP_MIN(s->bw_credit, need);
		uint64_t due = t0 + need - credit;

		s->bw_credit -= credit;
		if (pp_now_ns() < due) {
			sleep_until(due);
			s->bw_credit = PP_MIN(s->bw_credit + (pp_now_ns() - due),
					      (uint64_t)SIM_BW_CARRY_NS);
		}
	}
	pp_device_add_copy_ns(s->stream->dev, pp_now_ns() - t0);
	free(op->bounce);
	return ret;
}

static void engine_record(struct sim_stream *s, struct sim_op *op)
{
	struct sim_device *sim = s->sim;
	struct sim_event *e = op->event;
	char msg[sizeof(s->msg)];
	int error;

	pthread_mutex_lock(&s->mu);
	error = s->error;
	memcpy(msg, s->msg, sizeof(msg));
	pthread_mutex_unlock(&s->mu);
	pthread_mutex_lock(&sim->ev_mu);
	e->pending_records--;
	if (op->target > e->done) {
		e->done = op->target;
		e->done_ns = pp_now_ns();
		e->error = error;
		memcpy(e->msg, msg, sizeof(e->msg));
	}
	pthread_cond_broadcast(&sim->ev_cv);
	pthread_mutex_unlock(&sim->ev_mu);
}

static void engine_wait(struct sim_stream *s, struct sim_op *op)
{
	struct sim_device *sim = s->sim;
	struct sim_event *e = op->event;

	pthread_mutex_lock(&sim->ev_mu);
	while (e->done < op->target)
		pthread_cond_wait(&sim->ev_cv, &sim->ev_mu);
	e->waiters--;
	pthread_cond_broadcast(&sim->ev_cv);
	pthread_mutex_unlock(&sim->ev_mu);
}

static void *engine_main(void *arg)
{
	struct sim_stream *s = arg;
	char msg[sizeof(s->msg)];
	struct sim_op *op;
	int ret;

	pthread_mutex_lock(&s->mu);
	for (;;) {
		while (s->head == NULL && !s->stop)
			pthread_cond_wait(&s->work_cv, &s->mu);
		if (s->head == NULL)
			break;
		op = s->head;
		pthread_mutex_unlock(&s->mu);
		ret = 0;
		switch (op->type) {
		case SIM_COPY:
			ret = engine_copy(s, op, msg, sizeof(msg));
			break;
		case SIM_RECORD:
			engine_record(s, op);
			break;
		case SIM_WAIT:
			engine_wait(s, op);
			break;
		case SIM_HOST:
			op->fn(op->arg);
			break;
		}
		pthread_mutex_lock(&s->mu);
		if (op->result != NULL) {
			op->result->ret = ret;
			if (ret < 0)
				memcpy(op->result->msg, msg, sizeof(op->result->msg));
		}
		if (ret < 0 && s->error == 0) {
			s->error = ret;
			memcpy(s->msg, msg, sizeof(s->msg));
		}
		s->head = op->next;
		if (s->head == NULL)
			s->tail = NULL;
		s->completed = op->seq;
		pthread_cond_broadcast(&s->done_cv);
		free(op);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

/* The host cost of a call to a stream (call_us): the caller's thread spins that long. */
static void call_cost(struct sim_device *sim)
{
	uint64_t until;

	if (sim->call_ns == 0)
		return;
	until = pp_now_ns() + sim->call_ns;
	while (pp_now_ns() < until)
		continue;
}

static struct sim_op *op_new(struct pp_stream *stream, enum sim_op_type type)
{
	struct sim_op *op;

	if (!stream->replaying)
		call_cost(sim_of(stream->dev));
	op = pp_calloc(1, sizeof(*op));

	if (op == NULL)
		pp_error(-ENOMEM, "%s: stream %u: out of memory for a queue entry",
			 stream->dev->props.name, stream->id);
	else
		op->type = type;
	return op;
}

/* Queues op (which cannot fail any more) and returns its seq. */
static uint64_t enqueue(struct sim_stream *s, struct sim_op *op)
{
	uint64_t seq;

	pthread_mutex_lock(&s->mu);
	op->seq = seq = ++s->issued;
	if (s->tail != NULL)
		s->tail->next = op;
	else
		s->head = op;
	s->tail = op;
	pthread_cond_signal(&s->work_cv);
	pthread_mutex_unlock(&s->mu);
	return seq;
}

/*
 * Waits until the staged copy 'seq' has completed; returns its own outcome,
 * which the engine wrote to *result (whatever error the stream had before).
 */
static int wait_op(struct sim_stream *s, uint64_t seq, const struct sim_result *result)
{
	pthread_mutex_lock(&s->mu);
	while (s->completed < seq)
		pthread_cond_wait(&s->done_cv, &s->mu);
	pthread_mutex_unlock(&s->mu);
	return result->ret < 0 ? pp_error_set(result->ret, result->msg) : 0;
}

/* ------------------------------------------------------------------ streams */

static int sim_stream_create(struct pp_stream *stream)
{
	struct sim_device *sim = sim_of(stream->dev);
	struct sim_stream *s = pp_calloc(1, sizeof(*s));
	int ret;

	if (s == NULL)
		return pp_error(-ENOMEM, "sim: out of memory for stream %u", stream->id);
	s->sim = sim;
	s->stream = stream;
	if (pthread_mutex_init(&s->mu, NULL) != 0) {
		ret = pp_error(-ENOMEM, "sim: stream %u: cannot create a mutex", stream->id);
		goto err_free_stream;
	}
	if (pthread_cond_init(&s->work_cv, NULL) != 0) {
		ret = pp_error(-ENOMEM, "sim: stream %u: cannot create a condition variable", stream->id);
		goto err_destroy_mutex;
	}
	if (pthread_cond_init(&s->done_cv, NULL) != 0) {
		ret = pp_error(-ENOMEM, "sim: stream %u: cannot create a condition variable", stream->id);
		goto err_destroy_work_cv;
	}
	ret = pp_thread_create(&s->thread, engine_main, s);
	if (ret != 0) {
		ret = pp_error(ret, "sim: stream %u: cannot start its copy engine thread (%s)",
			       stream->id, strerror(-ret));
		goto err_destroy_done_cv;
	}
	pthread_mutex_lock(&sim->streams_mu);
	s->next = sim->streams;
	sim->streams = s;
	pthread_mutex_unlock(&sim->streams_mu);
	stream->ctx = s;
	return 0;

err_destroy_done_cv:
	pthread_cond_destroy(&s->done_cv);
err_destroy_work_cv:
	pthread_cond_destroy(&s->work_cv);
err_destroy_mutex:
	pthread_mutex_destroy(&s->mu);
err_free_stream:
	free(s);
	return ret;
}

static void sim_stream_destroy(struct pp_stream *stream)
{
	struct sim_stream *s = stream->ctx;
	struct sim_device *sim = s->sim;
	struct sim_stream **pp;

	pthread_mutex_lock(&sim->streams_mu);
	for (pp = &sim->streams; *pp != s; pp = &(*pp)->next)
		continue;
	*pp = s->next;
	pthread_mutex_unlock(&sim->streams_mu);
	pthread_mutex_lock(&s->mu);
	s->stop = true;
	pthread_cond_signal(&s->work_cv);
	pthread_mutex_unlock(&s->mu);
	pthread_join(s->thread, NULL);
	pthread_cond_destroy(&s->done_cv);
	pthread_cond_destroy(&s->work_cv);
	pthread_mutex_destroy(&s->mu);
	free(s);
}

static int sim_stream_synchronize(struct pp_stream *stream)
{
	struct sim_stream *s = stream->ctx;
	char msg[sizeof(s->msg)];
	int ret;

	call_cost(s->sim);
	pthread_mutex_lock(&s->mu);
	while (s->completed < s->issued)
		pthread_cond_wait(&s->done_cv, &s->mu);
	ret = s->error;
	memcpy(msg, s->msg, sizeof(msg));
	s->error = 0;
	pthread_mutex_unlock(&s->mu);
	return ret < 0 ? pp_error_set(ret, msg) : 0;
}

/* Waits for every stream; returns the error of the first that has one (not cleared), or 0. */
static int sim_synchronize(struct pp_device *dev)
{
	struct sim_device *sim = sim_of(dev);
	char msg[sizeof(((struct sim_stream *)NULL)->msg)];
	int ret = 0;

	pthread_mutex_lock(&sim->streams_mu);
	for (struct sim_stream *s = sim->streams; s != NULL; s = s->next) {
		pthread_mutex_lock(&s->mu);
		while (s->completed < s->issued)
			pthread_cond_wait(&s->done_cv, &s->mu);
		if (ret == 0 && s->error < 0) {
			ret = s->error;
			memcpy(msg, s->msg, sizeof(msg));
		}
		pthread_mutex_unlock(&s->mu);
	}
	pthread_mutex_unlock(&sim->streams_mu);
	return ret < 0 ? pp_error_set(ret, msg) : 0;
}

static int sim_launch_host(struct pp_stream *stream, void (*fn)(void *arg), void *arg)
{
	struct sim_op *op = op_new(stream, SIM_HOST);

	if (op == NULL)
		return -ENOMEM;
	op->fn = fn;
	op->arg = arg;
	enqueue(stream->ctx, op);
	return 0;
}

static int sim_stream_wait_event(struct pp_stream *stream, struct pp_event *event)
{
	struct sim_device *sim = sim_of(stream->dev);
	struct sim_event *e = event->ctx;
	struct sim_op *op = op_new(stream, SIM_WAIT);
	bool pending;

	if (op == NULL)
		return -ENOMEM;
	pthread_mutex_lock(&sim->ev_mu);
	op->target = e->recorded;
	pending = e->done < op->target;
	if (pending)
		e->waiters++;
	pthread_mutex_unlock(&sim->ev_mu);
	if (!pending) {
		free(op);
		return 0;
	}
	op->event = e;
	enqueue(stream->ctx, op);
	return 0;
}

/* ------------------------------------------------------------------ events */

static int sim_event_create(struct pp_event *event)
{
	struct sim_event *e = pp_calloc(1, sizeof(*e));

	if (e == NULL)
		return pp_error(-ENOMEM, "sim: out of memory for an event");
	event->ctx = e;
	return 0;
}

static void sim_event_destroy(struct pp_event *event)
{
	struct sim_device *sim = sim_of(event->dev);
	struct sim_event *e = event->ctx;

	pthread_mutex_lock(&sim->ev_mu);
	while (e->pending_records > 0 || e->waiters > 0)
		pthread_cond_wait(&sim->ev_cv, &sim->ev_mu);
	pthread_mutex_unlock(&sim->ev_mu);
	free(e);
}

static int sim_event_record(struct pp_event *event, struct pp_stream *stream)
{
	struct sim_device *sim = sim_of(stream->dev);
	struct sim_event *e = event->ctx;
	struct sim_op *op = op_new(stream, SIM_RECORD);

	if (op == NULL)
		return -ENOMEM;
	op->event = e;
	pthread_mutex_lock(&sim->ev_mu);
	op->target = ++e->recorded;
	e->pending_records++;
	pthread_mutex_unlock(&sim->ev_mu);
	enqueue(stream->ctx, op);
	return 0;
}

static int sim_event_query(struct pp_event *event)
{
	struct sim_device *sim = sim_of(event->dev);
	struct sim_event *e = event->ctx;
	char msg[sizeof(e->msg)];
	int ret, error = 0;

	call_cost(sim);
	pthread_mutex_lock(&sim->ev_mu);
	ret = e->done >= e->recorded;
	if (ret) {
		error = e->error;
		memcpy(msg, e->msg, sizeof(msg));
	}
	pthread_mutex_unlock(&sim->ev_mu);
	return error < 0 ? pp_error_set(error, msg) : ret;
}

static int sim_event_synchronize(struct pp_event *event)
{
	struct sim_device *sim = sim_of(event->dev);
	struct sim_event *e = event->ctx;
	char msg[sizeof(e->msg)];
	uint64_t target;
	int ret;

	call_cost(sim);
	pthread_mutex_lock(&sim->ev_mu);
	target = e->recorded;
	while (e->done < target)
		pthread_cond_wait(&sim->ev_cv, &sim->ev_mu);
	ret = e->error;
	memcpy(msg, e->msg, sizeof(msg));
	pthread_mutex_unlock(&sim->ev_mu);
	return ret < 0 ? pp_error_set(ret, msg) : 0;
}

static int sim_event_elapsed_ns(struct pp_event *start, struct pp_event *end, uint64_t *ns_p)
{
	struct sim_device *sim = sim_of(start->dev);
	struct sim_event *a = start->ctx, *b = end->ctx;
	uint64_t t0, t1;
	bool done;

	pthread_mutex_lock(&sim->ev_mu);
	done = a->done >= a->recorded && b->done >= b->recorded;
	t0 = a->done_ns;
	t1 = b->done_ns;
	pthread_mutex_unlock(&sim->ev_mu);
	if (!done)
		return pp_error(-EAGAIN, "sim: elapsed time asked of an event not completed yet");
	*ns_p = t1 > t0 ? t1 - t0 : 0;
	return 0;
}

/* ------------------------------------------------------------------ copies */

static int sim_memcpy_async(struct pp_stream *stream, void *dst, const void *src, size_t n,
			    enum pp_copy_kind kind, bool host_pinned)
{
	struct sim_op *op = op_new(stream, SIM_COPY);
	bool staged = kind != PP_COPY_D2D && !host_pinned;
	struct sim_result result = { .ret = 0 };
	void *staging = NULL;
	uint64_t seq;
	int ret;

	if (op == NULL)
		return -ENOMEM;
	op->dst = dst;
	op->src = src;
	op->n = n;
	op->kind = kind;
	op->staged = staged;
	op->result = staged ? &result : NULL;
	if (staged && kind == PP_COPY_H2D) {
		/* The driver's staging: the caller copies into a bounce buffer. */
		op->bounce = pp_malloc(n);
		if (op->bounce == NULL) {
			free(op);
			return pp_error(-ENOMEM, "%s: stream %u: no memory for a bounce buffer of %zu bytes",
					stream->dev->props.name, stream->id, n);
		}
		memcpy(op->bounce, src, n);
		op->src = op->bounce;
	} else if (staged && kind == PP_COPY_D2H) {
		/* The other way: the engine fills the bounce buffer, the caller empties it. */
		staging = pp_malloc(n);
		if (staging == NULL) {
			free(op);
			return pp_error(-ENOMEM, "%s: stream %u: no memory for a bounce buffer of %zu bytes",
					stream->dev->props.name, stream->id, n);
		}
		op->dst = staging;
	}
	seq = enqueue(stream->ctx, op);
	if (!staged)
		return 0;
	ret = wait_op(stream->ctx, seq, &result);
	if (staging != NULL) {
		if (ret == 0)
			memcpy(dst, staging, n);
		free(staging);
	}
	return ret;
}

/* ------------------------------------------------------------------ memory */

static int sim_alloc(struct pp_device *dev, size_t bytes, void **ptr_p)
{
	struct sim_device *sim = sim_of(dev);
	uint64_t used;
	void *p;
	int ret;

	if (take_fault(&sim->fail_alloc_after))
		return pp_error(-ENOMEM, "sim: allocation of %zu bytes failed: injected fault", bytes);
	pthread_mutex_lock(&sim->mem_mu);
	used = sim->used;
	if (bytes > sim->capacity - used) {
		pthread_mutex_unlock(&sim->mem_mu);
		return pp_error(-ENOMEM, "sim: out of device memory: %zu bytes asked for, %llu of %llu in use",
				bytes, (unsigned long long)used, (unsigned long long)sim->capacity);
	}
	sim->used += bytes;
	pthread_mutex_unlock(&sim->mem_mu);
	ret = pp_posix_memalign(&p, PP_DEVICE_ALIGN, bytes);
	if (ret != 0) {
		pthread_mutex_lock(&sim->mem_mu);
		sim->used -= bytes;
		pthread_mutex_unlock(&sim->mem_mu);
		return pp_error(-ENOMEM, "sim: allocation of %zu bytes failed (host memory)", bytes);
	}
	*ptr_p = p;
	return 0;
}

static void sim_free(struct pp_device *dev, void *ptr, size_t bytes)
{
	struct sim_device *sim = sim_of(dev);
	struct sim_quarantined *q = NULL;

	if (sim->poison) {
		memset(ptr, PP_SIM_POISON_BYTE, bytes);
		q = pp_malloc(sizeof(*q));
	}
	pthread_mutex_lock(&sim->mem_mu);
	sim->used -= bytes;
	if (q != NULL) {
		q->next = NULL;
		q->ptr = ptr;
		q->bytes = bytes;
		if (sim->q_tail != NULL)
			sim->q_tail->next = q;
		else
			sim->q_head = q;
		sim->q_tail = q;
		sim->q_bytes += bytes;
		ptr = NULL;
		while (sim->q_bytes > SIM_QUARANTINE_BYTES && sim->q_head != q) {
			struct sim_quarantined *old = sim->q_head;
			sim->q_head = old->next;
			sim->q_bytes -= old->bytes;
			free(old->ptr);
			free(old);
		}
	}
	pthread_mutex_unlock(&sim->mem_mu);
	free(ptr);
}

static void sim_release(struct pp_device *dev, void *ptr, size_t bytes)
{
	if (sim_of(dev)->poison)
		memset(ptr, PP_SIM_POISON_BYTE, bytes);
}

static void sim_close(struct pp_device *dev)
{
	struct sim_device *sim = sim_of(dev);

	while (sim->q_head != NULL) {
		struct sim_quarantined *q = sim->q_head;
		sim->q_head = q->next;
		free(q->ptr);
		free(q);
	}
	pthread_cond_destroy(&sim->ev_cv);
	pthread_mutex_destroy(&sim->ev_mu);
	pthread_mutex_destroy(&sim->streams_mu);
	pthread_mutex_destroy(&sim->mem_mu);
	free(sim);
}

static const struct pp_device_ops sim_ops = {
	.alloc = sim_alloc,
	.free = sim_free,
	.close = sim_close,
	.synchronize = sim_synchronize,
	.release = sim_release,
	.stream_create = sim_stream_create,
	.stream_destroy = sim_stream_destroy,
	.stream_synchronize = sim_stream_synchronize,
	.stream_wait_event = sim_stream_wait_event,
	.launch_host = sim_launch_host,
	.event_create = sim_event_create,
	.event_destroy = sim_event_destroy,
	.event_record = sim_event_record,
	.event_query = sim_event_query,
	.event_synchronize = sim_event_synchronize,
	.event_elapsed_ns = sim_event_elapsed_ns,
	.memcpy_async = sim_memcpy_async,
};

/* ------------------------------------------------------------------ open */

/*
 * Parses "<number><unit>" where unit is one of units[] (case-insensitive),
 * each meaning the factor of the same index; writes the value in base units.
 */
static bool parse_quantity(const char *s, const char *const *units, const double *factors,
			   size_t n_units, uint64_t *value_p)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (end == s || errno != 0 || !(v > 0))
		return false;
	for (size_t i = 0; i < n_units; i++) {
		if (strcasecmp(end, units[i]) == 0) {
			double x = v * factors[i];
			if (x < 1 || x > 1.8e19)
				return false;
			*value_p = (uint64_t)x;
			return true;
		}
	}
	return false;
}

static const double unit_factors[] = { 1, 1e3, 1e6, 1e9, 1e12, 1024.0, 1048576.0,
				       1073741824.0, 1099511627776.0 };

static int parse_options(struct sim_device *sim, const char *options)
{
	static const char *const rates[] = { "B/s", "KB/s", "MB/s", "GB/s", "TB/s",
					     "KiB/s", "MiB/s", "GiB/s", "TiB/s" };
	static const char *const sizes[] = { "B", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB" };
	char buf[256], *save = NULL, *opt;

	if (options == NULL)
		return 0;
	if (strlen(options) >= sizeof(buf))
		return pp_error(-EINVAL, "device 'sim:%.32s...': options too long", options);
	strcpy(buf, options);
	for (opt = strtok_r(buf, ",", &save); opt != NULL; opt = strtok_r(NULL, ",", &save)) {
		if (strncmp(opt, "bw=", 3) == 0) {
			if (!parse_quantity(opt + 3, rates, unit_factors, PP_ARRAY_SIZE(rates), &sim->bw))
				return pp_error(-EINVAL, "device 'sim:%s': bandwidth '%s': expected a "
						"number and a unit such as 25GB/s or 900MiB/s",
						options, opt + 3);
		} else if (strncmp(opt, "mem=", 4) == 0) {
			if (!parse_quantity(opt + 4, sizes, unit_factors, PP_ARRAY_SIZE(sizes),
					    &sim->capacity))
				return pp_error(-EINVAL, "device 'sim:%s': memory '%s': expected a "
						"number and a unit such as 80GB or 512MiB",
						options, opt + 4);
		} else if (strncmp(opt, "call_us=", 8) == 0) {
			char *end;
			double us;

			errno = 0;
			us = strtod(opt + 8, &end);
			if (end == opt + 8 || *end != '\0' || errno != 0 || !(us >= 0) || us > 1e6)
				return pp_error(-EINVAL, "device 'sim:%s': call cost '%s': expected "
						"microseconds from 0 to 1000000, such as 20 or 2.5",
						options, opt + 8);
			sim->call_ns = (uint64_t)(us * 1e3);
		} else if (strcmp(opt, "poison") == 0) {
			sim->poison = true;
		} else {
			return pp_error(-EINVAL, "device 'sim:%s': unknown option '%s'; expected "
					"bw=RATE, mem=SIZE, call_us=N or poison", options, opt);
		}
	}
	return 0;
}

int pp_device_sim_open(struct pp_device *dev, const char *options)
{
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
	struct sim_device *sim = pp_calloc(1, sizeof(*sim));
	char bw[32] = "no bandwidth cap", call[48] = "";
	int ret;

	if (sim == NULL)
		return pp_error(-ENOMEM, "sim: out of memory");
	sim->capacity = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 1ull << 32;
	atomic_init(&sim->fail_copy_after, -1);
	atomic_init(&sim->fail_alloc_after, -1);
	ret = parse_options(sim, options);
	if (ret < 0)
		goto err_free_sim;
	pthread_mutex_init(&sim->mem_mu, NULL);
	pthread_mutex_init(&sim->streams_mu, NULL);
	pthread_mutex_init(&sim->ev_mu, NULL);
	pthread_cond_init(&sim->ev_cv, NULL);
	dev->ops = &sim_ops;
	dev->ctx = sim;
	if (sim->bw > 0)
		snprintf(bw, sizeof(bw), "%.3g GB/s", (double)sim->bw / 1e9);
	if (sim->call_ns > 0)
		snprintf(call, sizeof(call), ", %.3g us a call", (double)sim->call_ns / 1e3);
	snprintf(dev->props.name, sizeof(dev->props.name), "sim");
	snprintf(dev->props.description, sizeof(dev->props.description),
		 "simulated device on host threads, %s%s%s", bw, call,
		 sim->poison ? ", poisoning" : "");
	dev->props.kind = PP_DEVICE_SIM;
	dev->props.total_memory = sim->capacity;
	dev->props.host_is_device = false;
	dev->props.host_addressable = true;
	dev->props.async_copy = true;
	dev->props.copy_engines = 0;
	return 0;

err_free_sim:
	free(sim);
	return ret;
}

int pp_device_sim_inject(struct pp_device *dev, enum pp_sim_fault fault, long long after)
{
	struct sim_device *sim;

	if (dev == NULL || dev->ops != &sim_ops)
		return pp_error(-EINVAL, "pp_device_sim_inject: not a sim device");
	sim = sim_of(dev);
	switch (fault) {
	case PP_SIM_FAIL_COPY:
		atomic_store(&sim->fail_copy_after, after < 0 ? -1 : after);
		return 0;
	case PP_SIM_FAIL_ALLOC:
		atomic_store(&sim->fail_alloc_after, after < 0 ? -1 : after);
		return 0;
	}
	return pp_error(-EINVAL, "pp_device_sim_inject: unknown fault %d", (int)fault);
}
