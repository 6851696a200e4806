/*
 * summary/summary.c: TensorBoard event files (TFRecord framing of Event
 * protocol buffers holding scalar, image and histogram summaries), written
 * without protobuf: the few fields needed are encoded by hand below, and
 * images as PNG through the library's deflate.
 *
 *   Event   { double wall_time = 1; int64 step = 2; string file_version = 3;
 *             Summary summary = 5; }
 *   Summary { repeated Value value = 1; }
 *   Value   { string tag = 1; float simple_value = 2; Image image = 4;
 *             HistogramProto histo = 5; }
 *   Image   { int32 height = 1; int32 width = 2; int32 colorspace = 3;
 *             bytes encoded_image_string = 4; }
 *   HistogramProto { double min = 1; double max = 2; double num = 3;
 *             double sum = 4; double sum_squares = 5;
 *             repeated double bucket_limit = 6 [packed];
 *             repeated double bucket = 7 [packed]; }
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "common/common_impl.h"
#include "datasets/codec.h"
#include "pinpipe/summary.h"

#define PP_TAG_MAX 512

/*
 * Records go into the writer's own buffer, and to the file when it holds
 * PP_SUMMARY_BUFFER bytes or at a flush: a step's scalar is a memcpy, not a
 * system call (nor the four of holding SIGXFSZ around one).  What a failed
 * write left is kept, and goes first at the next try: the file never holds
 * a record's part followed by another record.
 */
#define PP_SUMMARY_BUFFER (64 * 1024)

struct pp_summary_writer {
	int fd;
	char *path;
	uint8_t *buf;      /* [cap]: records not yet in the file */
	size_t len, cap;
};

/* Writes the buffer; what a failure left stays in it.  Returns 0 or -errno, named. */
static int write_out(struct pp_summary_writer *w)
{
	size_t done = 0;
	int ret;

	if (w->len == 0)
		return 0;
	/* past RLIMIT_FSIZE: an error, not the process killed by SIGXFSZ */
	ret = pp_write_full(w->fd, w->buf, w->len, -1, NULL, &done);
	if (done > 0 && done < w->len)
		memmove(w->buf, w->buf + done, w->len - done);
	w->len -= done;
	/* one large image's room given back once it has gone */
	if (w->len == 0 && w->cap > 4 * (size_t)PP_SUMMARY_BUFFER) {
		free(w->buf);
		w->buf = NULL;
		w->cap = 0;
	}
	if (ret < 0)
		ret = pp_error(ret, "%s: cannot write event records: %s%s", w->path,
			       pp_strerror(ret), pp_write_hint(ret));
	return ret;
}

static uint32_t masked_crc32c(const void *buf, size_t len)
{
	uint32_t crc = pp_crc32c(0, buf, len);

	return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

static size_t put_varint(uint8_t *p, uint64_t v)
{
	size_t n = 0;

	while (v >= 0x80) {
		p[n++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	p[n++] = (uint8_t)v;
	return n;
}

static int write_record(struct pp_summary_writer *w, const uint8_t *data, size_t len)
{
	const size_t need = 12 + len + 4;
	int ret;

	/* A full buffer that a write left: no more, until it goes. */
	if (w->len >= PP_SUMMARY_BUFFER && (ret = write_out(w)) < 0)
		return ret;
	if (need > w->cap - w->len) {
		size_t cap = PP_MAX(w->cap, (size_t)PP_SUMMARY_BUFFER);
		uint8_t *buf;

		while (cap - w->len < need)
			cap *= 2;
		buf = realloc(w->buf, cap);
		if (buf == NULL)
			return pp_error(-ENOMEM, "%s: no memory for an event record of %zu bytes",
					w->path, len);
		w->buf = buf;
		w->cap = cap;
	}
	pp_put_le64(w->buf + w->len, len);
	pp_put_le32(w->buf + w->len + 8, masked_crc32c(w->buf + w->len, 8));
	memcpy(w->buf + w->len + 12, data, len);
	pp_put_le32(w->buf + w->len + 12 + len, masked_crc32c(data, len));
	w->len += need;
	/* The record is in: a write that fails now is said, and tried again later. */
	return w->len >= PP_SUMMARY_BUFFER ? write_out(w) : 0;
}

/* Encodes the Event's wall_time and step fields; returns the bytes written. */
static size_t put_event_head(uint8_t *p, double wall_time, int64_t step)
{
	size_t n = 0;
	uint64_t bits;

	p[n++] = 0x09; /* field 1, fixed64 */
	memcpy(&bits, &wall_time, sizeof(bits));
	pp_put_le64(p + n, bits);
	n += 8;
	p[n++] = 0x10; /* field 2, varint */
	n += put_varint(p + n, (uint64_t)step);
	return n;
}

static double wall_clock(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
}

static int make_dirs(const char *dir)
{
	char path[PATH_MAX];
	size_t len = strlen(dir);

	if (len == 0 || len >= sizeof(path))
		return pp_error(-ENAMETOOLONG, "summary directory '%s': bad length", dir);
	memcpy(path, dir, len + 1);
	for (size_t i = 1; i <= len; i++) {
		if (path[i] != '/' && path[i] != '\0')
			continue;
		path[i] = '\0';
		if (mkdir(path, 0777) != 0 && errno != EEXIST)
			return pp_error(-errno, "%s: cannot create directory: %s", path, strerror(errno));
		path[i] = dir[i];
	}
	return 0;
}

PP_API int pp_summary_writer_create(const char *dir, struct pp_summary_writer **w_p)
{
	static const char version[] = "brain.Event:2";
	struct pp_summary_writer *w;
	char host[64] = "localhost";
	uint8_t event[64];
	size_t n;
	int ret;

	ret = make_dirs(dir);
	if (ret < 0)
		return ret;
	w = calloc(1, sizeof(*w));
	if (w == NULL)
		return pp_error(-ENOMEM, "summary writer: out of memory");
	gethostname(host, sizeof(host) - 1);
	/* A counter keeps two writers of one process in one second apart. */
	w->fd = -1;
	for (unsigned k = 0; w->fd < 0; k++) {
		int fd;

		free(w->path);
		if (asprintf(&w->path, "%s/events.out.tfevents.%lld.%s.%ld.%u", dir,
			     (long long)wall_clock(), host, (long)getpid(), k) < 0) {
			w->path = NULL;
			ret = pp_error(-ENOMEM, "summary writer: out of memory");
			goto err_free;
		}
		fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
		if (fd < 0 && errno == EEXIST && k < 1000)
			continue;
		if (fd < 0) {
			ret = pp_error(-errno, "%s: cannot create: %s", w->path, strerror(errno));
			goto err_free;
		}
		w->fd = fd;
	}
	n = put_event_head(event, wall_clock(), 0);
	event[n++] = 0x1a; /* field 3, length-delimited */
	event[n++] = (uint8_t)(sizeof(version) - 1);
	memcpy(event + n, version, sizeof(version) - 1);
	n += sizeof(version) - 1;
	ret = write_record(w, event, n);
	if (ret < 0)
		goto err_free;
	*w_p = w;
	return 0;

err_free:
	if (w->fd >= 0) {
		close(w->fd);
		unlink(w->path);
	}
	free(w->path);
	free(w->buf);
	free(w);
	return ret;
}

static size_t varint_len(uint64_t v)
{
	size_t n = 1;

	while (v >= 0x80) {
		v >>= 7;
		n++;
	}
	return n;
}

static int check_tag(const struct pp_summary_writer *w, const char *tag)
{
	size_t len;

	if (w == NULL || tag == NULL)
		return pp_error(-EINVAL, "summary writer: NULL writer or tag");
	len = strlen(tag);

	if (len == 0 || len > PP_TAG_MAX)
		return pp_error(-EINVAL, "%s: summary tag of %zu bytes (1..%d allowed)", w->path, len,
				PP_TAG_MAX);
	return 0;
}

PP_API int pp_summary_writer_add_scalar(struct pp_summary_writer *w, const char *tag,
					int64_t step, double value)
{
	uint8_t event[PP_TAG_MAX + 64];
	size_t tag_len;
	size_t n, val_len, summary_len;
	float f = (float)value;
	uint32_t fbits;
	int ret = check_tag(w, tag);

	if (ret < 0)
		return ret;
	tag_len = strlen(tag);
	val_len = 1 + varint_len(tag_len) + tag_len + 5;
	summary_len = 1 + varint_len(val_len) + val_len;

	n = put_event_head(event, wall_clock(), step);
	event[n++] = 0x2a; /* Event.summary: field 5, length-delimited */
	n += put_varint(event + n, summary_len);
	event[n++] = 0x0a; /* Summary.value: field 1, length-delimited */
	n += put_varint(event + n, val_len);
	event[n++] = 0x0a; /* Value.tag: field 1, length-delimited */
	n += put_varint(event + n, tag_len);
	memcpy(event + n, tag, tag_len);
	n += tag_len;
	event[n++] = 0x15; /* Value.simple_value: field 2, fixed32 */
	memcpy(&fbits, &f, sizeof(fbits));
	pp_put_le32(event + n, fbits);
	n += 4;
	return write_record(w, event, n);
}

/* A protocol buffer message being encoded, in a buffer that grows. */
struct pb {
	uint8_t *buf;
	size_t len, cap;
	bool oom;     /* an allocation failed: the message is incomplete */
};

static void pb_reserve(struct pb *m, size_t more)
{
	size_t cap = m->cap ? m->cap : 256;
	uint8_t *buf;

	if (m->oom || m->len + more <= m->cap)
		return;
	while (cap < m->len + more)
		cap *= 2;
	buf = realloc(m->buf, cap);
	if (buf == NULL) {
		m->oom = true;
		return;
	}
	m->buf = buf;
	m->cap = cap;
}

static void pb_bytes(struct pb *m, const void *p, size_t n)
{
	pb_reserve(m, n);
	if (!m->oom && n > 0) {
		memcpy(m->buf + m->len, p, n);
		m->len += n;
	}
}

static void pb_varint(struct pb *m, uint64_t v)
{
	uint8_t b[10];

	pb_bytes(m, b, put_varint(b, v));
}

static void pb_double(struct pb *m, unsigned field, double v)
{
	uint8_t b[8];
	uint64_t bits;

	pb_varint(m, (uint64_t)field << 3 | 1);
	memcpy(&bits, &v, sizeof(bits));
	pp_put_le64(b, bits);
	pb_bytes(m, b, 8);
}

/* A length-delimited field: a string, bytes or a nested message. */
static void pb_field(struct pb *m, unsigned field, const void *p, size_t n)
{
	pb_varint(m, (uint64_t)field << 3 | 2);
	pb_varint(m, n);
	pb_bytes(m, p, n);
}

/* A packed repeated double field. */
static void pb_doubles(struct pb *m, unsigned field, const double *v, size_t n)
{
	pb_varint(m, (uint64_t)field << 3 | 2);
	pb_varint(m, n * 8);
	for (size_t i = 0; i < n; i++) {
		uint8_t b[8];
		uint64_t bits;

		memcpy(&bits, &v[i], sizeof(bits));
		pp_put_le64(b, bits);
		pb_bytes(m, b, 8);
	}
}

/*
 * Writes an Event at 'step' whose summary holds one Value: the tag and
 * 'field' (the image or the histogram), 'body' encoded.  Frees the body.
 */
static int write_value(struct pp_summary_writer *w, const char *tag, int64_t step,
		       unsigned field, struct pb *body)
{
	struct pb value = { 0 }, summary = { 0 }, event = { 0 };
	uint8_t head[32];
	int ret;

	pb_field(&value, 1, tag, strlen(tag));
	pb_field(&value, field, body->buf, body->len);
	pb_field(&summary, 1, value.buf, value.len);
	pb_bytes(&event, head, put_event_head(head, wall_clock(), step));
	pb_field(&event, 5, summary.buf, summary.len);
	if (body->oom || value.oom || summary.oom || event.oom)
		ret = pp_error(-ENOMEM, "%s: %s: out of memory", w->path, tag);
	else
		ret = write_record(w, event.buf, event.len);
	free(body->buf);
	free(value.buf);
	free(summary.buf);
	free(event.buf);
	return ret;
}

/* Appends a PNG chunk: length, type, data, CRC-32 of type and data. */
static void png_chunk(struct pb *m, const char *type, const void *data, size_t len)
{
	uint8_t b[4];
	uint32_t crc;

	b[0] = (uint8_t)(len >> 24);
	b[1] = (uint8_t)(len >> 16);
	b[2] = (uint8_t)(len >> 8);
	b[3] = (uint8_t)len;
	pb_bytes(m, b, 4);
	pb_bytes(m, type, 4);
	pb_bytes(m, data, len);
	crc = pp_crc32(0, type, 4);
	if (len > 0) /* libdeflate's CRC of a NULL buffer is 0, whatever it continues */
		crc = pp_crc32(crc, data, len);
	b[0] = (uint8_t)(crc >> 24);
	b[1] = (uint8_t)(crc >> 16);
	b[2] = (uint8_t)(crc >> 8);
	b[3] = (uint8_t)crc;
	pb_bytes(m, b, 4);
}

/* Encodes 8-bit pixels (height x width x channels, 1 gray, 3 RGB, 4 RGBA) as a PNG in *png. */
static int png_encode(const uint8_t *pixels, uint32_t height, uint32_t width, uint32_t channels,
		      struct pb *png)
{
	static const uint8_t signature[8] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n' };
	static const uint8_t color_type[5] = { 0, 0, 0, 2, 6 };
	size_t row = (size_t)width * channels, raw_len = (row + 1) * height, z_len = 0;
	uint8_t ihdr[13], *raw = malloc(raw_len), *z = NULL;
	struct pp_deflater *def = NULL;
	int ret = -ENOMEM;

	if (raw == NULL || pp_deflater_create(6, &def) < 0)
		goto out;
	for (uint32_t y = 0; y < height; y++) {
		raw[y * (row + 1)] = 0; /* filter: none */
		memcpy(raw + y * (row + 1) + 1, pixels + y * row, row);
	}
	z = malloc(pp_deflate_bound(def, raw_len));
	if (z == NULL)
		goto out;
	ret = pp_deflate(def, raw, raw_len, z, pp_deflate_bound(def, raw_len), &z_len);
	if (ret < 0)
		goto out;
	for (int i = 0; i < 4; i++) {
		ihdr[i] = (uint8_t)(width >> (24 - 8 * i));
		ihdr[4 + i] = (uint8_t)(height >> (24 - 8 * i));
	}
	ihdr[8] = 8; /* bits per sample */
	ihdr[9] = color_type[channels];
	ihdr[10] = ihdr[11] = ihdr[12] = 0; /* deflate, adaptive filtering, no interlace */
	pb_bytes(png, signature, sizeof(signature));
	png_chunk(png, "IHDR", ihdr, sizeof(ihdr));
	png_chunk(png, "IDAT", z, z_len);
	png_chunk(png, "IEND", NULL, 0);
	ret = png->oom ? -ENOMEM : 0;
out:
	pp_deflater_destroy(def);
	free(z);
	free(raw);
	return ret;
}

PP_API int pp_summary_writer_add_image(struct pp_summary_writer *w, const char *tag, int64_t step,
				       const uint8_t *pixels, uint32_t height, uint32_t width,
				       uint32_t channels)
{
	struct pb image = { 0 }, png = { 0 };
	int ret = check_tag(w, tag);

	if (ret < 0)
		return ret;
	if (pixels == NULL)
		return pp_error(-EINVAL, "%s: %s: NULL pixels", w->path, tag);
	if (channels != 1 && channels != 3 && channels != 4)
		return pp_error(-EINVAL, "%s: %s: %u channels (1, 3 or 4 allowed)", w->path, tag,
				channels);
	if (height == 0 || width == 0 || height > PP_SUMMARY_IMAGE_MAX ||
	    width > PP_SUMMARY_IMAGE_MAX)
		return pp_error(-EINVAL, "%s: %s: image of %u x %u pixels (1..%d each allowed)",
				w->path, tag, height, width, PP_SUMMARY_IMAGE_MAX);
	ret = png_encode(pixels, height, width, channels, &png);
	if (ret < 0) {
		free(png.buf);
		return pp_error(ret, "%s: %s: cannot encode the image as PNG: %s", w->path, tag,
				pp_strerror(ret));
	}
	pb_varint(&image, 1 << 3 | 0);
	pb_varint(&image, height);
	pb_varint(&image, 2 << 3 | 0);
	pb_varint(&image, width);
	pb_varint(&image, 3 << 3 | 0);
	pb_varint(&image, channels);
	pb_field(&image, 4, png.buf, png.len);
	image.oom = image.oom || png.oom;
	free(png.buf);
	return write_value(w, tag, step, 4, &image);
}

PP_API int pp_summary_writer_add_histogram(struct pp_summary_writer *w, const char *tag,
					   int64_t step, const float *values, size_t n)
{
	double limit[PP_SUMMARY_BUCKETS], count[PP_SUMMARY_BUCKETS] = { 0 };
	double min = INFINITY, max = -INFINITY, sum = 0, sum_sq = 0, num = 0, width;
	size_t buckets;
	struct pb histo = { 0 };
	int ret = check_tag(w, tag);

	if (ret < 0)
		return ret;
	if (values == NULL && n > 0)
		return pp_error(-EINVAL, "%s: %s: NULL values", w->path, tag);
	for (size_t i = 0; i < n; i++) {
		double v = values[i];

		if (!isfinite(v))
			continue;
		min = v < min ? v : min;
		max = v > max ? v : max;
		sum += v;
		sum_sq += v * v;
		num++;
	}
	if (num == 0)
		return pp_error(-EINVAL, "%s: %s: no finite value among %zu for a histogram", w->path,
				tag, n);
	/* Equal-width buckets from min to max, each named by its right edge; one when all are equal. */
	width = (max - min) / PP_SUMMARY_BUCKETS;
	buckets = width > 0 ? PP_SUMMARY_BUCKETS : 1;
	for (size_t b = 0; b < buckets; b++)
		limit[b] = b + 1 == buckets ? max : min + width * (double)(b + 1);
	for (size_t i = 0; i < n; i++) {
		double v = values[i];
		size_t b;

		if (!isfinite(v))
			continue;
		b = buckets > 1 ? (size_t)((v - min) / width) : 0;
		if (b >= buckets)
			b = buckets - 1;
		/* A value on an edge belongs to the bucket on its left, as the limits say. */
		while (b > 0 && v <= limit[b - 1])
			b--;
		while (b + 1 < buckets && v > limit[b])
			b++;
		count[b]++;
	}
	pb_double(&histo, 1, min);
	pb_double(&histo, 2, max);
	pb_double(&histo, 3, num);
	pb_double(&histo, 4, sum);
	pb_double(&histo, 5, sum_sq);
	pb_doubles(&histo, 6, limit, buckets);
	pb_doubles(&histo, 7, count, buckets);
	return write_value(w, tag, step, 5, &histo);
}

PP_API int pp_summary_writer_flush(struct pp_summary_writer *w)
{
	if (w == NULL)
		return pp_error(-EINVAL, "summary writer: NULL writer");
	return write_out(w);
}

PP_API const char *pp_summary_writer_path(const struct pp_summary_writer *w)
{
	return w->path;
}

PP_API void pp_summary_writer_destroy(struct pp_summary_writer *w)
{
	struct pp_error_saved saved;

	if (w == NULL)
		return;
	/* Nothing to return a failure to: pp_last_error() stays the caller's. */
	pp_error_save(&saved);
	if (w->len > 0 && write_out(w) < 0)
		pp_error_restore(&saved);
	close(w->fd);
	free(w->path);
	free(w->buf);
	free(w);
}
