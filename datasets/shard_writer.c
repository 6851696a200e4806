/*
 * datasets/shard_writer.c: the pinpipe shard writer.  Records are gathered
 * into chunk buffers; full chunks are compressed (or stored), in parallel on
 * up to 'threads' threads, then padded with zeros to the next 4 KiB boundary
 * and written in order; finish() writes the index, the trailer and the
 * header, syncs, and renames the temporary file into place, so that only
 * complete shards ever carry the final name.  Version 1 holds fixed-size
 * samples (pp_shard_writer_add()); version 2, written when the config names
 * a layout, records of any length (pp_shard_writer_add_record()), whose
 * chunk buffers grow as they fill.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fault.h"
#include "common/common_impl.h"
#include "common/staged.h"
#include "datasets/codec.h"
#include "datasets/shard.h"
#include "datasets/shard_format.h"
#include "datasets/source.h"

#define PP_SHARD_DEFAULT_RECORDS_PER_CHUNK 1024u
#define PP_SHARD_MAX_WRITER_THREADS 64u

/* One chunk being filled or compressed. */
struct chunk_slot {
	uint8_t *raw;            /* [records_per_chunk * record_bytes]: labels, then samples;
				  * version 2: [raw_cap], the decoded chunk once assembled */
	uint32_t records;        /* records in raw so far */
	size_t raw_size;         /* decoded bytes of the chunk, once it is full */
	/* Version 2, while filling: each record's label and END, and the bytes area. */
	uint32_t *labels, *ends; /* [meta_cap] */
	uint8_t *bytes;          /* [bytes_cap], bytes_len used */
	size_t meta_cap, bytes_len, bytes_cap, raw_cap;
	bool v2;                 /* a version 2 chunk, assembled before it is compressed */
	uint8_t *out;            /* [out_cap]: stored bytes and zero padding */
	size_t stored;           /* stored bytes in out, once compressed */
	struct pp_deflater *def; /* NULL when chunks are stored */
	int ret;                 /* result of compressing this slot */
	size_t record_bytes;     /* copied from the writer, for the worker thread */
	size_t label_bytes;
	uint32_t records_per_chunk;
	size_t out_cap;
};

struct pp_shard_writer {
	char *path;                         /* final name, as given */
	char *target;                       /* the file it names (pp_replace_target()) */
	char *tmp_path;                     /* where the data goes until finish() */
	int fd;                             /* of tmp_path; -1 once closed */
	struct pp_sample_info info;         /* count is the records added so far */
	uint32_t records_per_chunk;
	uint32_t version;                   /* PP_SHARD_VERSION or PP_SHARD_VERSION_RECORDS */
	struct pp_layout layout;            /* version 2: the decoder's fields */
	char decoder[PP_SHARD_DECODER_MAX + 1]; /* version 2 */
	uint32_t max_record;                /* version 2: bytes of a record at most */
	size_t record_bytes;                /* label bytes + sample_bytes (version 2: + END) */
	size_t label_bytes;                 /* per record: 4 with labels, else 0 */
	bool compress;                      /* zlib, else stored */
	struct chunk_slot *slots;           /* [nslots]: chunks compressed together */
	uint32_t nslots;
	uint32_t filling;                   /* slot being filled; the ones before it are full */
	uint64_t written_records;           /* records in chunks already written */
	uint64_t offset;                    /* where the next chunk goes, bytes */
	struct pp_shard_chunk_info *chunks; /* [nchunks], capacity chunks_cap */
	uint64_t nchunks, chunks_cap;
	bool finished;                      /* renamed into place */
	struct pp_fault_plan *faults;       /* injected faults (common/fault.h), or NULL */
	struct pp_fault_plan env_faults;    /* the plan of PP_FAULTS, when it is set */
	int error;                          /* first failure; later calls return it */
};

/* Past RLIMIT_FSIZE: -EFBIG, not the process killed by SIGXFSZ with the temporary file left. */
static int write_full(struct pp_shard_writer *w, const void *buf, size_t len, uint64_t off)
{
	size_t done;
	int ret = pp_write_full(w->fd, buf, len, (int64_t)off, w->faults, &done);

	if (ret < 0)
		ret = pp_error(ret, "%s: write of %zu bytes at offset %llu (into %s) failed: %s%s",
			       w->path, len - done, (unsigned long long)(off + done), w->tmp_path,
			       pp_strerror(ret), pp_write_hint(ret));
	return ret;
}

static void free_slots(struct pp_shard_writer *w)
{
	for (uint32_t k = 0; k < w->nslots; k++) {
		free(w->slots[k].raw);
		free(w->slots[k].labels);
		free(w->slots[k].ends);
		free(w->slots[k].bytes);
		free(w->slots[k].out);
		pp_deflater_destroy(w->slots[k].def);
	}
	free(w->slots);
}

/*
 * Allocates the chunk slots; returns 0, -ENOMEM (message left to the
 * caller), or -EINVAL with the message set when a compressed chunk could
 * outgrow the 32-bit stored size of the chunk index.
 */
static int alloc_slots(struct pp_shard_writer *w, const char *path, int level)
{
	size_t chunk_bytes = (size_t)w->records_per_chunk * w->record_bytes;

	/* Version 2's buffers grow as records come; its largest chunk is bounded. */
	if (w->version == PP_SHARD_VERSION_RECORDS)
		chunk_bytes = PP_MAX(PP_SHARD_CHUNK_TARGET, w->record_bytes + w->max_record);

	w->slots = pp_calloc(w->nslots, sizeof(*w->slots));
	if (w->slots == NULL)
		return -ENOMEM;
	for (uint32_t k = 0; k < w->nslots; k++) {
		struct chunk_slot *s = &w->slots[k];

		if (level > 0) {
			int ret = pp_deflater_create(level, &s->def);

			if (ret < 0)
				return ret;
			if (pp_deflate_bound(s->def, chunk_bytes) > UINT32_MAX)
				return pp_error(-EINVAL, "%s: %u records of %zu bytes make a chunk that may "
						"compress to more than 4 GiB; use fewer records per chunk",
						path, w->records_per_chunk, w->record_bytes);
			s->out_cap = pp_shard_align_up(pp_deflate_bound(s->def, chunk_bytes));
		} else {
			s->out_cap = pp_shard_align_up(chunk_bytes);
		}
		s->record_bytes = w->record_bytes;
		s->label_bytes = w->label_bytes;
		s->records_per_chunk = w->records_per_chunk;
		s->v2 = w->version == PP_SHARD_VERSION_RECORDS;
		if (s->v2) {
			s->out_cap = 0;
			continue;
		}
		s->raw = pp_malloc(chunk_bytes);
		s->out = pp_malloc(s->out_cap);
		if (s->raw == NULL || s->out == NULL)
			return -ENOMEM;
	}
	return 0;
}

/* Version 2's layout, decoder and record bound; -EINVAL with a message (not naming the path). */
static int config_records(struct pp_shard_writer *w, const struct pp_shard_writer_config *cfg)
{
	const char *decoder = cfg->decoder != NULL ? cfg->decoder : "raw";
	uint32_t max_record = cfg->max_record_bytes != 0 ? cfg->max_record_bytes
							 : PP_SHARD_DEFAULT_MAX_RECORD;

	if (pp_layout_check(cfg->layout) < 0)
		return -EINVAL;
	if (!pp_name_ok(decoder, PP_SHARD_DECODER_MAX))
		return pp_error(-EINVAL, "decoder name \"%.40s\" is not 1..%d letters, digits, '_', "
				"'.' or '-'", decoder, PP_SHARD_DECODER_MAX);
	if (max_record > PP_SHARD_MAX_SAMPLE_BYTES)
		return pp_error(-EINVAL, "records of at most %u bytes, expected at most %zu",
				max_record, PP_SHARD_MAX_SAMPLE_BYTES);
	w->layout = *cfg->layout;
	snprintf(w->decoder, sizeof(w->decoder), "%s", decoder);
	w->max_record = max_record;
	w->info.dtype = w->layout.fields[0].dtype;
	w->info.ndim = w->layout.fields[0].ndim;
	memcpy(w->info.shape, w->layout.fields[0].shape, sizeof(w->info.shape));
	w->info.sample_bytes = pp_field_bytes(&w->layout.fields[0]);
	return 0;
}

PP_API int pp_shard_writer_create(const char *path, const struct pp_shard_writer_config *cfg,
				  struct pp_shard_writer **w_p)
{
	struct pp_shard_writer *w;
	int ret;

	if (path == NULL || cfg == NULL || cfg->info == NULL || w_p == NULL)
		return pp_error(-EINVAL, "pp_shard_writer_create: path, cfg, cfg->info and w_p must "
				"not be NULL");
	if (cfg->level < 0 || cfg->level > 9)
		return pp_error(-EINVAL, "%s: compression level %d, expected 0 (stored) to 9", path,
				cfg->level);
	if (cfg->threads > PP_SHARD_MAX_WRITER_THREADS)
		return pp_error(-EINVAL, "%s: %u threads, expected at most %u", path, cfg->threads,
				PP_SHARD_MAX_WRITER_THREADS);
	w = pp_calloc(1, sizeof(*w));
	if (w == NULL)
		return pp_error(-ENOMEM, "%s: no memory", path);
	w->fd = -1;
	w->faults = pp_fault_thread;
	if (w->faults == NULL && getenv("PP_FAULTS") != NULL) {
		w->env_faults.stall_fd[0] = w->env_faults.stall_fd[1] = -1;
		if ((ret = pp_fault_parse(&w->env_faults, getenv("PP_FAULTS"))) < 0)
			goto err_free;
		w->faults = &w->env_faults;
	}
	w->info = *cfg->info;
	w->info.count = 0;
	w->version = cfg->layout != NULL ? PP_SHARD_VERSION_RECORDS : PP_SHARD_VERSION;
	ret = w->version == PP_SHARD_VERSION ? pp_sample_info_finish(&w->info)
					     : config_records(w, cfg);
	if (ret < 0) {
		ret = pp_error(ret, "%s: %s", path, pp_last_error());
		goto err_free;
	}
	if (w->info.label_kind == PP_LABEL_CLASS) {
		if (w->info.num_classes < 1 || w->info.num_classes > INT32_MAX) {
			ret = pp_error(-EINVAL, "%s: %u classes, expected 1..%d", path,
				       w->info.num_classes, INT32_MAX);
			goto err_free;
		}
		w->label_bytes = sizeof(int32_t);
	} else if (w->info.label_kind == PP_LABEL_NONE) {
		w->info.num_classes = 0;
	} else {
		ret = pp_error(-EINVAL, "%s: unknown label kind %d", path, (int)w->info.label_kind);
		goto err_free;
	}
	if (w->version == PP_SHARD_VERSION_RECORDS &&
	    w->layout.nfields + (w->label_bytes != 0) > PP_MAX_FIELDS) {
		ret = pp_error(-EINVAL, "%s: %u fields and the labels, expected at most %d fields "
			       "in all", path, w->layout.nfields, PP_MAX_FIELDS);
		goto err_free;
	}
	if (w->version == PP_SHARD_VERSION_RECORDS && w->label_bytes != 0 &&
	    pp_layout_find(&w->layout, "labels") >= 0) {
		ret = pp_error(-EINVAL, "%s: a field named \"labels\" in a shard with labels, which "
			       "adds that field itself", path);
		goto err_free;
	}
	w->records_per_chunk = cfg->records_per_chunk != 0 ? cfg->records_per_chunk
							    : PP_SHARD_DEFAULT_RECORDS_PER_CHUNK;
	w->record_bytes = w->label_bytes + (w->version == PP_SHARD_VERSION ? w->info.sample_bytes
									   : sizeof(uint32_t));
	if ((w->version == PP_SHARD_VERSION && w->info.sample_bytes > PP_SHARD_MAX_SAMPLE_BYTES) ||
	    (uint64_t)w->records_per_chunk * w->record_bytes > PP_SHARD_MAX_RAW) {
		ret = pp_error(-EINVAL, "%s: %u records of %zu bytes make a chunk larger than 4 GiB",
			       path, w->records_per_chunk, w->record_bytes);
		goto err_free;
	}
	w->compress = cfg->level > 0;
	w->nslots = w->compress && cfg->threads > 1 ? cfg->threads : 1;
	ret = alloc_slots(w, path, cfg->level);
	if (ret == -EINVAL)
		goto err_free;
	w->path = strdup(path);
	if (ret >= 0 && w->path != NULL && (ret = pp_replace_target(path, &w->target)) < 0)
		goto err_free;
	if (ret < 0 || w->path == NULL || asprintf(&w->tmp_path, "%s.tmp-XXXXXX", w->target) < 0) {
		w->tmp_path = NULL;
		ret = pp_error(-ENOMEM, "%s: no memory for %u chunks of %u records of %zu bytes",
			       path, w->nslots, w->records_per_chunk, w->record_bytes);
		goto err_free;
	}
	w->fd = pp_staged_create(w->target, w->tmp_path, strlen(w->tmp_path) + 1);
	if (w->fd < 0) {
		ret = pp_error(-errno, "%s: cannot create: %s", w->tmp_path, strerror(errno));
		goto err_free;
	}
	if (fchmod(w->fd, 0644) != 0) {
		ret = pp_error(-errno, "%s: cannot set its mode: %s", w->tmp_path, strerror(errno));
		goto err_unlink;
	}
	w->offset = PP_SHARD_ALIGN;
	*w_p = w;
	return 0;

err_unlink:
	close(w->fd);
	unlink(w->tmp_path);
err_free:
	free(w->tmp_path);
	free(w->target);
	free(w->path);
	if (w->slots != NULL)
		free_slots(w);
	free(w);
	return ret;
}

/* Compresses or stores one slot's records into its out buffer, zero padded. */
static int compress_slot(struct chunk_slot *s)
{
	size_t raw_size = s->raw_size, padded;

	/* A short last chunk: its labels block shrinks to its records (version 1). */
	if (!s->v2 && s->records < s->records_per_chunk && s->label_bytes != 0)
		memmove(s->raw + (size_t)s->records * s->label_bytes,
			s->raw + (size_t)s->records_per_chunk * s->label_bytes,
			(size_t)s->records * (s->record_bytes - s->label_bytes));
	if (s->def != NULL) {
		int ret = pp_deflate(s->def, s->raw, raw_size, s->out, s->out_cap, &s->stored);

		if (ret < 0)
			return ret;
	} else {
		memcpy(s->out, s->raw, raw_size);
		s->stored = raw_size;
	}
	padded = (size_t)pp_shard_align_up(s->stored);
	memset(s->out + s->stored, 0, padded - s->stored);
	return 0;
}

static void *compress_thread(void *arg)
{
	struct chunk_slot *s = arg;

	s->ret = compress_slot(s);
	return NULL;
}

/* Compresses slots 0..n-1 at once, slot 0 in the calling thread. */
static void compress_slots(struct pp_shard_writer *w, uint32_t n)
{
	pthread_t threads[PP_SHARD_MAX_WRITER_THREADS];
	bool started[PP_SHARD_MAX_WRITER_THREADS] = {false};

	for (uint32_t k = 1; k < n; k++)
		started[k] = pp_thread_create(&threads[k], compress_thread, &w->slots[k]) == 0;
	w->slots[0].ret = compress_slot(&w->slots[0]);
	for (uint32_t k = 1; k < n; k++) {
		if (started[k])
			pthread_join(threads[k], NULL);
		else
			w->slots[k].ret = compress_slot(&w->slots[k]);
	}
}

/*
 * Returns buf grown to hold 'need' elements of 'elem' bytes (its capacity
 * *cap_p doubled until it does, and updated), or NULL when out of memory
 * (buf and *cap_p left as they were).
 */
static void *grow(void *buf, size_t *cap_p, size_t need, size_t elem)
{
	size_t cap = PP_MAX(*cap_p, 64);
	void *q;

	if (need <= *cap_p)
		return buf;
	while (cap < need)
		cap *= 2;
	q = pp_realloc(buf, cap * elem);
	if (q != NULL)
		*cap_p = cap;
	return q;
}

/*
 * Version 2: lays a slot's records out as the decoded chunk (labels, ENDs,
 * bytes; shard_format.h) in s->raw, and sizes s->out for its stored bytes.
 */
static int assemble_slot(struct pp_shard_writer *w, struct chunk_slot *s)
{
	size_t table = (size_t)s->records * w->label_bytes, area = table + 4 * (size_t)s->records;
	size_t out_need;
	void *p;

	if (s->records == 0)
		return 0;
	s->raw_size = area + s->bytes_len;
	out_need = pp_shard_align_up(s->def != NULL ? pp_deflate_bound(s->def, s->raw_size)
						    : s->raw_size);
	p = grow(s->raw, &s->raw_cap, s->raw_size, 1);
	if (p == NULL)
		return pp_error(-ENOMEM, "%s: no memory for a chunk of %zu bytes", w->path,
				s->raw_size);
	s->raw = p;
	p = grow(s->out, &s->out_cap, out_need, 1);
	if (p == NULL)
		return pp_error(-ENOMEM, "%s: no memory for a chunk of %zu bytes", w->path,
				out_need);
	s->out = p;
	for (uint32_t r = 0; r < s->records; r++) {
		if (w->label_bytes != 0)
			pp_put_le32(s->raw + 4 * (size_t)r, s->labels[r]);
		pp_put_le32(s->raw + table + 4 * (size_t)r, s->ends[r]);
	}
	if (s->bytes_len > 0)
		memcpy(s->raw + area, s->bytes, s->bytes_len);
	return 0;
}

/* Compresses the full slots (and the one being filled when 'partial'), writes them in order. */
static int flush_slots(struct pp_shard_writer *w, bool partial)
{
	uint32_t n = w->filling + (partial && w->slots[w->filling].records > 0 ? 1 : 0);
	int ret;

	if (n == 0)
		return 0;
	if (w->nchunks + n > w->chunks_cap) {
		uint64_t cap = PP_MAX(w->chunks_cap * 2, w->nchunks + n + 64);
		void *p = pp_realloc(w->chunks, cap * sizeof(*w->chunks));

		if (p == NULL)
			return pp_error(-ENOMEM, "%s: no memory for the chunk index", w->path);
		w->chunks = p;
		w->chunks_cap = cap;
	}
	for (uint32_t k = 0; k < n; k++) {
		ret = w->version == PP_SHARD_VERSION ? 0 : assemble_slot(w, &w->slots[k]);
		if (ret < 0)
			return ret;
		if (w->version == PP_SHARD_VERSION)
			w->slots[k].raw_size = (size_t)w->slots[k].records * w->record_bytes;
	}
	compress_slots(w, n);
	for (uint32_t k = 0; k < n; k++) {
		struct chunk_slot *s = &w->slots[k];
		struct pp_shard_chunk_info *c = &w->chunks[w->nchunks];
		size_t padded = (size_t)pp_shard_align_up(s->stored);

		if (s->ret < 0)
			return pp_error(s->ret, "%s: chunk %llu: compression failed", w->path,
					(unsigned long long)w->nchunks);
		ret = write_full(w, s->out, padded, w->offset);
		if (ret < 0)
			return ret;
		c->offset = w->offset;
		c->stored_size = (uint32_t)s->stored;
		c->raw_size = (uint32_t)s->raw_size;
		c->records = s->records;
		c->crc32 = pp_crc32(0, s->out, s->stored);
		c->first_record = w->written_records;
		w->written_records += s->records;
		w->nchunks++;
		w->offset += padded;
		s->records = 0;
		s->bytes_len = 0;
	}
	w->filling = 0;
	return 0;
}

PP_API int pp_shard_writer_add(struct pp_shard_writer *w, const void *samples,
			       const int32_t *labels, uint64_t count)
{
	const uint8_t *src = samples;
	size_t sb = w->info.sample_bytes;

	if (w->error != 0)
		return pp_error(w->error, "%s: an earlier write failed", w->path);
	if (w->finished)
		return pp_error(-EINVAL, "%s: already finished", w->path);
	if (w->version != PP_SHARD_VERSION)
		return pp_error(-EINVAL, "%s: a version %u shard takes records of any length: add "
				"them with pp_shard_writer_add_record()", w->path, w->version);
	if (w->label_bytes != 0 && labels == NULL && count > 0)
		return pp_error(-EINVAL, "%s: the shard has labels, none given", w->path);
	if (labels != NULL)
		for (uint64_t k = 0; k < count && w->label_bytes != 0; k++)
			if (labels[k] < 0 || (uint32_t)labels[k] >= w->info.num_classes)
				return pp_error(-EINVAL, "%s: label %d of record %llu, expected 0..%u",
						w->path, labels[k],
						(unsigned long long)(w->info.count + k),
						w->info.num_classes - 1);
	while (count > 0) {
		struct chunk_slot *s = &w->slots[w->filling];
		uint32_t n = (uint32_t)PP_MIN(count, (uint64_t)(w->records_per_chunk - s->records));
		uint8_t *lab = s->raw + (size_t)s->records * w->label_bytes;
		uint8_t *dst = s->raw + (size_t)w->records_per_chunk * w->label_bytes;

		/* The labels block is sized for a full chunk while filling; a
		 * short last chunk is compacted when it is compressed. */
		for (uint32_t k = 0; k < n && w->label_bytes != 0; k++)
			pp_put_le32(lab + 4 * (size_t)k, (uint32_t)labels[k]);
		memcpy(dst + (size_t)s->records * sb, src, (size_t)n * sb);
		s->records += n;
		w->info.count += n;
		src += (size_t)n * sb;
		if (labels != NULL)
			labels += n;
		count -= n;
		if (s->records == w->records_per_chunk && ++w->filling == w->nslots) {
			int ret = flush_slots(w, false);

			if (ret < 0) {
				w->error = ret;
				return ret;
			}
		}
	}
	return 0;
}

/* Closes the slot being filled; flushes the slots once all are full. */
static int close_slot(struct pp_shard_writer *w)
{
	int ret;

	if (++w->filling < w->nslots)
		return 0;
	ret = flush_slots(w, false);
	if (ret < 0)
		w->error = ret;
	return ret;
}

PP_API int pp_shard_writer_add_record(struct pp_shard_writer *w, const void *record, size_t len,
				      int32_t label)
{
	struct chunk_slot *s;
	size_t need;
	int ret;

	if (w->error != 0)
		return pp_error(w->error, "%s: an earlier write failed", w->path);
	if (w->finished)
		return pp_error(-EINVAL, "%s: already finished", w->path);
	if (w->version != PP_SHARD_VERSION_RECORDS)
		return pp_error(-EINVAL, "%s: a version %u shard takes fixed-size samples: add them "
				"with pp_shard_writer_add(), or give a layout to write version 2",
				w->path, w->version);
	if (len > w->max_record)
		return pp_error(-EINVAL, "%s: record %llu of %zu bytes, the shard's bound is %u",
				w->path, (unsigned long long)w->info.count, len, w->max_record);
	if (record == NULL && len > 0)
		return pp_error(-EINVAL, "%s: record %llu: %zu bytes at NULL", w->path,
				(unsigned long long)w->info.count, len);
	if (w->label_bytes != 0 && (label < 0 || (uint32_t)label >= w->info.num_classes))
		return pp_error(-EINVAL, "%s: label %d of record %llu, expected 0..%u", w->path, label,
				(unsigned long long)w->info.count, w->info.num_classes - 1);
	s = &w->slots[w->filling];
	/* A chunk closes before a record that would take it past its target size. */
	if (s->records > 0 && (size_t)(s->records + 1) * w->record_bytes + s->bytes_len + len >
			      PP_SHARD_CHUNK_TARGET) {
		ret = close_slot(w);
		if (ret < 0)
			return ret;
		s = &w->slots[w->filling];
	}
	need = (size_t)s->records + 1;
	if (need > s->meta_cap) {
		size_t cap = s->meta_cap;
		void *ends = grow(s->ends, &cap, need, 4), *labels;

		if (ends != NULL)
			s->ends = ends;
		cap = s->meta_cap;
		labels = ends != NULL ? grow(s->labels, &cap, need, 4) : NULL;
		if (labels == NULL)
			return pp_error(-ENOMEM, "%s: no memory for record %llu", w->path,
					(unsigned long long)w->info.count);
		s->labels = labels;
		s->meta_cap = cap;
	}
	if (s->bytes_len + len > s->bytes_cap) {
		void *p = grow(s->bytes, &s->bytes_cap, s->bytes_len + len, 1);

		if (p == NULL)
			return pp_error(-ENOMEM, "%s: no memory for record %llu of %zu bytes",
					w->path, (unsigned long long)w->info.count, len);
		s->bytes = p;
	}
	if (len > 0)
		memcpy(s->bytes + s->bytes_len, record, len);
	s->bytes_len += len;
	s->labels[s->records] = w->label_bytes != 0 ? (uint32_t)label : 0;
	s->ends[s->records] = (uint32_t)s->bytes_len;
	s->records++;
	w->info.count++;
	if (s->records == w->records_per_chunk)
		return close_slot(w);
	return 0;
}

/* Version 2's record bound, decoder, layout and CRC, after the fields of version 1. */
static void put_header_v2(const struct pp_shard_writer *w, uint8_t *header)
{
	size_t len = strlen(w->decoder);

	pp_put_le32(header + PP_SH2_MAX_RECORD, w->max_record);
	pp_put_le32(header + PP_SH2_DECODER_LEN, (uint32_t)len);
	memcpy(header + PP_SH2_DECODER, w->decoder, len);
	pp_put_le32(header + PP_SH2_NFIELDS, w->layout.nfields);
	for (uint32_t f = 0; f < w->layout.nfields; f++) {
		const struct pp_field *fd = &w->layout.fields[f];
		uint8_t *e = header + PP_SH2_FIELDS + (size_t)f * PP_SF_SIZE;

		memcpy(e + PP_SF_NAME, fd->name, strnlen(fd->name, PP_FIELD_NAME_MAX));
		pp_put_le32(e + PP_SF_DTYPE, (uint32_t)fd->dtype);
		pp_put_le32(e + PP_SF_NDIM, fd->ndim);
		for (uint32_t d = 0; d < fd->ndim; d++)
			pp_put_le32(e + PP_SF_SHAPE + 4 * d, fd->shape[d]);
		pp_put_le32(e + PP_SF_NORMALIZE, fd->normalize ? 1 : 0);
	}
	pp_put_le32(header + PP_SH2_CRC, pp_crc32(0, header, PP_SH2_CRC));
}

PP_API int pp_shard_writer_finish(struct pp_shard_writer *w)
{
	uint8_t *index, *header, trailer[PP_ST_SIZE];
	size_t index_len;
	int ret;

	if (w->error != 0)
		return pp_error(w->error, "%s: an earlier write failed", w->path);
	if (w->finished)
		return pp_error(-EINVAL, "%s: already finished", w->path);
	ret = flush_slots(w, true);
	if (ret < 0)
		goto err_mark_failed;
	index_len = (size_t)w->nchunks * PP_SI_SIZE;
	index = pp_calloc(1, index_len + PP_SHARD_ALIGN);
	if (index == NULL) {
		ret = pp_error(-ENOMEM, "%s: no memory for the index", w->path);
		goto err_mark_failed;
	}
	header = index + index_len;
	for (uint64_t i = 0; i < w->nchunks; i++) {
		uint8_t *e = index + i * PP_SI_SIZE;
		const struct pp_shard_chunk_info *c = &w->chunks[i];

		pp_put_le64(e + PP_SI_OFFSET, c->offset);
		pp_put_le32(e + PP_SI_STORED, c->stored_size);
		pp_put_le32(e + PP_SI_RAW, c->raw_size);
		pp_put_le32(e + PP_SI_RECORDS, c->records);
		pp_put_le32(e + PP_SI_CRC, c->crc32);
		pp_put_le64(e + PP_SI_FIRST, c->first_record);
	}
	memcpy(trailer + PP_ST_MAGIC, PP_SHARD_END_MAGIC, 8);
	pp_put_le64(trailer + PP_ST_INDEX_OFFSET, w->offset);
	pp_put_le64(trailer + PP_ST_CHUNKS, w->nchunks);
	pp_put_le64(trailer + PP_ST_FILE_SIZE, w->offset + index_len + PP_ST_SIZE);
	pp_put_le32(trailer + PP_ST_INDEX_CRC, pp_crc32(0, index, index_len));
	pp_put_le32(trailer + PP_ST_CRC, pp_crc32(0, trailer, PP_ST_CRC));

	memcpy(header + PP_SH_MAGIC, PP_SHARD_MAGIC, 8);
	pp_put_le32(header + PP_SH_VERSION, w->version);
	if (w->version == PP_SHARD_VERSION) {
		pp_put_le32(header + PP_SH_DTYPE, (uint32_t)w->info.dtype);
		pp_put_le32(header + PP_SH_NDIM, w->info.ndim);
		for (int d = 0; d < PP_MAX_DIMS; d++)
			pp_put_le32(header + PP_SH_SHAPE + 4 * d, w->info.shape[d]);
	}
	pp_put_le32(header + PP_SH_LABEL_KIND, (uint32_t)w->info.label_kind);
	pp_put_le32(header + PP_SH_NUM_CLASSES, w->info.num_classes);
	pp_put_le32(header + PP_SH_RECORDS_PER_CHUNK, w->records_per_chunk);
	pp_put_le64(header + PP_SH_RECORDS, w->info.count);
	pp_put_le64(header + PP_SH_CHUNKS, w->nchunks);
	pp_put_le32(header + PP_SH_COMPRESSION, w->compress ? PP_SHARD_COMPRESSION_ZLIB
							   : PP_SHARD_COMPRESSION_STORED);
	if (w->version == PP_SHARD_VERSION)
		pp_put_le32(header + PP_SH_CRC, pp_crc32(0, header, PP_SH_CRC));
	else
		put_header_v2(w, header);

	ret = write_full(w, index, index_len, w->offset);
	if (ret == 0)
		ret = write_full(w, trailer, PP_ST_SIZE, w->offset + index_len);
	if (ret == 0)
		ret = write_full(w, header, PP_SHARD_ALIGN, 0);
	free(index);
	if (ret < 0)
		goto err_mark_failed;
	if (fsync(w->fd) != 0) {
		ret = pp_error(-errno, "%s: fsync failed: %s", w->tmp_path, strerror(errno));
		goto err_mark_failed;
	}
	/* renamed before its close: until then its lock says a writer lives (pp_staged_create()) */
	if (rename(w->tmp_path, w->target) != 0) {
		ret = pp_error(-errno, "%s: cannot rename %s into place: %s", w->path, w->tmp_path,
			       strerror(errno));
		goto err_mark_failed;
	}
	w->finished = true;
	/* what it wrote is on disk (fsync), and in place */
	close(w->fd);
	w->fd = -1;
	return 0;

err_mark_failed:
	w->error = ret;
	return ret;
}

PP_API void pp_shard_writer_destroy(struct pp_shard_writer *w)
{
	if (w == NULL)
		return;
	if (w->fd >= 0)
		close(w->fd);
	if (!w->finished)
		unlink(w->tmp_path);
	free_slots(w);
	free(w->chunks);
	free(w->tmp_path);
	free(w->target);
	free(w->path);
	free(w);
}
