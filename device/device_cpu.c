/*
 * device/device_cpu.c: the cpu backend.  The host is the device: device
 * memory is aligned host memory, and everything else (streams, events,
 * copies, pinning by mlock) is the dispatcher's synchronous fallback.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/cpu.h"
#include "common/fault.h"
#include "device/device_impl.h"

static int cpu_alloc(struct pp_device *dev, size_t bytes, void **ptr_p)
{
	void *p;
	int ret = pp_posix_memalign(&p, PP_DEVICE_ALIGN, bytes);

	if (ret != 0)
		return pp_error(-ret, "cpu: allocation of %zu bytes failed", bytes);
	*ptr_p = p;
	return 0;
}

static void cpu_free(struct pp_device *dev, void *ptr, size_t bytes)
{
	free(ptr);
}

static const struct pp_device_ops cpu_ops = {
	.alloc = cpu_alloc,
	.free = cpu_free,
};

int pp_device_cpu_open(struct pp_device *dev, const char *options)
{
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);

	if (options != NULL)
		return pp_error(-EINVAL, "device 'cpu:%s': cpu takes no options", options);
	dev->ops = &cpu_ops;
	snprintf(dev->props.name, sizeof(dev->props.name), "cpu");
	snprintf(dev->props.description, sizeof(dev->props.description),
		 "host CPU (%d cores to run on); batches are used in place", pp_cpu_usable_cores());
	dev->props.kind = PP_DEVICE_CPU;
	dev->props.total_memory = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
	dev->props.host_is_device = true;
	dev->props.host_addressable = true;
	dev->props.async_copy = false;
	dev->props.copy_engines = 0;
	return 0;
}
