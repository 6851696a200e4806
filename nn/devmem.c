/*
 * nn/devmem.c: the nn module's contact with the device interface: memory
 * for tensors and models, copies between devices, and the name and
 * capabilities of a device for dispatch and messages.  A NULL device is
 * the host.  Memory the host can address (cpu, sim) the CPU kernels use
 * in place; other memory (cuda) is reached through the device's streams.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/common_impl.h"
#include "nn/cuda/kernels.h"
#include "nn/nn_impl.h"
#include "pinpipe/device.h"

const char *pp_nn_device_name(const struct pp_device *dev)
{
	return dev ? pp_device_get_props(dev)->name : "cpu";
}

bool pp_nn_host_addressable(const struct pp_device *dev)
{
	return !dev || pp_device_get_props(dev)->host_addressable;
}

bool pp_nn_host_is_device(const struct pp_device *dev)
{
	return !dev || pp_device_get_props(dev)->host_is_device;
}

void *pp_nn_cuda_stream(struct pp_stream *stream)
{
	return pp_stream_cuda_handle(stream);
}

int pp_nn_mem_alloc(struct pp_device *dev, size_t bytes, void **ptr_p)
{
	void *p = NULL;
	int ret;

	if (!dev) {
		if (posix_memalign(&p, 64, bytes ? bytes : 1))
			return pp_error(-ENOMEM, "nn: out of host memory for %zu bytes", bytes);
	} else {
		ret = pp_device_alloc(dev, bytes ? bytes : 1, &p);
		if (ret)
			return ret;
	}
	if (pp_nn_host_addressable(dev)) {
		memset(p, 0, bytes);
	} else {
		ret = pp_cuda_zero(p, bytes, NULL);
		if (!ret)
			ret = pp_cuda_sync(NULL);
		if (ret) {
			pp_device_free(dev, p);
			return ret;
		}
	}
	*ptr_p = p;
	return 0;
}

void pp_nn_mem_free(struct pp_device *dev, void *ptr)
{
	if (dev)
		pp_device_free(dev, ptr);
	else
		free(ptr);
}

/* Copies on a stream of 'dev' (a cuda device) and waits for it. */
static int copy_on(struct pp_device *dev, void *dst, const void *src, size_t bytes,
		   enum pp_copy_kind kind)
{
	struct pp_stream *s;
	int ret = pp_stream_create(dev, &s);

	if (ret)
		return ret;
	ret = pp_memcpy_async(dst, src, bytes, kind, s);
	if (!ret)
		ret = pp_stream_synchronize(s);
	pp_stream_destroy(s);
	return ret;
}

int pp_nn_mem_copy(struct pp_device *dst_dev, void *dst, struct pp_device *src_dev, const void *src,
		size_t bytes)
{
	bool dst_host = pp_nn_host_addressable(dst_dev), src_host = pp_nn_host_addressable(src_dev);
	void *bounce;
	int ret;

	if (bytes == 0)
		return 0;
	if (dst_host && src_host) {
		memcpy(dst, src, bytes);
		return 0;
	}
	if (src_host)
		return copy_on(dst_dev, dst, src, bytes, PP_COPY_H2D);
	if (dst_host)
		return copy_on(src_dev, dst, src, bytes, PP_COPY_D2H);
	if (dst_dev == src_dev)
		return copy_on(src_dev, dst, src, bytes, PP_COPY_D2D);
	/* two GPUs: through the host */
	bounce = malloc(bytes);
	if (!bounce)
		return pp_error(-ENOMEM, "nn: out of memory for a copy of %zu bytes from %s to %s", bytes,
				pp_nn_device_name(src_dev), pp_nn_device_name(dst_dev));
	ret = copy_on(src_dev, bounce, src, bytes, PP_COPY_D2H);
	if (!ret)
		ret = copy_on(dst_dev, dst, bounce, bytes, PP_COPY_H2D);
	free(bounce);
	return ret;
}
