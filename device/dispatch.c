/*
 * device/dispatch.c: the device dispatcher.  Parses device names, checks
 * every call once, keeps the tables of device and host memory handed out
 * (so that a copy through a wrong pointer is an error, not a corruption),
 * allocates pinned host memory with its fallbacks, counts the statistics,
 * and does the work itself where a backend leaves an entry NULL.  Graphs:
 * the captures and what they record are graph.c's; their launch, which
 * for a backend without graphs of its own issues the recorded calls again
 * through this file's, is here.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/fault.h"
#include "device/device_impl.h"

/* ------------------------------------------------------------------ memory tables */

/* Index of the first entry whose address is greater than addr. */
static size_t table_upper(const struct pp_mem_table *t, uintptr_t addr)
{
	size_t lo = 0, hi = t->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (t->v[mid].addr <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static int table_insert(struct pp_mem_table *t, const struct pp_mem_range *r)
{
	size_t at;

	if (t->n == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 16;
		struct pp_mem_range *v = pp_realloc(t->v, cap * sizeof(*v));
		if (v == NULL)
			return pp_error(-ENOMEM, "device: no memory for the table of %zu allocations", cap);
		t->v = v;
		t->cap = cap;
	}
	at = table_upper(t, r->addr);
	memmove(&t->v[at + 1], &t->v[at], (t->n - at) * sizeof(*t->v));
	t->v[at] = *r;
	t->n++;
	return 0;
}

/* The entry that holds all of [addr, addr + n), or NULL. */
static const struct pp_mem_range *table_find(const struct pp_mem_table *t, uintptr_t addr,
					     size_t n)
{
	size_t at = table_upper(t, addr);
	const struct pp_mem_range *r;

	if (at == 0)
		return NULL;
	r = &t->v[at - 1];
	if (addr - r->addr >= r->bytes || n > r->bytes - (addr - r->addr))
		return NULL;
	return r;
}

/* True if any byte of [addr, addr + n) lies in an entry. */
static bool table_overlaps(const struct pp_mem_table *t, uintptr_t addr, size_t n)
{
	size_t at = table_upper(t, addr + n - 1);

	return at > 0 && t->v[at - 1].addr + t->v[at - 1].bytes > addr;
}

/* Removes the entry that starts at addr into *r_p; false if there is none. */
static bool table_remove(struct pp_mem_table *t, uintptr_t addr, struct pp_mem_range *r_p)
{
	size_t at = table_upper(t, addr);

	if (at == 0 || t->v[at - 1].addr != addr)
		return false;
	*r_p = t->v[at - 1];
	memmove(&t->v[at - 1], &t->v[at], (t->n - at) * sizeof(*t->v));
	t->n--;
	return true;
}

/* Frees an allocation the way it was made. */
static void mem_release(struct pp_device *dev, const struct pp_mem_range *r)
{
	void *p = (void *)r->addr;

	switch (r->kind) {
	case PP_MEM_DEVICE:
		dev->ops->free(dev, p, r->bytes);
		return;
	case PP_MEM_DRIVER:
		dev->ops->host_free_pinned(dev, p);
		return;
	case PP_MEM_MMAP_REGISTERED:
		dev->ops->host_unregister(dev, p, r->mapped);
		break;
	case PP_MEM_MMAP_LOCKED:
		munlock(p, r->mapped);
		break;
	case PP_MEM_MMAP:
		break;
	}
	munmap(p, r->mapped);
}

/* Enters a new allocation in the table t; on failure, frees it and returns the error. */
static int mem_enter(struct pp_device *dev, struct pp_mem_table *t, const struct pp_mem_range *r)
{
	int ret;

	pthread_mutex_lock(&dev->mu);
	ret = table_insert(t, r);
	pthread_mutex_unlock(&dev->mu);
	if (ret < 0)
		mem_release(dev, r);
	return ret;
}

/* Frees the allocation of the table t that starts at ptr, once the device's work is done. */
static void mem_free(struct pp_device *dev, struct pp_mem_table *t, void *ptr)
{
	struct pp_mem_range r;
	bool found;

	pp_device_synchronize(dev);
	pthread_mutex_lock(&dev->mu);
	found = table_remove(t, (uintptr_t)ptr, &r);
	pthread_mutex_unlock(&dev->mu);
	if (found)
		mem_release(dev, &r);
}

/* Frees every allocation of the table t, and the table. */
static void mem_free_all(struct pp_device *dev, struct pp_mem_table *t)
{
	for (size_t i = 0; i < t->n; i++)
		mem_release(dev, &t->v[i]);
	free(t->v);
}

/* ------------------------------------------------------------------ open and close */

/* Parses the N of "cuda:N" into *index_p. */
static int parse_cuda_index(const char *name, const char *options, int *index_p)
{
	char *end;
	long v;

	if (options == NULL) {
		*index_p = 0;
		return 0;
	}
	errno = 0;
	v = strtol(options, &end, 10);
	if (options[0] < '0' || options[0] > '9' || *end != '\0' || errno != 0 || v > 1023)
		return pp_error(-EINVAL, "device '%s': expected cuda:N with N a GPU index (0, 1, ...), got '%s'",
				name, options);
	*index_p = (int)v;
	return 0;
}

/*
 * Why CUDA cannot be had, in *why: -ENODEV where there is none (no driver,
 * no GPU, a build without it), another -errno where a driver is there and
 * CUDA failed to start; or 0, cuda:0 opened.
 */
static int try_cuda(struct pp_device *dev, char *why, size_t len)
{
	struct pp_fault_plan env = { .stall_fd = { -1, -1 } }, *plan = pp_fault_thread;
	int ret, fault;

	if (plan == NULL && getenv("PP_FAULTS") != NULL && pp_fault_parse(&env, getenv("PP_FAULTS")) == 0)
		plan = &env;
	fault = pp_fault_check(plan, PP_FAULT_CUDA_START);
	if (fault < 0)
		ret = pp_error(fault, "cuda: a driver is there and CUDA failed to start: %s "
			       "(injected fault)", pp_strerror(fault));
	else if ((ret = pp_device_cuda_count_impl()) > 0)
		ret = pp_device_cuda_open(dev, 0);
	if (ret < 0)
		snprintf(why, len, "%s", pp_last_error());
	return ret < 0 ? ret : 0;
}

/*
 * "auto": cuda:0 where CUDA works, else cpu, saying why in pp_last_error();
 * where a driver is there and CUDA failed to start, in props.fallback too.
 */
static int open_auto(struct pp_device *dev)
{
	char why[sizeof(dev->props.fallback) - 8];
	int ret = try_cuda(dev, why, sizeof(why));
	bool broken = ret != -ENODEV;

	if (ret == 0)
		return 0;
	memset(&dev->props, 0, sizeof(dev->props));
	if ((ret = pp_device_cpu_open(dev, NULL)) < 0)
		return ret;
	if (broken)
		snprintf(dev->props.fallback, sizeof(dev->props.fallback), "%s", why);
	pp_error(-ENODEV, "auto: using cpu, because %s", why);
	return 0;
}

static int open_backend(struct pp_device *dev, const char *name)
{
	const char *colon = strchr(name, ':');
	size_t len = colon ? (size_t)(colon - name) : strlen(name);
	const char *options = colon ? colon + 1 : NULL;
	int index = 0, ret;

	if (len == 4 && memcmp(name, "auto", 4) == 0 && options == NULL)
		return open_auto(dev);
	if (len == 3 && memcmp(name, "cpu", 3) == 0)
		return pp_device_cpu_open(dev, options);
	if (len == 3 && memcmp(name, "sim", 3) == 0)
		return pp_device_sim_open(dev, options);
	if (len == 4 && memcmp(name, "cuda", 4) == 0) {
		ret = parse_cuda_index(name, options, &index);
		if (ret < 0)
			return ret;
		return pp_device_cuda_open(dev, index);
	}
	return pp_error(-EINVAL, "device '%s': unknown; expected auto, cpu, sim[:options], cuda or cuda:N",
			name);
}

PP_API int pp_device_open(const char *name, struct pp_device **dev_p)
{
	struct pp_device *dev;
	int ret;

	if (name == NULL || dev_p == NULL)
		return pp_error(-EINVAL, "pp_device_open: name and dev_p must not be NULL");
	dev = pp_calloc(1, sizeof(*dev));
	if (dev == NULL)
		return pp_error(-ENOMEM, "device '%s': out of memory", name);
	if (pthread_mutex_init(&dev->mu, NULL) != 0) {
		ret = pp_error(-ENOMEM, "device '%s': cannot create a mutex", name);
		goto err_free_dev;
	}
	dev->next_stream_id = 1;
	ret = open_backend(dev, name);
	if (ret < 0)
		goto err_destroy_mutex;
	*dev_p = dev;
	return 0;

err_destroy_mutex:
	pthread_mutex_destroy(&dev->mu);
err_free_dev:
	free(dev);
	return ret;
}

PP_API void pp_device_close(struct pp_device *dev)
{
	if (dev == NULL)
		return;
	pp_device_synchronize(dev);
	while (dev->events != NULL)
		pp_event_destroy((struct pp_event *)dev->events);
	while (dev->streams != NULL)
		pp_stream_destroy((struct pp_stream *)dev->streams);
	mem_free_all(dev, &dev->device_mem);
	mem_free_all(dev, &dev->host_mem);
	if (dev->ops->close != NULL)
		dev->ops->close(dev);
	pthread_mutex_destroy(&dev->mu);
	free(dev);
}

PP_API const struct pp_device_props *pp_device_get_props(const struct pp_device *dev)
{
	return dev != NULL ? &dev->props : NULL;
}

PP_API int pp_device_synchronize(struct pp_device *dev)
{
	if (dev == NULL)
		return pp_error(-EINVAL, "pp_device_synchronize: dev is NULL");
	return dev->ops->synchronize ? dev->ops->synchronize(dev) : 0;
}

PP_API int pp_device_cuda_count(void)
{
	return pp_device_cuda_count_impl();
}

PP_API int pp_device_list(struct pp_device_props *props, size_t max, size_t *n_p)
{
	struct pp_error_saved saved;
	struct pp_device *dev;
	size_t n = 0;
	int gpus, ret;

	if (n_p == NULL || (props == NULL && max > 0))
		return pp_error(-EINVAL, "pp_device_list: props and n_p must not be NULL");
	pp_error_save(&saved);
	for (int i = 0; i < 2; i++) {
		ret = pp_device_open(i == 0 ? "cpu" : "sim", &dev);
		if (ret < 0)
			return ret;
		if (n < max)
			props[n] = dev->props;
		n++;
		pp_device_close(dev);
	}
	gpus = pp_device_cuda_count_impl();
	for (int i = 0; i < gpus; i++) {
		if (n < max) {
			ret = pp_device_cuda_props(i, &props[n]);
			if (ret < 0)
				return ret;
		}
		n++;
	}
	*n_p = PP_MIN(n, max);
	/* No GPU is an answer of the list, not a failure: why is pp_device_cuda_count()'s to say. */
	pp_error_restore(&saved);
	return 0;
}

/* ------------------------------------------------------------------ memory */

PP_API int pp_device_alloc(struct pp_device *dev, size_t bytes, void **ptr_p)
{
	struct pp_mem_range r = { .kind = PP_MEM_DEVICE };
	void *p;
	int ret;

	if (dev == NULL || ptr_p == NULL)
		return pp_error(-EINVAL, "pp_device_alloc: dev and ptr_p must not be NULL");
	if (bytes == 0)
		return pp_error(-EINVAL, "%s: device allocation of 0 bytes", dev->props.name);
	ret = dev->ops->alloc(dev, bytes, &p);
	if (ret < 0)
		return ret;
	r.addr = (uintptr_t)p;
	r.bytes = bytes;
	r.mapped = bytes;
	ret = mem_enter(dev, &dev->device_mem, &r);
	if (ret < 0)
		return ret;
	*ptr_p = p;
	return 0;
}

PP_API void pp_device_free(struct pp_device *dev, void *ptr)
{
	if (dev != NULL && ptr != NULL)
		mem_free(dev, &dev->device_mem, ptr);
}

/* Pins [p, p + mapped) by the backend's means or mlock; writes how to *kind_p. */
static int host_pin(struct pp_device *dev, void *p, size_t mapped, enum pp_mem_kind *kind_p)
{
	if (dev->ops->host_register != NULL) {
		int ret = dev->ops->host_register(dev, p, mapped);
		if (ret < 0)
			return ret;
		*kind_p = PP_MEM_MMAP_REGISTERED;
		return 0;
	}
	/* mlock2, not mlock: the sanitizers replace mlock with a no-op that reports success. */
	if (mlock2(p, mapped, 0) != 0)
		return pp_error(-errno, "%s: mlock of %zu bytes refused (%s; raise RLIMIT_MEMLOCK, ulimit -l)",
				dev->props.name, mapped, strerror(errno));
	*kind_p = PP_MEM_MMAP_LOCKED;
	return 0;
}

PP_API int pp_host_alloc(struct pp_device *dev, size_t bytes, bool pinned, void **ptr_p,
			 bool *pinned_p)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	struct pp_mem_range r = { 0 };
	void *p;
	int ret, fault;

	if (dev == NULL || ptr_p == NULL)
		return pp_error(-EINVAL, "pp_host_alloc: dev and ptr_p must not be NULL");
	if (bytes == 0)
		return pp_error(-EINVAL, "%s: host allocation of 0 bytes", dev->props.name);
	if (!pp_add_size(bytes, page - 1, &r.mapped))
		return pp_error(-ENOMEM, "%s: host allocation of %zu bytes is too large", dev->props.name,
				bytes);
	r.mapped &= ~(page - 1);
	r.bytes = bytes;
	r.kind = PP_MEM_MMAP;
	p = mmap(NULL, r.mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return pp_error(-ENOMEM, "%s: host allocation of %zu bytes: mmap failed (%s)",
				dev->props.name, bytes, strerror(errno));
	fault = pinned ? pp_fault_check(pp_fault_thread, PP_FAULT_PIN) : 0;
	if (fault < 0)
		pp_error(fault, "%s: pinning %zu bytes refused: %s (injected fault)", dev->props.name,
			 r.mapped, pp_strerror(fault));
	else if (pinned && host_pin(dev, p, r.mapped, &r.kind) < 0 && dev->ops->host_alloc_pinned != NULL) {
		void *q;
		if (dev->ops->host_alloc_pinned(dev, r.mapped, &q) == 0) {
			munmap(p, r.mapped);
			p = q;
			r.kind = PP_MEM_DRIVER;
		}
	}
	r.addr = (uintptr_t)p;
	ret = mem_enter(dev, &dev->host_mem, &r);
	if (ret < 0)
		return ret;
	if (pinned && r.kind == PP_MEM_MMAP) {
		char why[512];
		snprintf(why, sizeof(why), "%s", pp_last_error());
		pp_error(-ENOMEM, "%s: pinned allocation of %zu bytes fell back to pageable memory: %s",
			 dev->props.name, bytes, why);
		atomic_fetch_add_explicit(&dev->stats.pinned_fallbacks, 1, memory_order_relaxed);
	} else if (pinned) {
		atomic_fetch_add_explicit(&dev->stats.pinned_bytes, bytes, memory_order_relaxed);
	}
	*ptr_p = p;
	if (pinned_p != NULL)
		*pinned_p = r.kind != PP_MEM_MMAP;
	return 0;
}

PP_API void pp_host_free(struct pp_device *dev, void *ptr)
{
	if (dev != NULL && ptr != NULL)
		mem_free(dev, &dev->host_mem, ptr);
}

PP_API void pp_device_release(struct pp_device *dev, void *ptr, size_t bytes)
{
	if (dev != NULL && dev->ops->release != NULL && ptr != NULL && bytes > 0)
		dev->ops->release(dev, ptr, bytes);
}

/* ------------------------------------------------------------------ lists of open objects */

/* Puts 'link' at the head of the device's list 'head' (dev->streams or dev->events). */
static void link_add(struct pp_device *dev, struct pp_dev_link **head, struct pp_dev_link *link)
{
	pthread_mutex_lock(&dev->mu);
	link->prev = NULL;
	link->next = *head;
	if (*head != NULL)
		(*head)->prev = link;
	*head = link;
	pthread_mutex_unlock(&dev->mu);
}

/* Takes 'link' out of the device's list 'head'. */
static void link_remove(struct pp_device *dev, struct pp_dev_link **head, struct pp_dev_link *link)
{
	pthread_mutex_lock(&dev->mu);
	if (link->prev != NULL)
		link->prev->next = link->next;
	else
		*head = link->next;
	if (link->next != NULL)
		link->next->prev = link->prev;
	pthread_mutex_unlock(&dev->mu);
}

/*
 * Ends the creation of a stream or an event, whose first member is 'link':
 * 'created' is what the backend's create entry returned (0 without one).
 * On its error, frees the object and returns the error; else puts it in the
 * device's list 'head' and returns 0.
 */
static int link_add_created(struct pp_device *dev, struct pp_dev_link **head,
			    struct pp_dev_link *link, int created)
{
	if (created < 0) {
		free(link);
		return created;
	}
	link_add(dev, head, link);
	return 0;
}

/* ------------------------------------------------------------------ streams */

PP_API int pp_stream_create(struct pp_device *dev, struct pp_stream **stream_p)
{
	struct pp_stream *s;
	int ret;

	if (dev == NULL || stream_p == NULL)
		return pp_error(-EINVAL, "pp_stream_create: dev and stream_p must not be NULL");
	s = pp_calloc(1, sizeof(*s));
	if (s == NULL)
		return pp_error(-ENOMEM, "%s: out of memory for a stream", dev->props.name);
	s->dev = dev;
	pthread_mutex_lock(&dev->mu);
	s->id = dev->next_stream_id++;
	pthread_mutex_unlock(&dev->mu);
	ret = dev->ops->stream_create != NULL ? dev->ops->stream_create(s) : 0;
	if ((ret = link_add_created(dev, &dev->streams, &s->link, ret)) < 0)
		return ret;
	*stream_p = s;
	return 0;
}

PP_API void pp_stream_destroy(struct pp_stream *stream)
{
	struct pp_device *dev;

	if (stream == NULL)
		return;
	dev = stream->dev;
	if (stream->capture != NULL) {
		struct pp_graph *g = NULL;

		if (pp_stream_end_capture(stream, &g) == 0)
			pp_graph_destroy(g);
	}
	link_remove(dev, &dev->streams, &stream->link);
	if (dev->ops->stream_destroy != NULL)
		dev->ops->stream_destroy(stream);
	free(stream);
}

PP_API struct pp_device *pp_stream_device(const struct pp_stream *stream)
{
	return stream != NULL ? stream->dev : NULL;
}

PP_API void *pp_stream_cuda_handle(struct pp_stream *stream)
{
	if (stream == NULL || stream->dev->ops->cuda_stream == NULL)
		return NULL;
	return stream->dev->ops->cuda_stream(stream);
}

PP_API int pp_stream_synchronize(struct pp_stream *stream)
{
	if (stream == NULL)
		return pp_error(-EINVAL, "pp_stream_synchronize: stream is NULL");
	if (stream->capture != NULL)
		return pp_graph_refuse_call(stream, -EBUSY, "a synchronization");
	if (stream->dev->ops->stream_synchronize == NULL)
		return 0;
	pp_device_count_call(stream->dev);
	return stream->dev->ops->stream_synchronize(stream);
}

PP_API int pp_stream_launch_host(struct pp_stream *stream, void (*fn)(void *arg), void *arg)
{
	if (stream == NULL || fn == NULL)
		return pp_error(-EINVAL, "pp_stream_launch_host: stream and fn must not be NULL");
	if (stream->capture != NULL) {
		int ret = pp_graph_record_host(stream, fn, arg);

		if (ret < 0 || pp_stream_recording(stream))
			return ret;
		return pp_graph_spoil(stream, stream->dev->ops->launch_host(stream, fn, arg));
	}
	if (stream->dev->ops->launch_host == NULL) {
		fn(arg);
		return 0;
	}
	pp_device_count_stream_call(stream);
	return stream->dev->ops->launch_host(stream, fn, arg);
}

PP_API int pp_stream_wait_event(struct pp_stream *stream, struct pp_event *event)
{
	if (stream == NULL || event == NULL)
		return pp_error(-EINVAL, "pp_stream_wait_event: stream and event must not be NULL");
	if (stream->dev != event->dev)
		return pp_error(-EINVAL, "%s: stream %u cannot wait for an event of device %s",
				stream->dev->props.name, stream->id, event->dev->props.name);
	if (stream->capture != NULL)
		return pp_graph_refuse_call(stream, -ENOTSUP, "a wait for an event");
	if (stream->dev->ops->stream_wait_event == NULL)
		return 0;
	pp_device_count_call(stream->dev);
	return stream->dev->ops->stream_wait_event(stream, event);
}

/* ------------------------------------------------------------------ events */

PP_API int pp_event_create(struct pp_device *dev, struct pp_event **event_p)
{
	return pp_event_create_flags(dev, PP_EVENT_DEFAULT, event_p);
}

PP_API int pp_event_create_flags(struct pp_device *dev, unsigned flags, struct pp_event **event_p)
{
	struct pp_event *e;
	int ret;

	if (dev == NULL || event_p == NULL)
		return pp_error(-EINVAL, "pp_event_create: dev and event_p must not be NULL");
	if ((flags & ~(unsigned)PP_EVENT_NO_TIMING) != 0)
		return pp_error(-EINVAL, "%s: event flags 0x%x: unknown (expected PP_EVENT_NO_TIMING)",
				dev->props.name, flags);
	e = pp_calloc(1, sizeof(*e));
	if (e == NULL)
		return pp_error(-ENOMEM, "%s: out of memory for an event", dev->props.name);
	e->dev = dev;
	e->timing = (flags & PP_EVENT_NO_TIMING) == 0;
	ret = dev->ops->event_create != NULL ? dev->ops->event_create(e) : 0;
	if ((ret = link_add_created(dev, &dev->events, &e->link, ret)) < 0)
		return ret;
	*event_p = e;
	return 0;
}

PP_API void pp_event_destroy(struct pp_event *event)
{
	struct pp_device *dev;

	if (event == NULL)
		return;
	dev = event->dev;
	link_remove(dev, &dev->events, &event->link);
	if (dev->ops->event_destroy != NULL)
		dev->ops->event_destroy(event);
	free(event);
}

PP_API int pp_event_record(struct pp_event *event, struct pp_stream *stream)
{
	int ret = 0;

	if (event == NULL || stream == NULL)
		return pp_error(-EINVAL, "pp_event_record: event and stream must not be NULL");
	if (event->dev != stream->dev)
		return pp_error(-EINVAL, "%s: an event of device %s cannot be recorded on stream %u",
				stream->dev->props.name, event->dev->props.name, stream->id);
	if (stream->capture != NULL)
		return pp_graph_refuse_call(stream, -ENOTSUP, "an event record");
	if (stream->dev->ops->event_record != NULL) {
		pp_device_count_call(stream->dev);
		ret = stream->dev->ops->event_record(event, stream);
	} else
		event->host_ns = pp_now_ns();
	if (ret == 0)
		event->recorded = true;
	return ret;
}

PP_API int pp_event_query(struct pp_event *event)
{
	if (event == NULL)
		return pp_error(-EINVAL, "pp_event_query: event is NULL");
	if (!event->recorded || event->dev->ops->event_query == NULL)
		return 1;
	pp_device_count_call(event->dev);
	return event->dev->ops->event_query(event);
}

PP_API int pp_event_synchronize(struct pp_event *event)
{
	if (event == NULL)
		return pp_error(-EINVAL, "pp_event_synchronize: event is NULL");
	if (!event->recorded || event->dev->ops->event_synchronize == NULL)
		return 0;
	pp_device_count_call(event->dev);
	return event->dev->ops->event_synchronize(event);
}

PP_API int pp_event_elapsed_ns(struct pp_event *start, struct pp_event *end, uint64_t *ns_p)
{
	if (start == NULL || end == NULL || ns_p == NULL)
		return pp_error(-EINVAL, "pp_event_elapsed_ns: start, end and ns_p must not be NULL");
	if (start->dev != end->dev)
		return pp_error(-EINVAL, "pp_event_elapsed_ns: the events belong to two devices");
	if (!start->recorded || !end->recorded)
		return pp_error(-EINVAL, "%s: elapsed time asked of an event never recorded",
				start->dev->props.name);
	if (!start->timing || !end->timing)
		return pp_error(-EINVAL, "%s: elapsed time asked of an event created with "
				"PP_EVENT_NO_TIMING", start->dev->props.name);
	if (start->dev->ops->event_elapsed_ns != NULL)
		return start->dev->ops->event_elapsed_ns(start, end, ns_p);
	*ns_p = end->host_ns > start->host_ns ? end->host_ns - start->host_ns : 0;
	return 0;
}

/* ------------------------------------------------------------------ copies */

/*
 * Checks that the device side(s) of a copy lie in device allocations and the
 * host side outside them; writes whether the host side is pinned memory.
 */
static int check_copy(struct pp_stream *stream, void *dst, const void *src, size_t n,
		      enum pp_copy_kind kind, bool *host_pinned_p)
{
	struct pp_device *dev = stream->dev;
	const char *name = dev->props.name;
	uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src, host = 0;
	const struct pp_mem_range *r;
	int ret = 0;

	if (d + n < d || s + n < s)
		return pp_error(-EFAULT, "%s: stream %u: copy of %zu bytes wraps around the address space",
				name, stream->id, n);
	pthread_mutex_lock(&dev->mu);
	switch (kind) {
	case PP_COPY_H2D:
	case PP_COPY_D2H: {
		uintptr_t dv = kind == PP_COPY_H2D ? d : s;
		host = kind == PP_COPY_H2D ? s : d;
		if (table_find(&dev->device_mem, dv, n) == NULL)
			ret = pp_error(-EFAULT, "%s: stream %u: %s copy of %zu bytes: %s %p is not inside "
				       "one allocation of this device", name, stream->id,
				       pp_copy_kind_name(kind), n,
				       kind == PP_COPY_H2D ? "destination" : "source", (void *)dv);
		else if (!dev->props.host_is_device && table_overlaps(&dev->device_mem, host, n))
			ret = pp_error(-EFAULT, "%s: stream %u: %s copy of %zu bytes: host %s %p is "
				       "device memory", name, stream->id, pp_copy_kind_name(kind), n,
				       kind == PP_COPY_H2D ? "source" : "destination", (void *)host);
		break;
	}
	case PP_COPY_D2D:
		if (table_find(&dev->device_mem, d, n) == NULL ||
		    table_find(&dev->device_mem, s, n) == NULL)
			ret = pp_error(-EFAULT, "%s: stream %u: device to device copy of %zu bytes from "
				       "%p to %p: both must lie inside allocations of this device",
				       name, stream->id, n, src, dst);
		break;
	}
	if (ret == 0) {
		r = kind == PP_COPY_D2D ? NULL : table_find(&dev->host_mem, host, n);
		*host_pinned_p = r != NULL && r->kind != PP_MEM_MMAP;
	}
	pthread_mutex_unlock(&dev->mu);
	return ret;
}

PP_API int pp_memcpy_async(void *dst, const void *src, size_t n, enum pp_copy_kind kind,
			   struct pp_stream *stream)
{
	struct pp_device *dev;
	bool pinned = false;
	uint64_t t0, dt;
	int ret;

	if (stream == NULL || dst == NULL || src == NULL)
		return pp_error(-EINVAL, "pp_memcpy_async: dst, src and stream must not be NULL");
	dev = stream->dev;
	/* A copy refused while the stream captures spoils the capture: no graph lacks it. */
	if (kind != PP_COPY_H2D && kind != PP_COPY_D2H && kind != PP_COPY_D2D)
		return pp_graph_spoil(stream, pp_error(-EINVAL, "%s: stream %u: unknown copy kind %d",
						       dev->props.name, stream->id, (int)kind));
	if (n == 0)
		return 0;
	t0 = pp_now_ns();
	ret = check_copy(stream, dst, src, n, kind, &pinned);
	if (ret < 0)
		return pp_graph_spoil(stream, ret);
	if (stream->capture != NULL) {
		if (kind != PP_COPY_D2D && !pinned && !dev->props.host_is_device)
			return pp_graph_refuse_call(stream, -ENOTSUP, "a copy from or to pageable host memory");
		ret = pp_graph_record_copy(stream, dst, src, n, kind);
		if (ret < 0 || pp_stream_recording(stream))
			return ret;
		/* the backend captures the copy: counted at each launch, not now */
		return pp_graph_spoil(stream, dev->ops->memcpy_async(stream, dst, src, n, kind, pinned));
	}
	if (dev->ops->memcpy_async != NULL) {
		pp_device_count_stream_call(stream);
		ret = dev->ops->memcpy_async(stream, dst, src, n, kind, pinned);
		dt = pp_now_ns() - t0;
	} else {
		memmove(dst, src, n);
		dt = pp_now_ns() - t0;
		pp_device_add_copy_ns(dev, dt);
	}
	atomic_fetch_add_explicit(&dev->stats.host_blocked_ns, dt, memory_order_relaxed);
	if (ret < 0)
		return ret;
	pp_device_count_copy(dev, n, kind);
	if (kind != PP_COPY_D2D && !pinned)
		atomic_fetch_add_explicit(&dev->stats.pageable_copies, 1, memory_order_relaxed);
	return 0;
}

/* ------------------------------------------------------------------ graphs */

/*
 * A graph recorded by graph.c: the backend's own launched, its copies
 * counted; or, for a backend without graphs, each call issued again
 * through the calls above, checked as when it was captured.
 */
PP_API int pp_graph_launch(struct pp_graph *graph, struct pp_stream *stream)
{
	struct pp_device *dev;
	int ret = 0;

	if (graph == NULL || stream == NULL)
		return pp_error(-EINVAL, "pp_graph_launch: graph and stream must not be NULL");
	dev = stream->dev;
	if (graph->dev != dev)
		return pp_error(-EINVAL, "%s: stream %u cannot launch a graph captured on device %s",
				dev->props.name, stream->id, graph->dev->props.name);
	if (stream->capture != NULL)
		return pp_error(-EBUSY, "%s: stream %u is capturing a graph: it cannot launch one",
				dev->props.name, stream->id);
	pp_device_count_call(dev);
	if (graph->ctx != NULL) {
		ret = dev->ops->graph_launch(graph->ctx, stream);
		for (size_t i = 0; i < graph->n && ret == 0; i++) {
			const struct pp_graph_node *nd = &graph->nodes[i];

			if (nd->kind == PP_GRAPH_COPY)
				pp_device_count_copy(dev, nd->n, nd->copy_kind);
		}
	} else {
		stream->replaying = true;
		for (size_t i = 0; i < graph->n && ret == 0; i++) {
			const struct pp_graph_node *nd = &graph->nodes[i];

			if (nd->kind == PP_GRAPH_HOST)
				ret = pp_stream_launch_host(stream, nd->fn, nd->arg);
			else
				ret = pp_memcpy_async(nd->dst, nd->src, nd->n, nd->copy_kind, stream);
		}
		stream->replaying = false;
	}
	if (ret == 0)
		atomic_fetch_add_explicit(&dev->stats.graph_launches, 1, memory_order_relaxed);
	return ret;
}

/* ------------------------------------------------------------------ statistics */

PP_API int pp_device_get_stats(struct pp_device *dev, struct pp_device_stats *stats_p)
{
	struct pp_device_counters *c;

	if (dev == NULL || stats_p == NULL)
		return pp_error(-EINVAL, "pp_device_get_stats: dev and stats_p must not be NULL");
	c = &dev->stats;
	stats_p->copies = atomic_load_explicit(&c->copies, memory_order_relaxed);
	stats_p->bytes_h2d = atomic_load_explicit(&c->bytes_h2d, memory_order_relaxed);
	stats_p->bytes_d2h = atomic_load_explicit(&c->bytes_d2h, memory_order_relaxed);
	stats_p->copies_timed = atomic_load_explicit(&c->copies_timed, memory_order_relaxed);
	stats_p->copy_ns = atomic_load_explicit(&c->copy_ns, memory_order_relaxed);
	stats_p->host_blocked_ns = atomic_load_explicit(&c->host_blocked_ns, memory_order_relaxed);
	stats_p->pinned_bytes = atomic_load_explicit(&c->pinned_bytes, memory_order_relaxed);
	stats_p->pinned_fallbacks = atomic_load_explicit(&c->pinned_fallbacks, memory_order_relaxed);
	stats_p->pageable_copies = atomic_load_explicit(&c->pageable_copies, memory_order_relaxed);
	stats_p->calls = atomic_load_explicit(&c->calls, memory_order_relaxed);
	stats_p->graph_launches = atomic_load_explicit(&c->graph_launches, memory_order_relaxed);
	return 0;
}
