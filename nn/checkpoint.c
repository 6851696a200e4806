/*
 * nn/checkpoint.c: checkpoints.  Layout, little-endian:
 *
 *   0   8  magic "PPNNCKPT"
 *   8   4  version (2; version 1 is read too)
 *  12   4  spec length S (1..4096)
 *  16  16  input channels, height, width, classes (u32 each)
 *  32   8  parameter count N (u64)
 *  40   8  optimizer steps taken (u64)
 *  48  36  optimizer: kind (u32), lr, momentum, dampening (f32), nesterov (u32),
 *          weight decay, beta1, beta2, eps (f32)
 *  84   8  the caller's tag (u64, pp_model_set_tag()); version 2 only
 *  92   S  the expanded spec (no NUL); at 84 in version 1
 *       4N parameters, then 4N momentum (SGD) or 8N first and second moments (Adam)
 *       4  CRC-32 of everything before it
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common_impl.h"
#include "common/staged.h"
#include "nn/nn_impl.h"

#define CKPT_MAGIC "PPNNCKPT"
#define CKPT_VERSION 2
#define CKPT_HEADER 92    /* version 2; 84 in version 1, which has no tag */
#define CKPT_HEADER_V1 84
#define CKPT_MAX_SPEC 4096

static void put_f32(uint8_t *p, float v)
{
	uint32_t u;

	memcpy(&u, &v, 4);
	pp_put_le32(p, u);
}

static float get_f32(const uint8_t *p)
{
	uint32_t u = pp_le32(p);
	float v;

	memcpy(&v, &u, 4);
	return v;
}

/* Number of optimizer state vectors of N floats kept for 'kind'. */
static size_t state_vectors(enum pp_optimizer_kind kind)
{
	return kind == PP_OPTIM_ADAM ? 2 : 1;
}

/* Copies n floats from device memory to p as little-endian. */
static int put_floats(struct pp_model *m, uint8_t *p, const float *src, size_t n)
{
	int ret = pp_nn_mem_copy(NULL, p, m->dev, src, n * sizeof(float));

	for (size_t i = 0; i < n && !ret; i++) {
		float v;

		memcpy(&v, p + 4 * i, 4);
		put_f32(p + 4 * i, v);
	}
	return ret;
}

/* Makes a rename into the directory of 'path' durable (fsync of the directory). */
static int sync_dir(const char *path)
{
	const char *slash = strrchr(path, '/');
	char *dir = slash == NULL ? strdup(".") : strndup(path, slash == path ? 1 : (size_t)(slash - path));
	int fd, ret = 0;

	if (dir == NULL)
		return pp_error(-ENOMEM, "%s: no memory", path);
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || fsync(fd) != 0)
		ret = pp_error(-errno, "%s: fsync of its directory %s: %s", path, dir, strerror(errno));
	if (fd >= 0)
		close(fd);
	free(dir);
	return ret;
}

PP_API void pp_model_set_tag(struct pp_model *m, uint64_t tag)
{
	m->tag = tag;
}

PP_API uint64_t pp_model_tag(const struct pp_model *m)
{
	return m->tag;
}

PP_API int pp_model_save(struct pp_model *m, const char *path)
{
	const struct pp_optimizer_config *o = &m->optim.cfg;
	const size_t n = m->n_params, slen = strlen(m->spec);
	const size_t size = CKPT_HEADER + slen + 4 * n * (1 + state_vectors(o->kind)) + 4;
	uint8_t *buf, *p;
	char *tmp, *target;
	int fd, ret;

	/* The file the path names, through its links; never a device in its place. */
	ret = pp_replace_target(path, &target);
	if (ret)
		return ret;
	buf = malloc(size);
	tmp = malloc(strlen(target) + 16);
	if (!buf || !tmp) {
		ret = pp_error(-ENOMEM, "%s: out of memory for a checkpoint of %zu bytes", path, size);
		goto err_free;
	}
	ret = pp_nn_model_wait(m);
	if (ret)
		goto err_free;
	memcpy(buf, CKPT_MAGIC, 8);
	pp_put_le32(buf + 8, CKPT_VERSION);
	pp_put_le32(buf + 12, (uint32_t)slen);
	pp_put_le32(buf + 16, m->cfg.in_channels);
	pp_put_le32(buf + 20, m->cfg.in_height);
	pp_put_le32(buf + 24, m->cfg.in_width);
	pp_put_le32(buf + 28, m->cfg.num_classes);
	pp_put_le64(buf + 32, n);
	pp_put_le64(buf + 40, m->optim.t);
	pp_put_le32(buf + 48, (uint32_t)o->kind);
	put_f32(buf + 52, o->lr);
	put_f32(buf + 56, o->momentum);
	put_f32(buf + 60, o->dampening);
	pp_put_le32(buf + 64, o->nesterov);
	put_f32(buf + 68, o->weight_decay);
	put_f32(buf + 72, o->beta1);
	put_f32(buf + 76, o->beta2);
	put_f32(buf + 80, o->eps);
	pp_put_le64(buf + 84, m->tag);
	memcpy(buf + CKPT_HEADER, m->spec, slen);
	p = buf + CKPT_HEADER + slen;
	ret = put_floats(m, p, m->params, n);
	if (!ret)
		ret = put_floats(m, p + 4 * n, m->optim.buf1, n);
	if (!ret && o->kind == PP_OPTIM_ADAM)
		ret = put_floats(m, p + 8 * n, m->optim.buf2, n);
	if (ret)
		goto err_free;
	pp_put_le32(buf + size - 4, pp_crc32(0, buf, size - 4));

	/* A name of its own beside the target, created here (O_EXCL): never a
	 * file or link planted under a fixed name, nor another run's. */
	fd = pp_staged_create(target, tmp, strlen(target) + 16);
	if (fd < 0) {
		ret = pp_error(-errno, "%s: cannot create: %s", tmp, strerror(errno));
		goto err_free;
	}
	if (fchmod(fd, 0644) != 0)
		ret = pp_error(-errno, "%s: chmod: %s", tmp, strerror(errno));
	/* past RLIMIT_FSIZE: -EFBIG with the reason, not the process killed by SIGXFSZ */
	if (!ret && (ret = pp_write_full(fd, buf, size, -1, NULL, NULL)) < 0)
		ret = pp_error(ret, "%s: write: %s%s", tmp, pp_strerror(ret), pp_write_hint(ret));
	if (!ret && fsync(fd))
		ret = pp_error(-errno, "%s: fsync: %s", tmp, strerror(errno));
	/* renamed before its close: until then its lock says a writer lives (pp_staged_create()) */
	if (!ret && rename(tmp, target))
		ret = pp_error(-errno, "%s: cannot rename to %s: %s", tmp, target, strerror(errno));
	/* what it wrote is on disk (fsync): a close can lose nothing now */
	close(fd);
	if (ret)
		unlink(tmp);
	else
		ret = sync_dir(target);
err_free:
	free(target);
	free(tmp);
	free(buf);
	return ret;
}

static int read_file(const char *path, uint8_t **buf_p, size_t *len_p)
{
	struct stat st;
	uint8_t *buf;
	size_t got = 0;
	int fd, ret = 0;

	/* O_NONBLOCK: a FIFO in its place fails the S_ISREG check below instead of blocking open(). */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return pp_error(-errno, "%s: cannot open: %s", path, strerror(errno));
	if (fstat(fd, &st)) {
		ret = pp_error(-errno, "%s: fstat: %s", path, strerror(errno));
		goto err_close;
	}
	if (!S_ISREG(st.st_mode) || st.st_size > (off_t)1 << 34) {
		ret = pp_error(-EBADMSG, "%s: not a regular file of at most 16 GiB", path);
		goto err_close;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		ret = pp_error(-ENOMEM, "%s: out of memory for %lld bytes", path, (long long)st.st_size);
		goto err_close;
	}
	while (got < (size_t)st.st_size) {
		ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			ret = r ? pp_error(-errno, "%s: read at offset %zu: %s", path, got, strerror(errno)) :
				  pp_error(-EBADMSG, "%s: file shrank to %zu bytes while reading", path, got);
			free(buf);
			goto err_close;
		}
		got += (size_t)r;
	}
	*buf_p = buf;
	*len_p = got;
err_close:
	close(fd);
	return ret;
}

/*
 * Checks that the spec, on the header's input shape, has the n parameters
 * the header says, before anything of that size is allocated: a small file
 * must not make the reader build a model of gigabytes.  Returns 0,
 * -EBADMSG, or the error of a spec that does not parse (said by the caller).
 */
static int spec_params(const char *path, const char *spec, const struct pp_model_config *cfg,
		       uint64_t n)
{
	struct nn_layer *layers;
	char *expanded;
	size_t n_layers, have = 0;
	int ret;

	ret = pp_nn_spec_parse(spec, (int)PP_MIN(cfg->in_channels, 1u << 30),
			    (int)PP_MIN(cfg->in_height, 1u << 30), (int)PP_MIN(cfg->in_width, 1u << 30),
			    &layers, &n_layers, &expanded);
	if (ret)
		return ret;
	for (size_t i = 0; i < n_layers; i++)
		have += layers[i].n_w + layers[i].n_b;
	free(layers);
	free(expanded);
	if (have != n)
		return pp_error(-EBADMSG, "%s: offset 32: %llu parameters, the spec '%s' has %zu", path,
				(unsigned long long)n, spec, have);
	return 0;
}

/* Parses a checkpoint held in buf (len bytes) into a new model. */
static int parse(const char *path, const uint8_t *buf, size_t len, struct pp_device *dev,
		 const struct pp_model_config *user, struct pp_model **model_p)
{
	struct pp_model_config cfg = *user;
	struct pp_model *m;
	uint32_t version, slen, crc, want_crc;
	uint64_t n, steps, tag = 0;
	size_t header;
	size_t need;
	char spec[CKPT_MAX_SPEC + 1];
	float *host;
	int ret;

	if (len < CKPT_HEADER_V1 + 4)
		return pp_error(-EBADMSG, "%s: %zu bytes, too short for a checkpoint (at least %d)", path,
				len, CKPT_HEADER_V1 + 4);
	if (memcmp(buf, CKPT_MAGIC, 8) != 0)
		return pp_error(-EBADMSG, "%s: offset 0: bad magic (expected \"%s\")", path, CKPT_MAGIC);
	version = pp_le32(buf + 8);
	if (version != 1 && version != CKPT_VERSION)
		return pp_error(-EBADMSG, "%s: offset 8: version %u (expected 1 or %d)", path, version,
				CKPT_VERSION);
	header = version == 1 ? CKPT_HEADER_V1 : CKPT_HEADER;
	if (len < header + 4)
		return pp_error(-EBADMSG, "%s: %zu bytes, too short for a version %u checkpoint (at "
				"least %zu)", path, len, version, header + 4);
	want_crc = pp_le32(buf + len - 4);
	crc = pp_crc32(0, buf, len - 4);
	if (crc != want_crc) {
		/*
		 * A file cut short (a copy interrupted, a disk that filled up) or
		 * run on fails its CRC too: where the header is sound, its size
		 * says which.
		 */
		slen = pp_le32(buf + 12);
		n = pp_le64(buf + 32);
		cfg.optim.kind = (enum pp_optimizer_kind)pp_le32(buf + 48);
		need = 0;
		if (slen >= 1 && slen <= CKPT_MAX_SPEC && n <= (1ull << 40) &&
		    (cfg.optim.kind == PP_OPTIM_SGD || cfg.optim.kind == PP_OPTIM_ADAM))
			need = header + slen + 4 * (size_t)n * (1 + state_vectors(cfg.optim.kind)) + 4;
		if (need > len)
			return pp_error(-EBADMSG, "%s: truncated (%zu of %zu bytes)", path, len, need);
		if (need > 0 && need < len)
			return pp_error(-EBADMSG, "%s: %zu bytes past its end (%zu of %zu bytes)", path,
					len - need, len, need);
		return pp_error(-EBADMSG, "%s: offset %zu: CRC-32 mismatch (expected 0x%08x, got 0x%08x)",
				path, len - 4, want_crc, crc);
	}
	slen = pp_le32(buf + 12);
	if (slen < 1 || slen > CKPT_MAX_SPEC || slen > len - header - 4)
		return pp_error(-EBADMSG, "%s: offset 12: spec length %u (expected 1..%d within the file)",
				path, slen, CKPT_MAX_SPEC);
	memcpy(spec, buf + header, slen);
	spec[slen] = '\0';
	if (strlen(spec) != slen)
		return pp_error(-EBADMSG, "%s: offset %zu: the spec holds a NUL byte", path, header);
	if (version >= 2)
		tag = pp_le64(buf + 84);
	cfg.in_channels = pp_le32(buf + 16);
	cfg.in_height = pp_le32(buf + 20);
	cfg.in_width = pp_le32(buf + 24);
	cfg.num_classes = pp_le32(buf + 28);
	n = pp_le64(buf + 32);
	steps = pp_le64(buf + 40);
	cfg.optim.kind = (enum pp_optimizer_kind)pp_le32(buf + 48);
	cfg.optim.lr = get_f32(buf + 52);
	cfg.optim.momentum = get_f32(buf + 56);
	cfg.optim.dampening = get_f32(buf + 60);
	cfg.optim.nesterov = pp_le32(buf + 64) != 0;
	cfg.optim.weight_decay = get_f32(buf + 68);
	cfg.optim.beta1 = get_f32(buf + 72);
	cfg.optim.beta2 = get_f32(buf + 76);
	cfg.optim.eps = get_f32(buf + 80);
	if (cfg.optim.kind != PP_OPTIM_SGD && cfg.optim.kind != PP_OPTIM_ADAM)
		return pp_error(-EBADMSG, "%s: offset 48: optimizer kind %d (expected 1 sgd or 2 adam)",
				path, (int)cfg.optim.kind);
	if (n > (len / 4))
		return pp_error(-EBADMSG, "%s: offset 32: %llu parameters cannot fit in %zu bytes", path,
				(unsigned long long)n, len);
	need = header + slen + 4 * (size_t)n * (1 + state_vectors(cfg.optim.kind)) + 4;
	if (need != len)
		return pp_error(-EBADMSG, "%s: %zu bytes, expected %zu for %llu parameters and the %s state",
				path, len, need, (unsigned long long)n,
				cfg.optim.kind == PP_OPTIM_ADAM ? "adam" : "sgd");
	ret = spec_params(path, spec, &cfg, n);
	if (!ret)
		ret = pp_nn_model_new(spec, dev, &cfg, &m);
	if (ret == -EBADMSG)
		return ret;
	if (ret) {
		char why[512];

		snprintf(why, sizeof(why), "%s", pp_last_error());
		return pp_error(ret == -ENOMEM ? ret : -EBADMSG,
				"%s: the header and spec describe no valid model: %s", path, why);
	}
	if (m->n_params != n) {
		ret = pp_error(-EBADMSG, "%s: offset 32: %llu parameters, the spec '%s' has %zu", path,
			       (unsigned long long)n, spec, m->n_params);
		goto err_destroy;
	}
	host = malloc((size_t)n * sizeof(float) + 1);
	if (!host) {
		ret = pp_error(-ENOMEM, "%s: out of memory", path);
		goto err_destroy;
	}
	float *dsts[3] = { m->params, m->optim.buf1, m->optim.buf2 };
	const uint8_t *p = buf + header + slen;
	for (size_t v = 0; v < 1 + state_vectors(cfg.optim.kind) && !ret; v++) {
		for (size_t i = 0; i < n; i++)
			host[i] = get_f32(p + 4 * (v * n + i));
		ret = pp_nn_mem_copy(m->dev, dsts[v], NULL, host, (size_t)n * sizeof(float));
	}
	free(host);
	if (ret)
		goto err_destroy;
	m->optim.t = steps;
	m->optim_t_set = true;
	m->tag = tag;
	*model_p = m;
	return 0;

err_destroy:
	pp_model_destroy(m);
	return ret;
}

PP_API int pp_model_load(const char *path, struct pp_device *dev, const struct pp_model_config *cfg,
			 struct pp_model **model_p)
{
	uint8_t *buf = NULL;
	size_t len = 0;
	int ret = pp_nn_model_check_runtime(cfg);

	if (!ret)
		ret = read_file(path, &buf, &len);
	if (ret)
		return ret;
	ret = parse(path, buf, len, dev, cfg, model_p);
	free(buf);
	return ret;
}
