/*
 * trainer/train.c: pinpipe-train, the reference trainer.  It reads top-down:
 * main parses the flags, opens the ranks and the data, and trains the grid;
 * the grid trains each run; a run builds a device, loaders, transfer stages
 * and a model, and trains and evaluates epoch by epoch; an epoch runs the
 * steps.  The data (trainer/data.c), the building of a run
 * (trainer/run.c), the placing of a resume (trainer/resume.c), the files
 * of rows (trainer/rows.c), the TensorBoard events (trainer/tensorboard.c)
 * and the ranks (trainer/dist.c) have files of their own.  It uses the
 * public API only, as any C trainer would.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "common/args.h"
#include "common/cpu.h"
#include "common/hostload.h"
#include "pinpipe/pinpipe.h"
#include "trainer/data.h"
#include "trainer/dist.h"
#include "trainer/options.h"
#include "trainer/pinning.h"
#include "trainer/results.h"
#include "trainer/resume.h"
#include "trainer/rows.h"
#include "trainer/run.h"
#include "trainer/tensorboard.h"

/* Set by Ctrl-C, read by the training loop: atomic, as the two may run on different threads. */
static atomic_bool interrupted;

/* Set once the ranks agreed to stop (trainer/dist.h): a stop that every rank makes at the same step. */
static atomic_bool stop_agreed;

/* The signal that stopped the run (SIGINT, SIGTERM), for the exit status 128 + it. */
static atomic_int stop_signal;

static void on_sigint(int sig)
{
	int none = 0;

	atomic_compare_exchange_strong(&stop_signal, &none, sig);
	atomic_store(&interrupted, true);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int train_grid(struct tr_options *opt, const struct tr_data *d, struct tr_dist *dist,
		      struct tr_results *res, struct tr_row_files *rf, size_t *started_p,
		      int *failed_p, bool *told_p, struct tr_row *late);
static int train_run(const struct tr_options *opt, const struct tr_params *p, unsigned run,
		     const struct tr_data *d, struct tr_dist *dist, struct tr_results *res,
		     struct tr_row_files *rf, struct tr_row *late);
static int train_epoch(const struct tr_options *opt, struct tr_run *r,
		       const struct pp_sample_info *info, uint64_t *steps, uint64_t batches,
		       struct tr_row *row);
static int run_pass(struct tr_run *r, struct pp_transfer *xfer, bool train, uint64_t *steps,
		    uint64_t max_steps, const struct pp_sample_info *info, int progress,
		    uint64_t batches, double t0, const char *what);
static int evaluate(struct tr_run *r, struct pp_transfer *xfer, struct pp_loader *loader,
		    const struct pp_sample_info *info, int progress, const char *what,
		    double *loss_p, double *acc_p);
static bool ranks_stop(struct tr_run *r, int *err_p);
static void ranks_setup(struct tr_options *opt, const struct tr_dist *dist);
static int rank_failed(struct tr_dist *dist);
static size_t table_width(void);

static int train_main(int argc, char **argv)
{
	struct tr_options opt;
	struct tr_results res = { 0 };
	struct tr_dist dist;
	struct tr_data d;
	struct tr_row_files rf;
	char checked[1024];        /* why the ranks' options do not agree */
	size_t started = 0;
	int ret, failed = 0;
	bool told = false;         /* a run said where Ctrl-C stopped it */
	struct tr_row late = { .run = 0 };  /* a run's last row, for after the line on Ctrl-C */

	ret = tr_options_parse(argc, argv, &opt);
	if (ret != 0)
		return ret == 1 ? 0 : 2;
	signal(SIGINT, on_sigint);
	/* OpenBLAS opened while this is the process's one thread, where a run may use
	 * it: the library sets its environment around the load, which the threads of
	 * MPI and of the loaders' workers would read meanwhile. */
	for (size_t i = 0; i < opt.device.n; i++)
		if (strncmp(opt.device.values[i], "cuda", 4) != 0) {
			struct pp_blas_info info;

			pp_blas_get_info(&info);
			break;
		}
	if (tr_dist_open(&opt, &dist) < 0)
		return 1;
	ranks_setup(&opt, &dist);
	if (tr_data_open(&opt, (unsigned)dist.size, &d) < 0) {
		if (opt.data_from_env)
			fprintf(stderr, "pinpipe-train: the data was PINPIPE_DATA's (%s): --data=DIR "
				"gives another\n", opt.data);
		return rank_failed(&dist);
	}
	if (tr_rows_start(&opt, &rf) < 0) {
		tr_rows_finish(&opt, &rf, NULL);
		tr_data_free(&d);
		return rank_failed(&dist);
	}
	/* The ranks of a job agree on the options, or none trains: exit 2, as for a bad option. */
	ret = tr_dist_check_options(&dist, &opt, checked, sizeof(checked));
	if (ret < 0) {
		struct tr_params p;

		tr_options_run_params(&opt, 0, &p);
		if (dist.rank == 0)
			tr_rows_fail(&opt, &res, 1, &p, ret, checked, &rf);
		tr_rows_finish(&opt, &rf, NULL);
		tr_results_free(&res);
		tr_data_free(&d);
		if (ret != -EINVAL)
			return rank_failed(&dist);
		tr_dist_close(&dist);
		return 2;
	}
	if (train_grid(&opt, &d, &dist, &res, &rf, &started, &failed, &told, &late) < 0) {
		/* A run that ended whole before the grid failed: its row after the reason. */
		if (late.run != 0)
			tr_rows_print(&opt, &late);
		/* The files of rows closed (a staged one removed) before the job ends. */
		tr_rows_finish(&opt, &rf, NULL);
		tr_data_free(&d);
		return rank_failed(&dist);
	}
	if (dist.rank == 0 && interrupted && !told && started == 0)
		fprintf(stderr, "pinpipe-train: interrupted before the first step: nothing trained%s%s%s\n",
			opt.checkpoint[0] == '\0' ? "" : opt.resume ? ", " : ", no checkpoint written",
			opt.resume ? opt.checkpoint : "", opt.resume ? " left as it was" : "");
	else if (dist.rank == 0 && interrupted && !told && started < tr_options_runs(&opt))
		fprintf(stderr, "pinpipe-train: interrupted after run %zu: runs %zu to %zu not started\n",
			started, started + 1, tr_options_runs(&opt));
	if (late.run != 0)
		tr_rows_print(&opt, &late);
	tr_results_sort(&res, opt.sort);
	/* No rows (every run already complete): no table of none. */
	if (opt.progress >= 0 && res.n > 0)
		printf("\n");
	if (dist.rank == 0 && res.n > 0)
		tr_results_print_table(&res, opt.sort, opt.columns, table_width(), stdout);
	/* -q: the table alone. */
	if (dist.rank == 0 && opt.progress >= 0)
		tr_pinning_print(&res, stderr);
	tr_pinning_free();
	if (tr_rows_finish(&opt, &rf, &res) < 0)
		failed++;
	tr_results_free(&res);
	tr_data_free(&d);
	/* mpirun ends the job when a rank exits non-zero (130 after Ctrl-C): no rank
	 * leaves before rank 0 has written everything.  What did not reach stdout
	 * (a full disk) fails the run, its reason said here, where it is known. */
	if (fflush(stdout) != 0) {
		fprintf(stderr, "pinpipe-train: standard output: cannot write: %s\n", strerror(errno));
		clearerr(stdout);
		failed++;
	}
	/* A failed barrier leaves a request pending, and ranks that may never come:
	 * the job ends here (no MPI_Finalize), failed. */
	if (dist.size > 1 && pp_comm_barrier(dist.comm) < 0) {
		fprintf(stderr, "pinpipe-train: the final barrier: %s\n", pp_last_error());
		return rank_failed(&dist);
	}
	tr_dist_close(&dist);
	if (interrupted)
		return 128 + (atomic_load(&stop_signal) ? atomic_load(&stop_signal) : SIGINT);
	return failed ? 1 : 0;
}

/*
 * The grid: each of its runs in turn, until Ctrl-C or a file of rows that
 * could not be written.  Counts the runs started and failed, and whether
 * a run said where Ctrl-C stopped it.  Returns 0, or -errno when this rank
 * failed with other ranks, which may wait for it: the job must end.
 */
static int train_grid(struct tr_options *opt, const struct tr_data *d, struct tr_dist *dist,
		      struct tr_results *res, struct tr_row_files *rf, size_t *started_p,
		      int *failed_p, bool *told_p, struct tr_row *late)
{
	size_t runs = tr_options_runs(opt);
	int ret;

	for (size_t i = 0; i < runs; i++) {
		struct tr_params p;
		int err;

		/* Several ranks agree on Ctrl-C before each run, so that all start it
		 * (and its broadcast) or none does. */
		if (tr_dist_any(dist, interrupted, &err)) {
			if (err < 0) {
				fprintf(stderr, "pinpipe-train: before run %zu: %s\n", i + 1, pp_last_error());
				return err;
			}
			atomic_store(&interrupted, true);
			break;
		}

		tr_options_run_params(opt, i, &p);
		++*started_p;
		ret = train_run(opt, &p, (unsigned)i + 1, d, dist, res, rf, late);
		*told_p = ret == -EINTR;
		if (ret < 0)
			++*failed_p;
		/* The other ranks may be waiting for this one: end them, with this reason said. */
		if (ret < 0 && ret != -EINTR && dist->size > 1)
			return ret;
		/* A file of rows could not be written: no other run starts. */
		if (tr_output_failed)
			break;
	}
	return 0;
}

/*
 * Trains one run of the grid; returns 0, or -errno when it failed (its row
 * says why).  A run that ended whole while Ctrl-C was on its way leaves
 * its last row in *late, for the terminal after the grid's line on it.
 */
static int train_run(const struct tr_options *opt, const struct tr_params *p, unsigned run,
		     const struct tr_data *d, struct tr_dist *dist, struct tr_results *res,
		     struct tr_row_files *rf, struct tr_row *late)
{
	struct tr_params params = *p;
	const struct pp_sample_info *info;
	struct tr_run r;
	double t_run = now_s();
	struct tr_place pl;
	struct tr_row held = { .run = 0 };  /* a row for the terminal after Ctrl-C's stop */
	uint64_t steps;
	char why[sizeof(opt->checkpoint) + 1024] = "";  /* why the run failed, when the trainer knows */
	char ranks[64] = "";       /* several ranks: their count and the global batch */
	unsigned cores;
	int ret;

	memset(&r, 0, sizeof(r));
	/* The ranks of a machine share its cores (and its GPUs, by local rank). */
	cores = (unsigned)pp_cpu_usable_cores() / (unsigned)pp_comm_local_size(dist->comm);
	params.threads = tr_options_threads(opt, p, cores ? cores : 1);
	params.ranks = (unsigned)dist->size;
	params.global_batch = p->batch_size * (unsigned)dist->size;
	/* The rows, and the errors, name the device that ran once it is open (tr_run_open()). */
	p = &params;
	ret = tr_dist_check_batch(dist, p->batch_size, why, sizeof(why));
	if (ret == 0)
		ret = tr_run_open(opt, &params, run, d, dist, &r);
	if (ret == 0 && opt->resume)
		ret = tr_resume_check(opt, &params, r.model, dist->rank == 0, why, sizeof(why));
	/* The ranks hold one checkpoint (each reads its own copy) and data of one
	 * size (each reads its own --data), or none trains. */
	if (ret == 0 && dist->size > 1) {
		static const char *const what[] = { "its checkpoint's step count is",
						    "its checkpoint's CRC-32 is",
						    "its training samples are" };
		const uint64_t mine[] = { pp_model_steps(r.model),
					  opt->resume ? tr_resume_file_crc(opt->checkpoint) : 0,
					  pp_loader_info(r.train_loader)->count };

		ret = tr_dist_check_state(dist, mine, what, 3, why, sizeof(why));
	}
	if (ret < 0)
		goto fail;
	/* Rows name a CPU step's threads and BLAS. */
	if (pp_device_get_props(r.dev)->host_addressable)
		tr_blas_note(&params, dist->rank == 0);
	else
		params.threads = 0;
	info = pp_loader_info(r.train_loader);
	ret = tr_resume_place(opt, p, &d->train, run, &r, &pl, why, sizeof(why));
	if (ret == 1) {
		tr_run_close(&r);
		return 0;
	}
	if (ret < 0)
		goto fail;
	steps = pl.steps;
	/* The files of rows keep the epochs the checkpoint holds, and no later ones. */
	if (opt->resume && tr_rows_resume(opt, rf, pl.first_epoch) < 0) {
		snprintf(why, sizeof(why), "--resume: a file of rows was not rewritten (why is said "
			 "above)");
		ret = -EIO;
		goto fail;
	}
	ret = tr_resume_key(opt, p, &d->train, &r, &pl, why, sizeof(why));
	if (ret < 0)
		goto fail;
	if (dist->size > 1)
		snprintf(ranks, sizeof(ranks), " ranks=%u global_batch=%u", p->ranks, p->global_batch);
	if (opt->progress >= 0)
		printf("run %u: device=%s batch_size=%u%s workers=%u pin_memory=%s lr=%g model=%s "
		       "optimizer=%s, %zu parameters%s\n", run, p->device, p->batch_size, ranks,
		       p->workers, p->pin_memory ? "on" : "off", p->lr, p->model, p->optimizer,
		       pp_model_param_count(r.model), steps ? " (resumed)" : "");
	/* Seen before a long first epoch, also through a pipe. */
	fflush(stdout);
	for (unsigned epoch = pl.first_epoch; epoch < opt->epochs; epoch++) {
		uint64_t steps_before = steps;
		struct tr_row row;
		int ret2;

		if (opt->max_steps && steps >= opt->max_steps)
			break;
		memset(&row, 0, sizeof(row));
		row.run = run;
		row.epoch = epoch + 1;
		row.p = *p;
		ret = tr_begin_epoch(&r, epoch, epoch == pl.first_epoch, steps, pl.batches, pl.key);
		/* Said once, as the run's reason, in place of the loader's. */
		if (ret == -EINVAL && epoch == pl.first_epoch && steps != 0)
			tr_resume_other_order(why, sizeof(why), opt->checkpoint, dist->size > 1);
		/* An epoch of no step would train nothing, and say "ok" with a NaN loss. */
		if (ret == 0 && pp_loader_batches_per_epoch(r.train_loader) == 0) {
			snprintf(why, sizeof(why), "%s: %llu training samples%s make no whole batch "
				 "of %u: nothing to train (a smaller --batch-size%s)",
				 opt->deterministic ? "--deterministic" : "--drop-last",
				 (unsigned long long)info->count, dist->size > 1 ? " over the ranks" : "",
				 p->batch_size, opt->deterministic ? "" : ", or no --drop-last");
			ret = -EINVAL;
		}
		/* The events once the first epoch has begun: a run refused before it (a
		 * resume of another order, no whole batch) leaves no file of no event. */
		if (ret == 0 && epoch == pl.first_epoch)
			ret = tr_tb_open(opt, p, run, &r);
		if (ret == 0)
			ret = train_epoch(opt, &r, info, &steps, pl.batches, &row);
		tr_say_graph_fallback(r.model);
		if (ret < 0 && ret != -EINTR)
			goto fail;
		/* Stopped before a step of this epoch: no row of NaNs, and the
		 * checkpoint, if any, stays that of the last step. */
		if (ret == -EINTR && steps == steps_before)
			break;
		row.run_s = now_s() - t_run;
		snprintf(row.status, sizeof(row.status), "%s", ret == -EINTR ? "interrupted" : "ok");
		ret2 = tr_rows_report(opt, rf, res, &row);
		if (ret2 == 0)
			tr_tb_epoch(&r, &row, steps);
		if (ret2 < 0) {
			snprintf(why, sizeof(why), "a file of rows cannot be written: %s",
				 pp_strerror(ret2));
			ret = ret2;
			held = row;
			goto fail;
		}
		/* An interrupted epoch's steps are whole: its checkpoint resumes exactly. */
		if (opt->checkpoint[0] != '\0' && dist->rank == 0) {
			int saved = pp_model_save(r.model, opt->checkpoint);

			if (saved < 0) {
				ret = saved;
				held = row;
				goto fail;
			}
		}
		/*
		 * The row on the terminal last, and once Ctrl-C has come, after
		 * the line that says where the run stopped: on Ctrl-C mpirun
		 * stops reading the ranks' standard output, and rank 0, blocked
		 * writing to it once its one signal is spent, would be killed
		 * before its files, its checkpoint and that line (standard
		 * error, which mpirun still passes on) were written.  A signal
		 * that came after an epoch's last step leaves that epoch "ok",
		 * and the stop to the next step: its row waits too.
		 */
		if (held.run != 0) {
			tr_rows_print(opt, &held);
			held.run = 0;
		}
		if (ret != -EINTR && !atomic_load(&interrupted)) {
			tr_rows_print(opt, &row);
			continue;
		}
		held = row;
		if (ret == -EINTR)
			break;
	}
	/* Rank 0 speaks for the job. */
	if (dist->rank == 0 && ret == -EINTR && steps == pl.steps)
		fprintf(stderr, "pinpipe-train: interrupted before the first step of run %u: nothing "
			"trained%s%s%s\n", run, opt->checkpoint[0] == '\0' ? "" : steps ? ", " :
			", no checkpoint written", steps ? opt->checkpoint : "",
			steps ? " left as it was" : "");
	else if (dist->rank == 0 && ret == -EINTR)
		fprintf(stderr, "pinpipe-train: interrupted after %llu steps%s\n",
			(unsigned long long)steps,
			opt->checkpoint[0] ? "; the checkpoint resumes from there" : "");
	if (held.run != 0 && ret == 0)
		*late = held;
	else if (held.run != 0)
		tr_rows_print(opt, &held);
	tr_run_close(&r);
	return ret == -EINTR ? ret : 0;

fail:
	/* The failure on stderr and in the files first, then the row of the epoch it ended. */
	tr_rows_fail(opt, res, run, p, ret, why[0] ? why : dist->why[0] ? dist->why : NULL, rf);
	if (held.run != 0)
		tr_rows_print(opt, &held);
	tr_run_close(&r);
	return ret;
}

/*
 * Trains one epoch and fills its row: training metrics, time, waiting,
 * copies, and evaluation.  Returns 0, -EINTR when Ctrl-C stopped it (the
 * row then holds what was trained), or another -errno.
 */
static int train_epoch(const struct tr_options *opt, struct tr_run *r,
		       const struct pp_sample_info *info, uint64_t *steps, uint64_t batches,
		       struct tr_row *row)
{
	static struct pp_hostload h0, h1;
	struct pp_transfer_stats s0, s1;
	struct pp_model_metrics m;
	uint64_t timed, comm0;
	double t0, scale;
	int ret, pass;

	pp_hostload_read(&h0);
	pp_transfer_get_stats(r->train_xfer, &s0);
	pp_model_metrics(r->model, true, &m);
	comm0 = tr_dist_comm_ns(r->dist);
	r->tb_loss = 0;
	r->tb_samples = 0;
	t0 = now_s();
	pass = run_pass(r, r->train_xfer, true, steps, opt->max_steps, info, opt->progress, batches,
			t0, "train");
	ret = pp_stream_synchronize(r->compute);
	if (pass < 0 && pass != -EINTR)
		return pass;
	if (ret < 0)
		return ret;
	row->epoch_s = now_s() - t0;
	pp_hostload_read(&h1);
	tr_pinning_note_wait(row->run, pp_hostload_waiting(&h0, &h1));
	row->allreduce_s = (double)(tr_dist_comm_ns(r->dist) - comm0) * 1e-9;
	pp_model_metrics(r->model, true, &m);
	/* The whole job's figures: every rank's samples. */
	ret = tr_dist_sum_metrics(r->dist, &m);
	if (ret < 0)
		return ret;
	pp_transfer_get_stats(r->train_xfer, &s1);
	row->train_loss = m.samples ? m.loss_sum / (double)m.samples : NAN;
	row->train_acc = m.samples ? (double)m.correct / (double)m.samples : NAN;
	row->samples_per_s = row->epoch_s > 0 ? (double)m.samples / row->epoch_s : NAN;
	row->wait_s = (double)(s1.wait_ns - s0.wait_ns) * 1e-9;
	/* Copy time and exposure are measured on the timed batches: scaled to the epoch's. */
	timed = s1.copies_timed - s0.copies_timed;
	scale = timed ? (double)(s1.batches - s0.batches) / (double)timed
		      : s1.bytes == s0.bytes ? 0 : NAN;
	row->copy_s = (double)(s1.copy_ns - s0.copy_ns) * 1e-9 * scale;
	row->exposed_s = (double)(s1.exposed_ns - s0.exposed_ns) * 1e-9 * scale;
	row->copy_host_s = (double)(s1.host_blocked_ns - s0.host_blocked_ns) * 1e-9;
	row->hidden_pct = s1.copy_ns > s0.copy_ns
		? 100.0 * (1.0 - (double)(s1.exposed_ns - s0.exposed_ns) / (double)(s1.copy_ns - s0.copy_ns))
		: NAN;
	row->val_loss = row->val_acc = row->test_loss = row->test_acc = NAN;
	if (pass == -EINTR)
		return pass;
	ret = evaluate(r, r->val_xfer, r->val_loader, info, opt->progress, "val", &row->val_loss,
		       &row->val_acc);
	if (ret == 0)
		ret = evaluate(r, r->test_xfer, r->test_loader, info, opt->progress, "test",
			       &row->test_loss, &row->test_acc);
	return ret;
}

/* Runs one pass over a transfer stage's epoch: training when 'train', else evaluation. */
static int run_pass(struct tr_run *r, struct pp_transfer *xfer, bool train, uint64_t *steps,
		    uint64_t max_steps, const struct pp_sample_info *info, int progress,
		    uint64_t batches, double t0, const char *what)
{
	struct pp_device_batch *b;
	uint64_t done = 0, samples = 0;
	int ret = 0, released;

	/* Several ranks evaluate to the end: their sums are reduced together. */
	while (!(train ? ranks_stop(r, &ret) : interrupted && r->dist->size == 1) &&
	       (ret = pp_transfer_next(xfer, r->compute, &b)) == 1) {
		/* Evaluation leaves out the repeats that pad this rank to the others' count. */
		size_t shape[4] = { train ? b->size : b->size - b->padding, 1, 1, 1 };
		struct pp_tensor *in = NULL;
		int ndim = 1 + (int)info->ndim;

		for (uint32_t k = 0; k < info->ndim && k < 3; k++)
			shape[1 + k] = info->shape[k];
		if (r->host_compute_on_copy)
			ret = pp_event_synchronize(b->ready);
		if (ret >= 0 && shape[0] > 0)
			ret = pp_tensor_wrap(r->dev, b->samples, b->dtype, ndim, shape, &in);
		if (ret >= 0 && train && r->tb && !r->tb_image_done)
			tr_tb_image_grid(r, b, in, info, *steps);
		if (ret >= 0 && in != NULL) {
			ret = !train ? pp_model_evaluate(r->model, in, b->labels, NULL)
			      : r->dist->deterministic
			      ? tr_dist_deterministic_step(r->dist, r->dev, b->samples, b->labels, b->size,
							   b->dtype, b->sample_bytes, ndim, shape + 1)
			      : pp_model_train_step(r->model, in, b->labels);
			pp_tensor_destroy(in);
		}
		samples += b->size;
		released = pp_transfer_release(xfer, b, r->compute);
		if (ret >= 0)
			ret = released;
		if (ret < 0)
			return ret;
		done++;
		if (train && r->tb && (*steps + 1) % TB_STEP_EVERY == 0)
			ret = tr_tb_step(r, *steps);
		if (train && ++*steps >= max_steps && max_steps)
			break;
		if (progress > 0 && (done % 8 == 0 || done == batches)) {
			double el = now_s() - t0;
			int width = 30, fill = batches ? (int)(width * done / batches) : 0;

			fprintf(stderr, "\r  %-5s [%.*s%*s] %3d%% %9.0f samples/s  ETA %4.0fs ", what,
				fill, "##############################", width - fill, "",
				batches ? (int)(100 * done / batches) : 0, el > 0 ? samples / el : 0,
				done && batches ? el / done * (double)(batches - done) : 0);
		}
	}
	if (progress > 0)
		fprintf(stderr, "\r%80s\r", "");
	if (ret < 0)
		return ret;
	return (train ? stop_agreed : interrupted && r->dist->size == 1) ? -EINTR : 0;
}

/* Evaluates the model on one pass of a transfer stage; NaN results when there is none. */
static int evaluate(struct tr_run *r, struct pp_transfer *xfer, struct pp_loader *loader,
		    const struct pp_sample_info *info, int progress, const char *what,
		    double *loss_p, double *acc_p)
{
	struct pp_model_metrics m;
	uint64_t steps = 0;
	int ret;

	*loss_p = *acc_p = NAN;
	if (xfer == NULL)
		return 0;
	pp_model_metrics(r->model, true, &m);
	ret = pp_transfer_begin_epoch(xfer, 0);
	if (ret == 0)
		ret = run_pass(r, xfer, false, &steps, 0, info, progress,
			       pp_loader_batches_per_epoch(loader), now_s(), what);
	if (ret == 0)
		ret = pp_model_metrics(r->model, true, &m);
	if (ret == 0)
		ret = tr_dist_sum_metrics(r->dist, &m);
	if (ret < 0)
		return ret;
	*loss_p = m.samples ? m.loss_sum / (double)m.samples : NAN;
	*acc_p = m.samples ? (double)m.correct / (double)m.samples : NAN;
	return 0;
}

/*
 * Whether training stops before the next step: Ctrl-C here, or on any
 * other rank (trainer/dist.h), so that every rank stops at the same step.
 * A failed collective stops with its error in *err_p.
 */
static bool ranks_stop(struct tr_run *r, int *err_p)
{
	int err;

	if (tr_dist_any(r->dist, interrupted, &err)) {
		if (err < 0) {
			*err_p = err;
		} else {
			atomic_store(&stop_agreed, true);
			atomic_store(&interrupted, true);
		}
		return true;
	}
	return false;
}

/*
 * Ctrl-C and SIGTERM stop after the step in progress (several ranks: at
 * the next step that every rank agrees on); rank 0 alone prints and writes
 * the files (the others run quiet).
 */
static void ranks_setup(struct tr_options *opt, const struct tr_dist *dist)
{
	/* SIGTERM stops as Ctrl-C does: mpirun's on Ctrl-C, and a job's end of time
	 * (timeout, a batch system), which would otherwise lose the epoch's rows and
	 * checkpoint.  One process restarts what it interrupts, as Ctrl-C's handler
	 * does; ranks do not (a launcher's, -np 1 too): on Ctrl-C mpirun stops reading the ranks' output,
	 * seconds before its SIGTERM, so rank 0 may be blocked writing a progress
	 * line to a full pipe; the signal must end that write (the line is lost)
	 * for the rank to stop and write its rows and checkpoint before mpirun's
	 * SIGKILL. */
	const bool launched = dist->size > 1 || strcmp(pp_comm_backend(dist->comm), "local") != 0;
	struct sigaction sa = { .sa_handler = on_sigint, .sa_flags = launched ? 0 : SA_RESTART };

	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	if (dist->rank == 0)
		return;
	opt->progress = -1;
	opt->csv[0] = opt->jsonl[0] = opt->logdir[0] = '\0';
}

/*
 * A rank failed (its reason is on stderr): with other ranks, which may
 * wait for it in a collective, the whole job ends with status 1.
 */
static int rank_failed(struct tr_dist *dist)
{
	if (dist->size > 1) {
		fprintf(stderr, "pinpipe-train: rank %d of %d failed (the reason is above): ending the "
			"job\n", dist->rank, dist->size);
		pp_comm_abort(dist->comm, 1);
	}
	tr_dist_close(dist);
	return 1;
}

/*
 * The width the final table keeps to: the terminal's, else $COLUMNS, else
 * 100 (tr_results_print_table() leaves out what does not fit, and says
 * so; the CSV and the JSON lines have every column).
 */
static size_t table_width(void)
{
	struct winsize ws;
	const char *env = getenv("COLUMNS");
	char *end;
	unsigned long cols;

	if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
		return ws.ws_col;
	if (env != NULL && env[0] != '\0') {
		errno = 0;
		cols = strtoul(env, &end, 10);
		if (errno == 0 && *end == '\0' && cols > 0 && cols <= 65535)
			return cols;
	}
	return 100;
}

/*
 * Output that did not all reach standard output is a failure too, said.
 * A write past RLIMIT_FSIZE (--csv, --jsonl, standard output into a file)
 * fails with EFBIG and is said as any other failed write: SIGXFSZ, which
 * would kill the program with no word, is ignored.
 */
int main(int argc, char **argv)
{
	signal(SIGXFSZ, SIG_IGN);
	return pp_args_end_stdout("pinpipe-train", train_main(argc, argv));
}
