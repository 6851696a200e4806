/*
 * trainer/rows.c: pinpipe-train's files of rows, --csv and --jsonl
 * (trainer/rows.h), and the rows said on the terminal.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/args.h"
#include "common/links.h"
#include "common/textout.h"
#include "pinpipe/pinpipe.h"
#include "trainer/rows.h"

static void print_row(const struct tr_row *row, int progress)
{
	if (progress < 0)
		return;
	printf("run %u epoch %u: train loss %.4f acc %.4f", row->run, row->epoch, row->train_loss,
	       row->train_acc);
	if (!isnan(row->val_acc))
		printf(", val loss %.4f acc %.4f", row->val_loss, row->val_acc);
	if (!isnan(row->test_acc))
		printf(", test loss %.4f acc %.4f", row->test_loss, row->test_acc);
	printf(", %.2f s, %.0f samples/s, waited %.3f s", row->epoch_s, row->samples_per_s,
	       row->wait_s);
	if (!isnan(row->hidden_pct))
		printf(", copy %.3f s (%.0f%% hidden), host in copy calls %.3f s", row->copy_s,
		       row->hidden_pct, row->copy_host_s);
	printf("\n");
	fflush(stdout);
}

bool tr_output_failed;

/* Writes n bytes to fd whatever signals come meanwhile; 0, or -errno. */
static int write_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/*
 * Writes one row to a file of rows, at once: a full disk shows here, not
 * at the end, and a row that did not fit whole is cut off again, so that
 * the file holds whole rows.  The row is made in memory and written with
 * write(2), which a signal (Ctrl-C's, mpirun's SIGTERM) may interrupt on a
 * pipe or a FIFO: what it left is written then, where stdio would lose it.
 * Returns 0, or -errno with the file named on stderr.
 */
static int write_row(FILE *f, bool *failed, bool shared, const char *option, const char *path,
		     const struct tr_row *row, int (*write_fn)(const struct tr_row *, FILE *))
{
	struct stat st;
	char *text = NULL;
	size_t len = 0;
	FILE *m;
	bool regular;
	int err = 0;

	if (f == NULL)
		return 0;
	/* Standard output's own file: what it holds first, then the row; never cut. */
	if (shared)
		fflush(stdout);
	regular = fflush(f) == 0 && !shared && fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode);
	if (ferror(f) || *failed)
		err = -EIO;
	m = err ? NULL : open_memstream(&text, &len);
	if (m == NULL && !err)
		err = -errno;
	if (m != NULL) {
		errno = 0;
		if (write_fn(row, m) != 0 || ferror(m))
			err = errno ? -errno : -EIO;
		if (fclose(m) != 0 && !err)
			err = -errno;
	}
	if (!err)
		err = write_all(fileno(f), text, len);
	free(text);
	if (!err)
		return 0;
	/* Cut back to whole rows, the offset with it (a file not opened for appending). */
	if (regular && (ftruncate(fileno(f), st.st_size) != 0 ||
			lseek(fileno(f), st.st_size, SEEK_SET) < 0))
		fprintf(stderr, "pinpipe-train: %s=%s: cannot cut off a partial row: %s\n", option,
			path, strerror(errno));
	fprintf(stderr, "pinpipe-train: %s=%s: cannot write: %s\n", option, path, strerror(-err));
	*failed = true;
	tr_output_failed = true;
	return err;
}

/*
 * Opens a file of rows: appended to by a resume, else emptied; written
 * through standard output's own where it is the same file (*shared_p).
 * A regular file there that holds something, and that a run which does
 * not resume would empty, is kept until the run's first row is written
 * (a full disk, a failure before it, lose nothing): the rows go to a
 * temporary file beside the one the path's links lead to, of its mode,
 * named in *staged_p and that one in *target_p (malloc'd), renamed over
 * it by commit_staged().  NULL with the file named on stderr.
 */
static FILE *rows_open(const char *option, const char *path, bool resume, bool *shared_p,
		       char **staged_p, char **target_p)
{
	char target[PATH_MAX], tmp[PATH_MAX + 16];
	struct stat st;
	FILE *f;

	*staged_p = *target_p = NULL;
	/* Another's file, one of several names, an empty one: written in place, as before. */
	if (resume || stat(path, &st) != 0 || !pp_rows_replaceable(&st) || st.st_size == 0 ||
	    !pp_rows_clash(path)) {
		f = pp_rows_fopen(path, resume ? "a+" : "w+", shared_p);
		if (f == NULL)
			fprintf(stderr, "pinpipe-train: %s=%s: cannot open: %s\n", option, path,
				strerror(errno));
		return f;
	}
	*shared_p = false;
	if (!pp_links_follow(path, target, sizeof(target))) {
		fprintf(stderr, "pinpipe-train: %s=%s: cannot follow the path: %s\n", option, path,
			strerror(errno));
		return NULL;
	}
	f = pp_rows_tmp_open(target, st.st_mode, "w+", tmp, sizeof(tmp));
	/* A file that may be written in a folder that may not: written in place, as before. */
	if (f == NULL && pp_rows_tmp_refused(errno)) {
		f = pp_rows_fopen(path, "w+", shared_p);
		if (f == NULL)
			fprintf(stderr, "pinpipe-train: %s=%s: cannot open: %s\n", option, path,
				strerror(errno));
		return f;
	}
	if (f == NULL) {
		fprintf(stderr, "pinpipe-train: %s=%s: cannot create %s beside it: %s\n", option,
			path, tmp, strerror(errno));
		return NULL;
	}
	*staged_p = strdup(tmp);
	*target_p = strdup(target);
	if (*staged_p == NULL || *target_p == NULL) {
		fprintf(stderr, "pinpipe-train: %s=%s: out of memory\n", option, path);
		fclose(f);
		unlink(tmp);
		free(*staged_p);
		free(*target_p);
		*staged_p = *target_p = NULL;
		return NULL;
	}
	return f;
}

static char *rows_read(const char *option, const char *path, FILE *f, size_t *len_p);

/*
 * Writes text[0..len), then the CSV rows of 'res' (where not NULL), over
 * the file 'target' from its start, in place, and cuts it there
 * (pp_rows_write_over(): a full disk leaves it as it was): for a file that
 * a rename cannot replace (a file mounted there) or must not (of several
 * names, another user's).  Returns the open file (its position at its
 * end), or NULL with errno set and *touched_p whether the file was
 * written at all.
 */
static FILE *rows_write_in_place(const char *target, const char *text, size_t len,
				 const struct tr_results *res, bool *touched_p)
{
	char *buf = NULL;
	size_t n = 0;
	FILE *mem = open_memstream(&buf, &n), *f = NULL;
	int fd = -1, err;

	*touched_p = false;
	if (mem == NULL)
		return NULL;
	fwrite(text, 1, len, mem);
	for (size_t i = 0; res != NULL && i < res->n; i++)
		tr_results_write_row_csv(&res->rows[i], mem);
	if (fclose(mem) == 0 && (fd = pp_rows_write_over(target, buf, n, touched_p)) >= 0 &&
	    (f = fdopen(fd, "r+")) != NULL && fseeko(f, 0, SEEK_END) == 0) {
		free(buf);
		return f;
	}
	err = errno ? errno : EIO;
	if (f != NULL)
		fclose(f);
	else if (fd >= 0)
		close(fd);
	free(buf);
	errno = err;
	return NULL;
}

/*
 * Once a row is written to the staged file of rows *f_p (rows_open()):
 * renames it over the file it replaces, its rows on disk first.  Where the
 * rename is refused (the file is mounted there, EBUSY), its rows are
 * written over that file in place, and *f_p becomes that file.  With
 * 'drop', where no row came: removes it, the earlier file kept.  0, or
 * -errno said (the file failed).
 */
static int commit_staged(FILE **f_p, const char *option, const char *path, char **staged,
			 char **target, bool *failed, bool drop)
{
	int ret = 0;

	if (*staged == NULL)
		return 0;
	if (drop) {
		unlink(*staged);
	} else if (fflush(*f_p) != 0 || fsync(fileno(*f_p)) != 0) {
		ret = -errno;
		fprintf(stderr, "pinpipe-train: %s=%s: cannot write %s: %s\n", option, path, *staged,
			strerror(-ret));
		unlink(*staged);
		*failed = true;
		tr_output_failed = true;
	} else if (rename(*staged, *target) != 0) {
		const int why = errno;
		char kept[PATH_MAX + 16];
		bool touched = false;
		size_t len;
		char *text = rows_read(option, path, *f_p, &len);
		FILE *f = text != NULL ? rows_write_in_place(*target, text, len, NULL, &touched) : NULL;
		const int err = errno;

		free(text);
		if (f != NULL) {
			/* unlinked before its close: locked until then (pp_staged_create()) */
			unlink(*staged);
			fclose(*f_p);
			*f_p = f;
			fprintf(stderr, "pinpipe-train: %s=%s: %s cannot be renamed over it (%s): its "
				"rows are written in place\n", option, path, *staged, strerror(why));
		} else {
			/* the rows so far kept where the next run's sweep leaves them */
			ret = -why;
			if (pp_rows_keep(*staged, kept, sizeof(kept)) != 0)
				snprintf(kept, sizeof(kept), "%s", *staged);
			fprintf(stderr, "pinpipe-train: %s=%s: cannot rename %s into place: %s, nor "
				"write over it%s%s%s; the rows so far are in %s\n", option, path, *staged,
				strerror(why), text != NULL || touched ? ": " : "",
				text != NULL || touched ? strerror(err) : "",
				touched ? " (it may hold part of them)" : "", kept);
			*failed = true;
			tr_output_failed = true;
		}
	}
	free(*staged);
	free(*target);
	*staged = *target = NULL;
	return ret;
}

/*
 * Writes a row to --jsonl then --csv (each that is open); with
 * 'skip_failed', a file that failed already is passed over (it said so),
 * else the first failure ends it.  Staged files (rows_open()) are renamed
 * into place once a run's row is in both, not for a failed run's row
 * ('skip_failed'): a run that trains no epoch leaves the earlier files.
 * 0, or -errno said.
 */
static int put_row(const struct tr_options *opt, struct tr_row_files *rf, const struct tr_row *row,
		   bool skip_failed)
{
	int ret = 0;

	if (rf->jsonl != NULL && !(skip_failed && (rf->jsonl_failed || ferror(rf->jsonl))))
		ret = write_row(rf->jsonl, &rf->jsonl_failed, rf->jsonl_shared, "--jsonl", opt->jsonl,
				row, tr_results_write_row_jsonl);
	if (rf->csv != NULL && (skip_failed ? !rf->csv_failed && !ferror(rf->csv) : ret == 0))
		ret = write_row(rf->csv, &rf->csv_failed, rf->csv_shared, "--csv", opt->csv, row,
				tr_results_write_row_csv);
	if (skip_failed)
		return 0;
	if (ret == 0)
		ret = commit_staged(&rf->jsonl, "--jsonl", opt->jsonl, &rf->jsonl_staged,
				    &rf->jsonl_target, &rf->jsonl_failed, false);
	if (ret == 0)
		ret = commit_staged(&rf->csv, "--csv", opt->csv, &rf->csv_staged, &rf->csv_target,
				    &rf->csv_failed, false);
	return ret;
}

/*
 * The end of the CSV cell that starts at s[i], within s[0..n): the comma
 * or newline after it, or n.  A quoted cell ends at its closing quote (a
 * doubled quote inside is one quote, a newline inside is the cell's), and
 * what follows that quote up to the comma is taken into the cell; a quote
 * inside an unquoted cell is a character: as Python's csv module reads.
 */
static size_t cell_end(const char *s, size_t i, size_t n)
{
	if (i < n && s[i] == '"')
		for (i++; i < n; i++)
			if (s[i] == '"') {
				if (i + 1 < n && s[i + 1] == '"')
					i++;
				else
					break;
			}
	while (i < n && s[i] != ',' && s[i] != '\n')
		i++;
	return i;
}

/*
 * The length of the record at the start of s[0..len): a line of JSON, or a
 * CSV record (cell by cell: a quoted cell may hold a newline), with its
 * newline.
 */
static size_t record_len(const char *s, size_t len, bool csv)
{
	size_t i = 0;

	if (csv)
		while ((i = cell_end(s, i, len)) < len && s[i] == ',')
			i++;
	else
		while (i < len && s[i] != '\n')
			i++;
	return i < len ? i + 1 : len;
}

/*
 * The epoch of a row: its "epoch" key (JSON), or its cell number 'col'
 * (CSV) (0 for a failed run's row); -1 when there is none to read.
 */
static long record_epoch(const char *s, size_t len, bool csv, size_t col)
{
	char buf[24];
	size_t i = 0, n = 0;

	if (!csv) {
		static const char key[] = "\"epoch\"";

		/* As JSON allows it: spaces around the colon (a file rewritten by json.dumps). */
		for (; i + sizeof(key) - 1 < len && memcmp(s + i, key, sizeof(key) - 1) != 0; i++)
			;
		for (i += sizeof(key) - 1; i < len && (s[i] == ' ' || s[i] == '\t'); i++)
			;
		if (i >= len || s[i++] != ':')
			return -1;
		while (i < len && (s[i] == ' ' || s[i] == '\t'))
			i++;
	} else {
		for (size_t c = 0; c < col && i < len; c++)
			i = cell_end(s, i, len) + 1;
		/* a cell quoted by the program that saved the file */
		i += i < len && s[i] == '"';
	}
	/* JSON: an epoch written as a string */
	if (!csv)
		i += i < len && s[i] == '"';
	while (i < len && n + 1 < sizeof(buf) && s[i] >= '0' && s[i] <= '9')
		buf[n++] = s[i++];
	buf[n] = '\0';
	return n ? (long)strtoul(buf, NULL, 10) : -1;
}

/*
 * rows_write_in_place() for rows_replace(): 0, or -errno with the file
 * named on stderr.  'tmp' (not NULL): the sorted rows, whole, in a staged
 * file that could not be renamed over the target ('why'): removed once
 * they are in place, kept out of the sweep's reach where they are not.
 */
static int rows_rewrite_in_place(const char *option, const char *path, const char *target,
				 const char *text, size_t len, const struct tr_results *res,
				 const char *tmp, int why)
{
	char kept[PATH_MAX + 16];
	bool touched;
	FILE *f = rows_write_in_place(target, text, len, res, &touched);
	int err = f == NULL ? (errno ? errno : EIO) : 0;

	if (f != NULL && fclose(f) != 0)
		err = errno ? errno : EIO;
	if (err == 0) {
		if (tmp != NULL) {
			unlink(tmp);
			fprintf(stderr, "pinpipe-train: %s=%s: %s cannot be renamed over it (%s): the "
				"sorted rows are written in place\n", option, path, tmp, strerror(why));
		}
		return 0;
	}
	if (tmp != NULL && pp_rows_keep(tmp, kept, sizeof(kept)) != 0)
		snprintf(kept, sizeof(kept), "%s", tmp);
	fprintf(stderr, "pinpipe-train: %s=%s: cannot write: %s%s%s%s\n", option, path,
		strerror(err), touched ? " (it may hold part of the sorted rows)" : "",
		tmp != NULL ? "; they are in " : "", tmp != NULL ? kept : "");
	return -err;
}

/*
 * Replaces 'path' with text[0..len) followed by the CSV rows of 'res' (when
 * not NULL), through a temporary file beside it that is renamed over it:
 * a SIGKILL leaves the old file or the new one.  A symbolic link is
 * followed: the file it names is replaced, and it stays a link.  The new
 * file takes the mode of open_fd's.  A file that a rename must not or
 * cannot replace (of several names, another user's, mounted there) is
 * written over in place.  Returns 0, or -errno with the file named on
 * stderr.
 */
static int rows_replace(const char *option, const char *path, int open_fd, const char *text,
			size_t len, const struct tr_results *res)
{
	char tmp[PATH_MAX], target[PATH_MAX];
	struct stat st;
	FILE *f;
	int fd, ret = 0;

	/* The file the path's links lead to: a link stays a link; a file removed
	 * meanwhile is made again, with the rows. */
	if (!pp_links_follow(path, target, sizeof(target))) {
		ret = -errno;
		fprintf(stderr, "pinpipe-train: %s=%s: cannot follow the path: %s\n", option, path,
			strerror(-ret));
		return ret;
	}
	/* A link turned meanwhile to a device: never replaced. */
	if (stat(target, &st) == 0 && !S_ISREG(st.st_mode)) {
		fprintf(stderr, "pinpipe-train: %s=%s: %s is no longer a regular file: not replaced\n",
			option, path, target);
		return -EINVAL;
	}
	/* Renamed over, a file of several names would lose the others, and
	 * another user's would become this one's: written in place, as its rows were. */
	if (stat(target, &st) == 0 && !pp_rows_replaceable(&st))
		return rows_rewrite_in_place(option, path, target, text, len, res, NULL, 0);
	/* The file's own mode, not mkstemp's 0600. */
	f = pp_rows_tmp_open(target, fstat(open_fd, &st) == 0 ? st.st_mode : 0600, "w", tmp,
			     sizeof(tmp));
	if (f == NULL) {
		ret = -errno;
		fprintf(stderr, "pinpipe-train: %s=%s: cannot create %s: %s\n", option, path, tmp,
			strerror(-ret));
		return ret;
	}
	fd = fileno(f);
	errno = 0;
	fwrite(text, 1, len, f);
	for (size_t i = 0; res != NULL && i < res->n; i++)
		tr_results_write_row_csv(&res->rows[i], f);
	if (fflush(f) != 0 || ferror(f) || fsync(fd) != 0)
		ret = -(errno ? errno : EIO);
	/* renamed before its close: until then its lock says a writer lives */
	if (ret == 0 && rename(tmp, target) != 0) {
		/* refused (a file mounted there, EBUSY): written in place */
		const int why = errno;

		ret = rows_rewrite_in_place(option, path, target, text, len, res, tmp, why);
		fclose(f);
		return ret;
	}
	if (fclose(f) != 0 && ret == 0)
		ret = -errno;
	if (ret < 0) {
		fprintf(stderr, "pinpipe-train: %s=%s: cannot write: %s\n", option, path, strerror(-ret));
		unlink(tmp);
	}
	return ret;
}

/* The whole content of a file of rows; NULL with the file named on stderr. */
static char *rows_read(const char *option, const char *path, FILE *f, size_t *len_p)
{
	struct stat st;
	char *text;
	ssize_t got = 0;

	if (fflush(f) != 0 || fstat(fileno(f), &st) != 0) {
		fprintf(stderr, "pinpipe-train: %s=%s: %s\n", option, path, strerror(errno));
		return NULL;
	}
	/* Room for a newline after a header that lacks one, and a NUL. */
	text = malloc((size_t)st.st_size + 2);
	if (text == NULL) {
		fprintf(stderr, "pinpipe-train: %s=%s: no memory for its %lld bytes\n", option, path,
			(long long)st.st_size);
		return NULL;
	}
	for (ssize_t n = 1; got < st.st_size && n > 0; got += n > 0 ? n : 0)
		n = pread(fileno(f), text + got, (size_t)(st.st_size - got), got);
	if (got < st.st_size) {
		fprintf(stderr, "pinpipe-train: %s=%s: cannot read: %s\n", option, path,
			strerror(errno ? errno : EIO));
		free(text);
		return NULL;
	}
	text[got] = '\0';
	*len_p = (size_t)got;
	return text;
}

/*
 * A resume at the end of epoch 'epochs' (or in the epoch after it): the
 * file keeps its rows of epochs 1 to 'epochs' and drops the others (an
 * interrupted epoch's, which the resume trains again; failed runs'), so
 * that the resumed rows follow with no epoch twice.  A file that is not a
 * regular one (a pipe) is left as it is.  Returns 0 or -errno.
 */
static int rows_resume_one(const char *option, const char *path, FILE **f_p, bool shared,
			   bool csv, unsigned epochs, off_t *base_p)
{
	char *staged, *target;
	struct stat st;
	size_t len, kept = 0, col = 0, at = 0, whole = 0, readable = 0;
	char *text;
	int ret;

	if (*f_p == NULL || shared || fstat(fileno(*f_p), &st) != 0 || !S_ISREG(st.st_mode))
		return 0;
	text = rows_read(option, path, *f_p, &len);
	if (text == NULL)
		return -EIO;
	if (csv && len > 0) {
		/* The header stays; it says which cell is the epoch (quoted or not, after
		 * a UTF-8 byte-order mark a spreadsheet may have put first). */
		size_t n = record_len(text, len, true);
		size_t i = n >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0 ? 3 : 0;
		bool found = false;

		while (i < n && !found) {
			size_t q = text[i] == '"';

			found = strncmp(text + i + q, "epoch", 5) == 0 &&
				strchr(q ? "\"" : ",\r\n", text[i + q + 5]) != NULL;
			if (found)
				break;
			i = cell_end(text, i, n);
			if (i < n && text[i] == ',') {
				i++;
				col++;
			} else {
				break;
			}
		}
		if (!found)
			col = SIZE_MAX;
		/* a header without its newline would take the first resumed row on its line */
		if (n == len && text[n - 1] != '\n') {
			text[n++] = '\n';
			len++;
		}
		at = kept = n;
	}
	while (at < len) {
		size_t n = record_len(text + at, len - at, csv);
		long e = col == SIZE_MAX ? -1 : record_epoch(text + at, n, csv, col);

		whole += text[at + n - 1] == '\n';
		readable += text[at + n - 1] == '\n' && e >= 0;
		/* the rows of the checkpoint's epochs stay; a failed run's (epoch 0) go */
		if (text[at + n - 1] == '\n' && e >= 1 && (unsigned long)e <= epochs) {
			memmove(text + kept, text + at, n);
			kept += n;
		}
		at += n;
	}
	/* Rows of none of which an epoch could be read (a file saved otherwise): left
	 * as they are, and the resume refused, rather than all dropped. */
	if (whole > 0 && readable == 0 && epochs > 0) {
		fprintf(stderr, "pinpipe-train: %s=%s: the epoch of none of its %zu rows can be read "
			"(%s): it is left as it was; move it aside to resume\n", option, path, whole,
			csv ? "no 'epoch' column in its header" : "no \"epoch\" key");
		free(text);
		return -EINVAL;
	}
	ret = rows_replace(option, path, fileno(*f_p), text, kept, NULL);
	free(text);
	if (ret < 0)
		return ret;
	fclose(*f_p);
	*f_p = rows_open(option, path, true, &shared, &staged, &target); /* none staged */
	if (*f_p == NULL)
		return -EIO;
	if (base_p != NULL)
		*base_p = (off_t)kept;
	return 0;
}

int tr_rows_resume(const struct tr_options *opt, struct tr_row_files *rf, unsigned epochs)
{
	int ret = rows_resume_one("--csv", opt->csv, &rf->csv, rf->csv_shared, true, epochs,
				  &rf->csv_base);

	/* A file that could not be rewritten takes no failed row either: it stays as it was. */
	rf->csv_failed = rf->csv_failed || ret < 0;
	if (ret == 0) {
		ret = rows_resume_one("--jsonl", opt->jsonl, &rf->jsonl, rf->jsonl_shared, false,
				      epochs, NULL);
		rf->jsonl_failed = rf->jsonl_failed || ret < 0;
	}
	if (ret < 0)
		tr_output_failed = true;
	return ret;
}

int tr_rows_start(const struct tr_options *opt, struct tr_row_files *rf)
{
	struct stat st;

	memset(rf, 0, sizeof(*rf));
	if (opt->jsonl[0] != '\0' &&
	    (rf->jsonl = rows_open("--jsonl", opt->jsonl, opt->resume, &rf->jsonl_shared,
				   &rf->jsonl_staged, &rf->jsonl_target)) == NULL)
		return -EIO;
	if (opt->csv[0] == '\0')
		return 0;
	rf->csv = rows_open("--csv", opt->csv, opt->resume, &rf->csv_shared, &rf->csv_staged,
			    &rf->csv_target);
	if (rf->csv == NULL)
		return -EIO;
	/* A file of rows resumed keeps its header; one on standard output gets its own. */
	if (!rf->csv_shared && fstat(fileno(rf->csv), &st) == 0 && st.st_size > 0) {
		rf->csv_base = st.st_size;
		return 0;
	}
	if (rf->csv_shared)
		fflush(stdout);
	if (tr_results_write_csv_header(rf->csv) < 0 || fflush(rf->csv) != 0) {
		fprintf(stderr, "pinpipe-train: --csv=%s: cannot write: %s\n", opt->csv, strerror(errno));
		tr_output_failed = true;       /* said: not again when the file is closed */
		return -EIO;
	}
	rf->csv_base = ftello(rf->csv);
	return 0;
}

int tr_rows_finish(const struct tr_options *opt, struct tr_row_files *rf,
		   const struct tr_results *res)
{
	const bool kept = rf->csv_staged != NULL;
	struct stat st;
	size_t len;
	char *text;
	int ret = 0;

	/* No run's row came (every run already complete, stopped or failed before
	 * one): the file there is kept, the staged one removed, and not sorted. */
	commit_staged(&rf->csv, "--csv", opt->csv, &rf->csv_staged, &rf->csv_target, &rf->csv_failed,
		      true);
	commit_staged(&rf->jsonl, "--jsonl", opt->jsonl, &rf->jsonl_staged, &rf->jsonl_target,
		      &rf->jsonl_failed, true);
	if (rf->csv != NULL && res != NULL && res->n > 0 && !kept && !tr_output_failed &&
	    !rf->csv_shared && fstat(fileno(rf->csv), &st) == 0 && S_ISREG(st.st_mode)) {
		text = rows_read("--csv", opt->csv, rf->csv, &len);
		ret = text == NULL ? -EIO
		      : rows_replace("--csv", opt->csv, fileno(rf->csv), text,
				     len < (size_t)rf->csv_base ? len : (size_t)rf->csv_base, res);
		free(text);
	}
	if (rf->csv != NULL && (ferror(rf->csv) | fclose(rf->csv)) != 0 && !tr_output_failed && ret == 0) {
		fprintf(stderr, "pinpipe-train: --csv=%s: cannot write: %s\n", opt->csv, strerror(errno));
		ret = -EIO;
	}
	if (rf->jsonl != NULL && (ferror(rf->jsonl) | fclose(rf->jsonl)) != 0 && !tr_output_failed) {
		fprintf(stderr, "pinpipe-train: --jsonl=%s: cannot write: %s\n", opt->jsonl,
			strerror(errno));
		ret = -EIO;
	}
	return ret;
}

void tr_rows_fail(const struct tr_options *opt, struct tr_results *res, unsigned run,
		  const struct tr_params *p, int err, const char *why, struct tr_row_files *rf)
{
	struct tr_row row;

	memset(&row, 0, sizeof(row));
	row.run = run;
	row.train_loss = row.train_acc = row.val_loss = row.val_acc = NAN;
	row.test_loss = row.test_acc = NAN;
	row.epoch_s = row.run_s = row.samples_per_s = row.wait_s = row.copy_s = row.hidden_pct = NAN;
	row.copy_host_s = row.exposed_s = row.allreduce_s = NAN;
	row.p = *p;
	const char *reason = why ? why : pp_last_error()[0] ? pp_last_error() : pp_strerror(err);

	/* The row's status holds the reason's start; stderr has it whole. */
	snprintf(row.status, sizeof(row.status), "failed: %.*s", (int)sizeof(row.status) - 9, reason);
	fprintf(stderr, "pinpipe-train: run %u (%s): %s\n", run, p->device, reason);
	tr_results_add(res, &row);
	/* A file that failed already said so. */
	put_row(opt, rf, &row, true);
}

int tr_rows_report(const struct tr_options *opt, struct tr_row_files *rf, struct tr_results *res,
		   const struct tr_row *row)
{
	tr_results_add(res, row);
	/* Each row on disk as it is made: mpirun kills ranks that take long to stop. */
	return put_row(opt, rf, row, false);
}

void tr_rows_print(const struct tr_options *opt, const struct tr_row *row)
{
	print_row(row, opt->progress);
}
