/*
 * datasets/idx.c: IDX files as published for MNIST and Fashion-MNIST (an
 * idx3 file of uint8 images and an idx1 file of uint8 labels, raw or
 * gzip).  A gzip file's header is inflated first and checked, so that the
 * output buffer is sized by a validated header and never by the untrusted
 * gzip trailer; then the whole file is inflated in one call, straight into
 * the dataset's memory.  CIFAR-10 is cifar10.c's.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common_impl.h"
#include "datasets/codec.h"
#include "datasets/source.h"

#define IDX_TYPE_U8 0x08
#define IDX_MAX_DIMS 3
#define IDX_NUM_CLASSES 10 /* MNIST and Fashion-MNIST labels are 0..9 */

/* An IDX file decoded into memory. */
struct idx_data {
	void *mem;                   /* block to free; holds the header, then the data */
	const uint8_t *data;         /* the elements, after the header */
	size_t data_len;             /* bytes at data: the product of dims[] */
	uint32_t dims[IDX_MAX_DIMS]; /* sizes of the ndims dimensions, outermost first */
};

static int check_idx_header(const char *path, const uint8_t *hdr, uint32_t ndims,
			    struct idx_data *idx, uint64_t *total_p)
{
	uint32_t magic = pp_be32(hdr);
	uint64_t total = 4 + 4 * (uint64_t)ndims, data = 1;

	if (hdr[0] != 0 || hdr[1] != 0 || hdr[3] != ndims)
		return pp_error(-EBADMSG,
				"%s: offset 0: magic 0x%08x, expected 0x%08x (IDX of unsigned "
				"bytes, %u dimensions)",
				path, magic, (unsigned)(IDX_TYPE_U8 << 8 | ndims), ndims);
	if (hdr[2] != IDX_TYPE_U8)
		return pp_error(-EBADMSG,
				"%s: offset 2: IDX element type 0x%02x, expected 0x08 (unsigned byte)",
				path, hdr[2]);
	for (uint32_t d = 0; d < ndims; d++) {
		idx->dims[d] = pp_be32(hdr + 4 + 4 * d);
		if (idx->dims[d] == 0)
			return pp_error(-EBADMSG, "%s: offset %u: dimension %u is 0, expected at least 1",
					path, 4 + 4 * d, d);
		if (__builtin_mul_overflow(data, (uint64_t)idx->dims[d], &data) ||
		    data > ((uint64_t)1 << 40))
			return pp_error(-EBADMSG,
					"%s: offset %u: dimensions so far make %llu bytes, more than "
					"any IDX file holds (1 TiB)",
					path, 4 + 4 * d, (unsigned long long)data);
	}
	if ((uint64_t)(size_t)data != data)
		return pp_error(-EOVERFLOW, "%s: %llu bytes do not fit in memory", path,
				(unsigned long long)data);
	idx->data_len = (size_t)data;
	*total_p = total + data;
	return 0;
}

/*
 * A raw IDX file's header checked against its size before the file is
 * read whole: a bad header is refused at once, whatever the file's size.
 * A gzip file, an empty one and one shorter than the header are left to
 * load_idx().  Returns 0 or -errno with a message.
 */
static int precheck_raw(const char *path, uint32_t ndims)
{
	size_t hdr_len = 4 + 4 * (size_t)ndims;
	uint8_t hdr[4 + 4 * IDX_MAX_DIMS];
	struct idx_data idx = { 0 };
	struct stat st;
	uint64_t total;
	int fd, ret;

	fd = pp_open_regular(path, &st);
	if (fd < 0)
		return fd;
	ret = 0;
	if ((uint64_t)st.st_size >= hdr_len)
		ret = pp_pread_full(fd, path, hdr, hdr_len, 0);
	if (ret == 0 && (uint64_t)st.st_size >= hdr_len && !(hdr[0] == 0x1f && hdr[1] == 0x8b)) {
		ret = check_idx_header(path, hdr, ndims, &idx, &total);
		if (ret == 0 && total != (uint64_t)st.st_size)
			ret = pp_error(-EBADMSG,
				       "%s: IDX header (offset 4..%zu) gives %llu bytes of file, the "
				       "file has %llu",
				       path, hdr_len - 1, (unsigned long long)total,
				       (unsigned long long)st.st_size);
	}
	close(fd);
	return ret;
}

/* Reads an IDX file of 'ndims' dimensions, raw or gzip, and checks its header against its size. */
static int load_idx(const char *path, uint32_t ndims, struct pp_inflater *inf,
		    struct idx_data *idx_p)
{
	struct idx_data idx = {0};
	size_t hdr_len = 4 + 4 * (size_t)ndims, flen;
	uint8_t hdr[4 + 4 * IDX_MAX_DIMS];
	uint8_t *file, *out;
	uint64_t total;
	int ret;

	ret = precheck_raw(path, ndims);
	if (ret == 0)
		ret = pp_read_whole_file(path, 0, (void **)&file, &flen);
	if (ret < 0)
		return ret;
	if (flen >= 2 && file[0] == 0x1f && file[1] == 0x8b) {
		uint32_t isize;

		ret = pp_gunzip_head(file, flen, hdr, hdr_len);
		if (ret == -ENOMEM) {
			ret = pp_error(-ENOMEM, "%s: no memory to inflate its gzip stream", path);
			goto err_free_file;
		}
		if (ret < 0) {
			ret = pp_error(-EBADMSG,
				       "%s: gzip stream is corrupt or ends before the %zu-byte IDX header",
				       path, hdr_len);
			goto err_free_file;
		}
		ret = check_idx_header(path, hdr, ndims, &idx, &total);
		if (ret < 0)
			goto err_free_file;
		isize = pp_le32(file + flen - 4);
		if (isize != (uint32_t)total) {
			ret = pp_error(-EBADMSG,
				       "%s: offset %zu: gzip trailer gives %u bytes (mod 2^32), the IDX "
				       "header %llu: the file is truncated or corrupt",
				       path, flen - 4, isize, (unsigned long long)total);
			goto err_free_file;
		}
		if (total > (uint64_t)flen * PP_DEFLATE_MAX_RATIO + PP_DEFLATE_MAX_SLACK) {
			ret = pp_error(-EBADMSG,
				       "%s: IDX header gives %llu bytes, more than %zu bytes of gzip "
				       "can hold",
				       path, (unsigned long long)total, flen);
			goto err_free_file;
		}
		out = pp_alloc_large((size_t)total);
		if (out == NULL) {
			ret = pp_error(-ENOMEM, "%s: no memory for %llu bytes", path,
				       (unsigned long long)total);
			goto err_free_file;
		}
		ret = pp_gunzip(inf, file, flen, out, (size_t)total);
		if (ret == -ENOMEM) {
			ret = pp_error(-ENOMEM, "%s: no memory to inflate its gzip stream", path);
			free(out);
			goto err_free_file;
		}
		if (ret < 0) {
			ret = pp_error(-EBADMSG,
				       "%s: gzip stream is corrupt, ends early or is followed by other "
				       "data (expected %llu bytes of IDX data, as its header says)",
				       path, (unsigned long long)total);
			free(out);
			goto err_free_file;
		}
		free(file);
		file = out;
	} else {
		if (flen < hdr_len) {
			ret = pp_error(-EBADMSG, "%s: %zu bytes, shorter than the %zu-byte IDX header",
				       path, flen, hdr_len);
			goto err_free_file;
		}
		ret = check_idx_header(path, file, ndims, &idx, &total);
		if (ret < 0)
			goto err_free_file;
		if (total != flen) {
			ret = pp_error(-EBADMSG,
				       "%s: IDX header (offset 4..%zu) gives %llu bytes of file, the "
				       "file has %zu",
				       path, hdr_len - 1, (unsigned long long)total, flen);
			goto err_free_file;
		}
	}
	idx.mem = file;
	idx.data = file + hdr_len;
	*idx_p = idx;
	return 0;

err_free_file:
	free(file);
	return ret;
}

/* Decodes the idx1 label file into ds->labels, which holds ds->info.count of them. */
static int load_labels(const char *path, struct pp_inflater *inf, struct pp_dataset *ds,
		       const char *images_path)
{
	struct idx_data idx;
	int ret = load_idx(path, 1, inf, &idx);

	if (ret < 0)
		return ret;
	if (idx.dims[0] != ds->info.count) {
		ret = pp_error(-EINVAL, "%s has %u labels, %s has %llu images", path, idx.dims[0],
			       images_path, (unsigned long long)ds->info.count);
		goto out;
	}
	for (size_t i = 0; i < idx.data_len; i++) {
		if (idx.data[i] >= IDX_NUM_CLASSES) {
			ret = pp_error(-EBADMSG, "%s: label %zu (data offset %zu): %u, expected 0..%d",
				       path, i, i, idx.data[i], IDX_NUM_CLASSES - 1);
			goto out;
		}
		ds->labels[i] = idx.data[i];
	}
out:
	free(idx.mem);
	return ret;
}

PP_API int pp_dataset_open_idx(const char *images_path, const char *labels_path,
			       struct pp_dataset **ds_p)
{
	struct pp_sample_info info = {0};
	struct pp_inflater *inf;
	struct pp_dataset *ds;
	struct idx_data idx;
	char name[256];
	int ret;

	ret = pp_inflater_create(&inf);
	if (ret < 0)
		return pp_error(ret, "%s: no memory for an inflater", images_path);
	ret = load_idx(images_path, 3, inf, &idx);
	if (ret < 0)
		goto out_inflater;
	info.count = idx.dims[0];
	info.dtype = PP_DTYPE_U8;
	info.ndim = 3;
	info.shape[0] = 1;
	info.shape[1] = idx.dims[1];
	info.shape[2] = idx.dims[2];
	info.label_kind = labels_path != NULL ? PP_LABEL_CLASS : PP_LABEL_NONE;
	info.num_classes = labels_path != NULL ? IDX_NUM_CLASSES : 0;
	ret = pp_sample_info_finish(&info);
	if (ret < 0)
		goto err_free_idx;
	snprintf(name, sizeof(name), "idx:%s", pp_path_base(images_path));
	ret = pp_dataset_alloc(&info, name, &ds);
	if (ret < 0)
		goto err_free_idx;
	ds->mem = idx.mem;
	ds->samples = idx.data;
	if (labels_path != NULL) {
		ret = load_labels(labels_path, inf, ds, images_path);
		if (ret < 0) {
			pp_dataset_destroy(ds);
			goto out_inflater;
		}
	}
	*ds_p = ds;
	goto out_inflater;

err_free_idx:
	free(idx.mem);
out_inflater:
	pp_inflater_destroy(inf);
	return ret;
}
