/*
 * nn/tensor.c: contiguous tensors of float32 or uint8 on a device (or the
 * host), and explicit copies between them.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>

#include "common/common_impl.h"
#include "nn/nn_impl.h"

static int tensor_new(struct pp_device *dev, enum pp_dtype dtype, int ndim, const size_t *shape,
		      struct pp_tensor **tensor_p)
{
	struct pp_tensor *t;
	size_t numel = 1, bytes;

	if (dtype != PP_DTYPE_F32 && dtype != PP_DTYPE_U8)
		return pp_error(-EINVAL, "tensor: dtype %d (expected f32 or u8)", (int)dtype);
	if (ndim < 1 || ndim > PP_TENSOR_MAX_DIMS || !shape)
		return pp_error(-EINVAL, "tensor: %d dimensions (expected 1..%d)", ndim, PP_TENSOR_MAX_DIMS);
	for (int i = 0; i < ndim; i++) {
		if (shape[i] == 0)
			return pp_error(-EINVAL, "tensor: dimension %d is 0 (expected >= 1)", i);
		if (!pp_mul_size(numel, shape[i], &numel) ||
		    !pp_mul_size(numel, pp_dtype_size(dtype), &bytes))
			return pp_error(-EOVERFLOW, "tensor: too many elements at dimension %d", i);
	}
	t = calloc(1, sizeof(*t));
	if (!t)
		return pp_error(-ENOMEM, "tensor: out of memory");
	t->dev = dev;
	t->dtype = dtype;
	t->ndim = ndim;
	for (int i = 0; i < ndim; i++)
		t->shape[i] = shape[i];
	t->numel = numel;
	*tensor_p = t;
	return 0;
}

static size_t tensor_bytes(const struct pp_tensor *t)
{
	return t->numel * pp_dtype_size(t->dtype);
}

PP_API int pp_tensor_create(struct pp_device *dev, enum pp_dtype dtype, int ndim,
			    const size_t *shape, struct pp_tensor **tensor_p)
{
	struct pp_tensor *t;
	int ret = tensor_new(dev, dtype, ndim, shape, &t);

	if (ret)
		return ret;
	ret = pp_nn_mem_alloc(dev, tensor_bytes(t), &t->data);
	if (ret) {
		free(t);
		return ret;
	}
	t->owned = true;
	*tensor_p = t;
	return 0;
}

PP_API int pp_tensor_wrap(struct pp_device *dev, void *data, enum pp_dtype dtype, int ndim,
			  const size_t *shape, struct pp_tensor **tensor_p)
{
	struct pp_tensor *t;
	int ret;

	if (!data)
		return pp_error(-EINVAL, "tensor: wrapping a NULL pointer");
	ret = tensor_new(dev, dtype, ndim, shape, &t);
	if (ret)
		return ret;
	t->data = data;
	*tensor_p = t;
	return 0;
}

PP_API void pp_tensor_destroy(struct pp_tensor *t)
{
	if (!t)
		return;
	if (t->owned)
		pp_nn_mem_free(t->dev, t->data);
	free(t);
}

PP_API int pp_tensor_ndim(const struct pp_tensor *t)
{
	return t->ndim;
}

PP_API size_t pp_tensor_dim(const struct pp_tensor *t, int i)
{
	return i >= 0 && i < t->ndim ? t->shape[i] : 0;
}

PP_API size_t pp_tensor_numel(const struct pp_tensor *t)
{
	return t->numel;
}

PP_API enum pp_dtype pp_tensor_dtype(const struct pp_tensor *t)
{
	return t->dtype;
}

PP_API struct pp_device *pp_tensor_device(const struct pp_tensor *t)
{
	return t->dev;
}

PP_API const char *pp_tensor_device_name(const struct pp_tensor *t)
{
	return pp_nn_device_name(t->dev);
}

PP_API void *pp_tensor_data(const struct pp_tensor *t)
{
	return t->data;
}

PP_API int pp_tensor_copy_from_host(struct pp_tensor *t, const void *src, size_t bytes)
{
	if (bytes != tensor_bytes(t))
		return pp_error(-EINVAL, "tensor copy from host: %zu bytes given, the tensor holds %zu",
				bytes, tensor_bytes(t));
	return pp_nn_mem_copy(t->dev, t->data, NULL, src, bytes);
}

PP_API int pp_tensor_copy_to_host(const struct pp_tensor *t, void *dst, size_t bytes)
{
	if (bytes != tensor_bytes(t))
		return pp_error(-EINVAL, "tensor copy to host: %zu bytes asked for, the tensor holds %zu",
				bytes, tensor_bytes(t));
	return pp_nn_mem_copy(NULL, dst, t->dev, t->data, bytes);
}

PP_API int pp_tensor_copy(struct pp_tensor *dst, const struct pp_tensor *src)
{
	if (dst->dtype != src->dtype || dst->numel != src->numel)
		return pp_error(-EINVAL, "tensor copy: %zu %s elements on %s into %zu %s elements on %s",
				src->numel, pp_dtype_name(src->dtype), pp_nn_device_name(src->dev),
				dst->numel, pp_dtype_name(dst->dtype), pp_nn_device_name(dst->dev));
	return pp_nn_mem_copy(dst->dev, dst->data, src->dev, src->data, tensor_bytes(src));
}
