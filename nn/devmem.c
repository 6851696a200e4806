/*
 * nn/devmem.c: the nn module's only contact with the device interface:
 * memory for tensors and models, copies, and the name and kind of a device
 * for dispatch and messages.  A NULL device is the host.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/internal.h"
#include "nn/nn_internal.h"

int nn_mem_alloc(struct pp_device *dev, size_t bytes, void **ptr_p)
{
	void *p = NULL;

	if (dev)
		return pp_error(-ENODEV, "nn: device memory needs the device interface, not in this build");
	if (posix_memalign(&p, 64, bytes ? bytes : 1))
		return pp_error(-ENOMEM, "nn: out of host memory for %zu bytes", bytes);
	memset(p, 0, bytes);
	*ptr_p = p;
	return 0;
}

void nn_mem_free(struct pp_device *dev, void *ptr)
{
	(void)dev;
	free(ptr);
}

const char *nn_device_name(const struct pp_device *dev)
{
	return dev ? "device" : "cpu";
}

enum pp_device_kind nn_device_kind(const struct pp_device *dev)
{
	return PP_DEVICE_CPU;
}

int nn_mem_copy(struct pp_device *dst_dev, void *dst, struct pp_device *src_dev, const void *src,
		size_t bytes)
{
	(void)dst_dev;
	(void)src_dev;
	memcpy(dst, src, bytes);
	return 0;
}
