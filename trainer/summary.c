/*
 * trainer/summary.c: TensorBoard event files (TFRecord framing of Event
 * protocol buffers holding scalar summaries), written without protobuf:
 * the few fields needed are encoded by hand below.
 *
 *   Event   { double wall_time = 1; int64 step = 2; string file_version = 3;
 *             Summary summary = 5; }
 *   Summary { repeated Value value = 1; }
 *   Value   { string tag = 1; float simple_value = 2; }
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "common/internal.h"
#include "pinpipe/summary.h"

#define PP_TAG_MAX 512

struct pp_summary_writer {
	FILE *file;
	char *path;
};

/* CRC-32C, reflected polynomial 0x82f63b78, bit by bit: event records are small. */
static uint32_t crc32c_byte(uint32_t crc, uint8_t b)
{
	crc ^= b;
	for (int k = 0; k < 8; k++)
		crc = (crc >> 1) ^ (0x82f63b78u & (0u - (crc & 1u)));
	return crc;
}

PP_API uint32_t pp_crc32c(uint32_t crc, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	crc = ~crc;
	for (size_t i = 0; i < len; i++)
		crc = crc32c_byte(crc, p[i]);
	return ~crc;
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
	uint8_t head[12];
	uint8_t tail[4];

	pp_put_le64(head, len);
	pp_put_le32(head + 8, masked_crc32c(head, 8));
	pp_put_le32(tail, masked_crc32c(data, len));
	if (fwrite(head, 1, sizeof(head), w->file) != sizeof(head) ||
	    fwrite(data, 1, len, w->file) != len || fwrite(tail, 1, sizeof(tail), w->file) != sizeof(tail))
		return pp_error(-EIO, "%s: cannot write event record: %s", w->path, strerror(errno));
	return 0;
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
	for (unsigned k = 0; w->file == NULL; k++) {
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
		w->file = fdopen(fd, "wb");
		if (w->file == NULL) {
			ret = pp_error(-errno, "%s: %s", w->path, strerror(errno));
			close(fd);
			goto err_free;
		}
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
	if (w->file != NULL) {
		fclose(w->file);
		unlink(w->path);
	}
	free(w->path);
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

PP_API int pp_summary_writer_add_scalar(struct pp_summary_writer *w, const char *tag,
					int64_t step, double value)
{
	uint8_t event[PP_TAG_MAX + 64];
	size_t tag_len = strlen(tag);
	size_t n, val_len, summary_len;
	float f = (float)value;
	uint32_t fbits;

	if (tag_len == 0 || tag_len > PP_TAG_MAX)
		return pp_error(-EINVAL, "%s: summary tag of %zu bytes (1..%d allowed)", w->path,
				tag_len, PP_TAG_MAX);
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

PP_API int pp_summary_writer_flush(struct pp_summary_writer *w)
{
	if (fflush(w->file) != 0)
		return pp_error(-EIO, "%s: cannot write: %s", w->path, strerror(errno));
	return 0;
}

PP_API const char *pp_summary_writer_path(const struct pp_summary_writer *w)
{
	return w->path;
}

PP_API void pp_summary_writer_destroy(struct pp_summary_writer *w)
{
	if (w == NULL)
		return;
	fclose(w->file);
	free(w->path);
	free(w);
}
