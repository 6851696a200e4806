/*
 * images/folder.c: torchvision's ImageFolder as a source: ROOT/CLASS/.../FILE
 * listed once (classes sorted by name; in each, every folder under it in
 * the order of their paths, and in each folder its files by name, as
 * torchvision walks them, names in Python's order), each sample's file read
 * whole by the worker that loads it (pread) and decoded there with the
 * worker's own JPEG state.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fault.h"
#include "common/common_impl.h"
#include "images/jpeg_impl.h"

/* The largest file read: far above any JPEG of max_pixels, far below memory. */
#define FOLDER_MAX_FILE (256u << 20)

struct pp_image_folder {
	char *root;                  /* as given */
	struct pp_jpeg_decoder *dec;
	struct pp_source *src;
	uint32_t nclasses;
	char **classes;              /* [nclasses] */
	uint64_t count;
	char **paths;                /* [count] */
	int32_t *labels;             /* [count] */
};

struct folder_worker {
	struct pp_jpeg_worker *jw;
	uint8_t *buf;
	size_t cap;
};

/*
 * The next character of a name as Python sees it (os.fsdecode(): UTF-8,
 * undecodable bytes escaped): a well-formed UTF-8 sequence is its code
 * point; any other byte, one at a time, is U+DC00 + the byte (PEP 383's
 * surrogateescape, which turns each byte of an ill-formed sequence alone).
 * Moves *p past what it read.
 */
static uint32_t fs_char(const unsigned char **p)
{
	const unsigned char *s = *p;
	uint32_t c = s[0], min;
	unsigned more;

	if (c < 0x80) {
		*p = s + 1;
		return c;
	}
	if (c >= 0xc2 && c <= 0xdf)
		more = 1, c &= 0x1f, min = 0x80;
	else if (c >= 0xe0 && c <= 0xef)
		more = 2, c &= 0x0f, min = 0x800;
	else if (c >= 0xf0 && c <= 0xf4)
		more = 3, c &= 0x07, min = 0x10000;
	else
		goto escaped;
	/* a NUL ends the loop as any byte that continues nothing does */
	for (unsigned i = 1; i <= more; i++) {
		if ((s[i] & 0xc0) != 0x80)
			goto escaped;
		c = c << 6 | (s[i] & 0x3f);
	}
	/* overlong, a surrogate, or past U+10FFFF: ill-formed */
	if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
		goto escaped;
	*p = s + 1 + more;
	return c;
escaped:
	*p = s + 1;
	return 0xdc00u + s[0];
}

/*
 * Names in the order of Python's sorted() on them, which torchvision's
 * ImageFolder uses for classes, folders and files: by code point.  For
 * names that are UTF-8 this is strcmp()'s order; a byte that is not (a
 * Latin-1 name) sorts after U+D7FF and before U+E000, where strcmp()
 * places it by its raw value among UTF-8's lead bytes (0x80..0xBF before
 * every character of two bytes or more).
 */
static int cmp_fsname(const char *a, const char *b)
{
	const unsigned char *pa = (const unsigned char *)a, *pb = (const unsigned char *)b;

	while (*pa != 0 && *pb != 0) {
		uint32_t ca = fs_char(&pa), cb = fs_char(&pb);

		if (ca != cb)
			return ca < cb ? -1 : 1;
	}
	return (*pa != 0) - (*pb != 0);
}

static int cmp_str(const void *a, const void *b)
{
	return cmp_fsname(*(char *const *)a, *(char *const *)b);
}

static bool is_jpeg_name(const char *name)
{
	const char *dot = strrchr(name, '.');
	return dot != NULL && dot != name && (strcasecmp(dot, ".jpg") == 0 ||
					      strcasecmp(dot, ".jpeg") == 0);
}

/* Appends s to the growing list *v of *n (capacity *cap).  Returns 0 or -ENOMEM. */
static int push(char ***v, size_t *n, size_t *cap, char *s)
{
	if (s == NULL)
		return -ENOMEM;
	if (*n == *cap) {
		size_t nc = *cap ? *cap * 2 : 64;
		char **nv = realloc(*v, nc * sizeof(**v));
		if (nv == NULL) {
			free(s);
			return -ENOMEM;
		}
		*v = nv;
		*cap = nc;
	}
	(*v)[(*n)++] = s;
	return 0;
}

/* Lists the entries of dir that are directories (want_dirs) or JPEG files, sorted. */
static int list_dir(const char *dir, bool want_dirs, char ***names_p, size_t *n_p)
{
	DIR *dp = opendir(dir);
	struct dirent *e;
	char **v = NULL;
	size_t n = 0, cap = 0;
	int ret = 0;

	if (dp == NULL) {
		ret = -errno;
		return pp_error(ret, "%s: cannot open the directory: %s", dir, pp_strerror(ret));
	}
	while ((e = readdir(dp)) != NULL) {
		char path[4096];
		struct stat st;
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		if (!want_dirs && !is_jpeg_name(e->d_name))
			continue;
		if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) >= sizeof(path)) {
			ret = pp_error(-ENAMETOOLONG, "%s/%s: a path too long", dir, e->d_name);
			break;
		}
		if (stat(path, &st) != 0 || S_ISDIR(st.st_mode) != want_dirs ||
		    (!want_dirs && !S_ISREG(st.st_mode)))
			continue;
		if ((ret = push(&v, &n, &cap, strdup(want_dirs ? e->d_name : path))) < 0) {
			ret = pp_error(ret, "%s: no memory to list it", dir);
			break;
		}
	}
	closedir(dp);
	if (ret < 0) {
		for (size_t i = 0; i < n; i++)
			free(v[i]);
		free(v);
		return ret;
	}
	if (n > 1)
		qsort(v, n, sizeof(*v), cmp_str);
	*names_p = v;
	*n_p = n;
	return 0;
}

/* A folder under a class, while the class is walked. */
struct walk_dir {
	char *path;
	size_t parent;      /* index of the folder it is in (itself for the class's) */
	dev_t dev;
	ino_t ino;
};

/*
 * The JPEG files of the class folder 'dir', as torchvision's ImageFolder
 * finds them (sorted(os.walk(dir, followlinks=True)), then each folder's
 * files sorted): every folder under it, links followed, in the order of
 * their paths, and in each its files by name.  A folder reached twice
 * through links is listed twice, as torchvision lists it; one that is its
 * own ancestor (a link loop, which torchvision walks until the path is
 * too long) is refused.
 */
static int list_class(const char *dir, char ***files_p, size_t *n_p)
{
	struct walk_dir *dirs = NULL;
	char **paths = NULL, **files = NULL;
	size_t ndirs = 0, dcap = 0, nfiles = 0, fcap = 0;
	int ret = 0;

	/* Breadth first: dirs[] grows as it is read. */
	for (size_t i = 0; ret == 0 && (i == 0 || i < ndirs); i++) {
		char **subs;
		size_t nsubs;
		struct stat st;

		if (i == 0) {
			if ((dirs = malloc(16 * sizeof(*dirs))) == NULL ||
			    (dirs[0].path = strdup(dir)) == NULL) {
				ret = pp_error(-ENOMEM, "%s: no memory to list it", dir);
				break;
			}
			dirs[0].parent = 0;
			dcap = 16;
			ndirs = 1;
		}
		if (stat(dirs[i].path, &st) != 0) {
			ret = pp_error(-errno, "%s: %s", dirs[i].path, strerror(errno));
			break;
		}
		dirs[i].dev = st.st_dev;
		dirs[i].ino = st.st_ino;
		for (size_t k = i; k != 0 && ret == 0;) {
			k = dirs[k].parent;
			if (dirs[k].dev == st.st_dev && dirs[k].ino == st.st_ino)
				ret = pp_error(-ELOOP, "%s: the folder %s, which holds it (a link loop): "
					       "its images would be listed without end", dirs[i].path,
					       dirs[k].path);
		}
		if (ret < 0 || (ret = list_dir(dirs[i].path, true, &subs, &nsubs)) < 0)
			break;
		for (size_t k = 0; k < nsubs; k++) {
			char *path = NULL;

			if (ret == 0 && ndirs == dcap) {
				struct walk_dir *nd = realloc(dirs, 2 * dcap * sizeof(*dirs));

				if (nd == NULL)
					ret = pp_error(-ENOMEM, "%s: no memory to list it", dir);
				else
					dirs = nd, dcap *= 2;
			}
			if (ret == 0 && asprintf(&path, "%s/%s", dirs[i].path, subs[k]) < 0)
				ret = pp_error(-ENOMEM, "%s: no memory to list it", dir);
			if (ret == 0)
				dirs[ndirs++] = (struct walk_dir){ .path = path, .parent = i };
			free(subs[k]);
		}
		free(subs);
	}
	if (ret == 0 && (paths = malloc(ndirs * sizeof(*paths))) == NULL)
		ret = pp_error(-ENOMEM, "%s: no memory to list it", dir);
	for (size_t i = 0; ret == 0 && i < ndirs; i++)
		paths[i] = dirs[i].path;
	if (ret == 0 && ndirs > 1)
		qsort(paths, ndirs, sizeof(*paths), cmp_str);
	for (size_t i = 0; ret == 0 && i < ndirs; i++) {
		char **names;
		size_t nnames;

		if ((ret = list_dir(paths[i], false, &names, &nnames)) < 0)
			break;
		for (size_t k = 0; k < nnames; k++) {
			if (ret == 0 && (ret = push(&files, &nfiles, &fcap, names[k])) < 0)
				ret = pp_error(ret, "%s: no memory to list it", dir);
			else if (ret < 0)
				free(names[k]);
		}
		free(names);
	}
	for (size_t i = 0; i < ndirs; i++)
		free(dirs[i].path);
	free(dirs);
	free(paths);
	if (ret < 0) {
		for (size_t i = 0; i < nfiles; i++)
			free(files[i]);
		free(files);
		return ret;
	}
	*files_p = files;
	*n_p = nfiles;
	return 0;
}

static int folder_worker_open(void *ctx, void **wctx_p)
{
	struct pp_image_folder *f = ctx;
	struct folder_worker *w = pp_calloc(1, sizeof(*w));
	int ret;

	if (w == NULL)
		return pp_error(-ENOMEM, "images: no memory for a worker");
	if ((ret = pp_jpeg_worker_create(f->dec, &w->jw)) < 0) {
		free(w);
		return ret;
	}
	*wctx_p = w;
	return 0;
}

static void folder_worker_close(void *ctx, void *wctx)
{
	struct folder_worker *w = wctx;

	(void)ctx;
	if (w == NULL)
		return;
	pp_jpeg_worker_destroy(w->jw);
	free(w->buf);
	free(w);
}

/* Reads the whole file into the worker's buffer. */
static int read_file(struct folder_worker *w, const char *path, size_t *len_p)
{
	struct stat st;
	size_t done = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC), ret = 0;

	if (fd < 0) {
		ret = -errno;
		return pp_set_error(ret, "%s: cannot open: %s", path, pp_strerror(ret));
	}
	if (fstat(fd, &st) != 0) {
		ret = -errno;
		ret = pp_set_error(ret, "%s: cannot stat: %s", path, pp_strerror(ret));
		goto out;
	}
	if ((uint64_t)st.st_size > FOLDER_MAX_FILE) {
		ret = pp_set_error(-EFBIG, "%s: a file of %llu bytes, over the %u MiB an image may "
				   "take", path, (unsigned long long)st.st_size, FOLDER_MAX_FILE >> 20);
		goto out;
	}
	if ((size_t)st.st_size > w->cap) {
		size_t nc = (size_t)st.st_size;
		uint8_t *nb = pp_malloc(nc ? nc : 1);
		if (nb == NULL) {
			ret = pp_set_error(-ENOMEM, "%s: no memory for its %zu bytes", path, nc);
			goto out;
		}
		free(w->buf);
		w->buf = nb;
		w->cap = nc;
	}
	while (done < (size_t)st.st_size) {
		ssize_t r = pread(fd, w->buf + done, (size_t)st.st_size - done, (off_t)done);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			ret = r < 0 ? -errno : -EIO;
			ret = pp_set_error(ret, "%s: read failed at byte %zu: %s", path, done,
					   r < 0 ? pp_strerror(ret) : "the file shrank");
			goto out;
		}
		done += (size_t)r;
	}
	*len_p = done;
out:
	close(fd);
	return ret;
}

static int folder_read(void *ctx, void *wctx, const struct pp_sample *s)
{
	struct pp_image_folder *f = ctx;
	struct folder_worker *w = wctx;
	const char *path = f->paths[s->index];
	size_t len = 0;
	int ret;

	if ((ret = read_file(w, path, &len)) < 0)
		return ret;
	ret = pp_jpeg_decode_with(f->dec, w->jw, w->buf, len, s->rng, s->fields[0]);
	if (ret < 0) {
		char msg[512];
		snprintf(msg, sizeof(msg), "%s", pp_last_error());
		return pp_set_error(ret, "%s: %s", path, msg);
	}
	*(int32_t *)s->fields[1] = f->labels[s->index];
	return 0;
}

static const struct pp_source_ops folder_ops = {
	.read = folder_read,
	.worker_open = folder_worker_open,
	.worker_close = folder_worker_close,
};

PP_API void pp_image_folder_close(struct pp_image_folder *f)
{
	if (f == NULL)
		return;
	pp_source_destroy(f->src);
	pp_jpeg_decoder_destroy(f->dec);
	for (uint32_t c = 0; c < f->nclasses; c++)
		free(f->classes[c]);
	for (uint64_t i = 0; i < f->count; i++)
		free(f->paths[i]);
	free(f->classes);
	free(f->root);
	free(f->paths);
	free(f->labels);
	free(f);
}

PP_API int pp_image_folder_open(const char *root, const struct pp_jpeg_config *cfg,
				struct pp_image_folder **f_p)
{
	struct pp_image_folder *f;
	struct pp_layout lay;
	char **classes = NULL;
	size_t nclasses = 0, cap = 0;
	int ret;

	if (root == NULL || f_p == NULL)
		return pp_error(-EINVAL, "pp_image_folder_open: root and f_p must not be NULL");
	if ((ret = pp_jpeg_layout(cfg, true, &lay)) < 0)
		return ret;
	f = pp_calloc(1, sizeof(*f));
	if (f == NULL)
		return pp_error(-ENOMEM, "images: no memory");
	if ((f->root = strdup(root)) == NULL) {
		ret = pp_error(-ENOMEM, "images: no memory");
		goto err_close;
	}
	if ((ret = pp_jpeg_decoder_create(cfg, &f->dec)) < 0)
		goto err_close;
	if ((ret = list_dir(root, true, &classes, &nclasses)) < 0)
		goto err_close;
	f->classes = classes;
	f->nclasses = (uint32_t)nclasses;
	if (nclasses == 0) {
		ret = pp_error(-ENOENT, "%s: no class directories (ROOT/CLASS/*.jpg)", root);
		goto err_close;
	}
	for (uint32_t c = 0; c < f->nclasses; c++) {
		char dir[4096], **files;
		size_t nfiles;
		snprintf(dir, sizeof(dir), "%s/%s", root, classes[c]);
		if ((ret = list_class(dir, &files, &nfiles)) < 0)
			goto err_close;
		if (nfiles == 0) {
			free(files);
			ret = pp_error(-ENOENT, "%s: class \"%s\" has no .jpg or .jpeg file (torchvision's "
				       "ImageFolder refuses an empty class too)", dir, classes[c]);
			goto err_close;
		}
		for (size_t i = 0; i < nfiles; i++) {
			size_t n = f->count;
			if (ret == 0 && (ret = push(&f->paths, &n, &cap, files[i])) == 0) {
				int32_t *nl = realloc(f->labels, cap * sizeof(*nl));
				if (nl == NULL)
					ret = -ENOMEM;
				else
					f->labels = nl;
				f->count = n;
				if (ret == 0)
					f->labels[n - 1] = (int32_t)c;
			} else if (ret != 0) {
				free(files[i]);
			}
		}
		free(files);
		if (ret < 0) {
			ret = pp_error(ret, "%s: no memory to list it", dir);
			goto err_close;
		}
	}
	{
		char name[256];
		snprintf(name, sizeof(name), "images %s", root);
		struct pp_source_desc d = { .name = name, .count = f->count, .layout = &lay,
					    .num_classes = f->nclasses, .ops = &folder_ops,
					    .ctx = f };
		if ((ret = pp_source_create(&d, &f->src)) < 0)
			goto err_close;
	}
	*f_p = f;
	return 0;

err_close:
	pp_image_folder_close(f);
	return ret;
}

PP_API const struct pp_source *pp_image_folder_source(const struct pp_image_folder *f)
{
	return f->src;
}

PP_API uint64_t pp_image_folder_count(const struct pp_image_folder *f)
{
	return f->count;
}

PP_API uint32_t pp_image_folder_classes(const struct pp_image_folder *f)
{
	return f->nclasses;
}

PP_API const char *pp_image_folder_class(const struct pp_image_folder *f, uint32_t i)
{
	return i < f->nclasses ? f->classes[i] : NULL;
}

PP_API const char *pp_image_folder_path(const struct pp_image_folder *f, uint64_t i)
{
	return i < f->count ? f->paths[i] : NULL;
}

PP_API int32_t pp_image_folder_label(const struct pp_image_folder *f, uint64_t i)
{
	return i < f->count ? f->labels[i] : -1;
}

/* Folders below a class that the probe looks into, at most, and entries it reads. */
#define PROBE_DEPTH 8
#define PROBE_ENTRIES 100000

/*
 * Whether the folder 'dir' holds a JPEG file, itself or a folder under it
 * (links followed), 'depth' folders down at most.  *budget bounds the
 * entries read, for a --data given a large tree by mistake.
 */
static bool holds_jpeg(const char *dir, int depth, long *budget)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	bool found = false;

	if (d == NULL)
		return false;
	while (!found && --*budget > 0 && (e = readdir(d)) != NULL) {
		char path[4096];
		struct stat st;

		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 ||
		    (size_t)snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) >= sizeof(path) ||
		    stat(path, &st) != 0)
			continue;
		if (S_ISREG(st.st_mode) && is_jpeg_name(e->d_name))
			found = true;
		else if (S_ISDIR(st.st_mode) && depth > 0)
			found = holds_jpeg(path, depth - 1, budget);
	}
	closedir(d);
	return found;
}

/*
 * Whether a class folder of 'root' holds a JPEG, 'depth' folders below
 * the class at most; only its own files (depth 0) where the root holds a
 * file of its own (other than a hidden one): a dataset's files, not a
 * root of class folders alone, whose deeper JPEGs (samples, previews) are
 * no classes'.
 */
static bool classes_hold_jpeg(const char *root, int depth, long *budget)
{
	bool found = false;
	DIR *d;

	for (int pass = 0; pass < 2 && !found; pass++) {
		struct dirent *e;

		if ((d = opendir(root)) == NULL)
			return false;
		while (!found && --*budget > 0 && (e = readdir(d)) != NULL) {
			char path[4096];
			struct stat st;

			if (e->d_name[0] == '.' ||
			    (size_t)snprintf(path, sizeof(path), "%s/%s", root, e->d_name) >= sizeof(path) ||
			    stat(path, &st) != 0)
				continue;
			/* pass 0: a file of the root's own; pass 1: its classes' JPEGs */
			if (pass == 0 && !S_ISDIR(st.st_mode))
				depth = 0;
			else if (pass == 1 && S_ISDIR(st.st_mode))
				found = holds_jpeg(path, depth, budget);
		}
		closedir(d);
	}
	return found;
}

PP_API bool pp_image_folder_probe(const char *dir)
{
	char train[4096];
	long budget = PROBE_ENTRIES;

	if (dir == NULL || (size_t)snprintf(train, sizeof(train), "%s/train", dir) >= sizeof(train))
		return false;
	/* DIR/train/CLASS/... or DIR/CLASS/..., a class's JPEGs PROBE_DEPTH folders under it at most */
	return classes_hold_jpeg(train, PROBE_DEPTH, &budget) ||
	       classes_hold_jpeg(dir, PROBE_DEPTH, &budget);
}

PP_API int pp_image_folder_same_classes(const struct pp_image_folder *a,
					const struct pp_image_folder *b)
{
	if (a == NULL || b == NULL)
		return pp_error(-EINVAL, "pp_image_folder_same_classes: NULL folder");
	for (uint32_t c = 0; c < a->nclasses || c < b->nclasses; c++) {
		const char *ca = c < a->nclasses ? a->classes[c] : NULL;
		const char *cb = c < b->nclasses ? b->classes[c] : NULL;

		if (ca != NULL && cb != NULL && strcmp(ca, cb) == 0)
			continue;
		return pp_error(-EINVAL, "%s: its classes are not those of %s, whose labels would "
				"mean other classes here: class %u is %s%s%s there, %s%s%s here "
				"(%u classes against %u)", b->root, a->root, c, ca ? "\"" : "",
				ca ? ca : "none", ca ? "\"" : "", cb ? "\"" : "", cb ? cb : "none",
				cb ? "\"" : "", a->nclasses, b->nclasses);
	}
	return 0;
}
