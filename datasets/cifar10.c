/*
 * datasets/cifar10.c: CIFAR-10's binary batches (records of one label byte
 * and a 3 x 32 x 32 uint8 image), each file's size checked before anything
 * is allocated and each label as it is read.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/fault.h"
#include "common/common_impl.h"
#include "datasets/source.h"

#define CIFAR_IMAGE_BYTES 3072u
#define CIFAR_RECORD_BYTES (1u + CIFAR_IMAGE_BYTES)
#define CIFAR_NUM_CLASSES 10

PP_API int pp_dataset_open_cifar10(const char *const *paths, size_t npaths,
				   struct pp_dataset **ds_p)
{
	struct pp_sample_info info = {0};
	struct pp_dataset *ds;
	char name[256];
	uint64_t count = 0, done = 0;
	uint8_t *mem;
	int ret;

	if (npaths == 0)
		return pp_error(-EINVAL, "no CIFAR-10 batch given");
	for (size_t k = 0; k < npaths; k++) {
		struct stat st;

		if (stat(paths[k], &st) != 0)
			return pp_error(-errno, "%s: cannot open: %s", paths[k], strerror(errno));
		if (st.st_size == 0 || st.st_size % CIFAR_RECORD_BYTES != 0)
			return pp_error(-EBADMSG,
					"%s: %lld bytes, expected a whole non-zero number of %u-byte "
					"records (1 label byte, 3072 image bytes)",
					paths[k], (long long)st.st_size, CIFAR_RECORD_BYTES);
		count += (uint64_t)st.st_size / CIFAR_RECORD_BYTES;
	}
	info.count = count;
	info.dtype = PP_DTYPE_U8;
	info.ndim = 3;
	info.shape[0] = 3;
	info.shape[1] = 32;
	info.shape[2] = 32;
	info.label_kind = PP_LABEL_CLASS;
	info.num_classes = CIFAR_NUM_CLASSES;
	ret = pp_sample_info_finish(&info);
	if (ret < 0)
		return ret;
	if (npaths > 1)
		snprintf(name, sizeof(name), "cifar10:%s+%zu", pp_path_base(paths[0]), npaths - 1);
	else
		snprintf(name, sizeof(name), "cifar10:%s", pp_path_base(paths[0]));
	ret = pp_dataset_alloc(&info, name, &ds);
	if (ret < 0)
		return ret;
	mem = pp_malloc((size_t)count * CIFAR_IMAGE_BYTES);
	if (mem == NULL) {
		ret = pp_error(-ENOMEM, "%s: no memory for %llu images", name,
			       (unsigned long long)count);
		goto err_destroy;
	}
	ds->mem = mem;
	ds->samples = mem;
	for (size_t k = 0; k < npaths; k++) {
		uint8_t *file;
		size_t flen, n;

		ret = pp_read_whole_file(paths[k], 0, (void **)&file, &flen);
		if (ret < 0)
			goto err_destroy;
		n = flen / CIFAR_RECORD_BYTES;
		if (flen % CIFAR_RECORD_BYTES != 0 || n > count - done) {
			ret = pp_error(-EBADMSG, "%s: changed size while being read", paths[k]);
			free(file);
			goto err_destroy;
		}
		for (size_t r = 0; r < n; r++) {
			const uint8_t *rec = file + r * CIFAR_RECORD_BYTES;

			if (rec[0] >= CIFAR_NUM_CLASSES) {
				ret = pp_error(-EBADMSG,
					       "%s: record %zu (offset %zu): label %u, expected 0..9",
					       paths[k], r, r * CIFAR_RECORD_BYTES, rec[0]);
				free(file);
				goto err_destroy;
			}
			ds->labels[done + r] = rec[0];
			memcpy(mem + (done + r) * CIFAR_IMAGE_BYTES, rec + 1, CIFAR_IMAGE_BYTES);
		}
		done += n;
		free(file);
	}
	if (done != count) {
		ret = pp_error(-EBADMSG, "%s: files changed size while being read", name);
		goto err_destroy;
	}
	*ds_p = ds;
	return 0;

err_destroy:
	pp_dataset_destroy(ds);
	return ret;
}
