/*
 * tests/test_options.c: pinpipe-train's command line and the grid of runs.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/args.h"
#include "tests/testutil.h"
#include "pinpipe/nn.h"
#include "trainer/options.h"

static int parse(struct tr_options *opt, const char *const *args)
{
	char *argv[32];
	int argc = 0;

	argv[argc++] = (char *)"pinpipe-train";
	for (; *args; args++)
		argv[argc++] = (char *)*args;
	argv[argc] = NULL;
	return tr_options_parse(argc, argv, opt);
}

/* Fails if the defaults are not those --help states. */
START_TEST(test_defaults)
{
	static const char *const none[] = { NULL };
	struct tr_options opt;
	struct tr_params p;

	unsetenv("PINPIPE_DATA");
	ck_assert_int_eq(parse(&opt, none), 0);
	ck_assert_uint_eq(tr_options_runs(&opt), 1);
	ck_assert_int_eq(tr_options_run_params(&opt, 0, &p), 0);
	ck_assert_str_eq(p.device, "auto");
	ck_assert_uint_eq(p.batch_size, 100);
	ck_assert_uint_eq(p.workers, 1);
	ck_assert(p.pin_memory);
	ck_assert(p.lr == 0.01);
	ck_assert_str_eq(p.model, "cnn");
	ck_assert_str_eq(p.optimizer, "adam");
	ck_assert_uint_eq(p.threads, 0); /* auto */
	ck_assert_str_eq(opt.data, "/usr/share/datasets/fashion-mnist");
	ck_assert_uint_eq(opt.epochs, 3);
	ck_assert(opt.shuffle && opt.eval && !opt.drop_last && !opt.keep_denormals);
	ck_assert(!opt.stream && opt.window_chunks == 0 && opt.memory_budget == 0);
	ck_assert_str_eq(opt.sort, ""); /* runs by mean epoch_s, each in epoch order */
	ck_assert_str_eq(opt.comm, "auto");
	ck_assert(opt.comm_timeout == 300.0 && !opt.deterministic && opt.micro_batches == 0);
	ck_assert_uint_eq(opt.bucket_kb, TR_BUCKET_KB);
}
END_TEST

/* Fails if the options of several ranks do not reach the options as given. */
START_TEST(test_ranks)
{
	static const char *const args[] = { "--comm=mpi", "--comm-timeout=2.5", "--deterministic",
					    "--micro-batches=6", "--bucket-kb=7", NULL };
	static const char *const nccl[] = { "--comm=nccl", NULL };
	struct tr_options opt;

	ck_assert_int_eq(parse(&opt, args), 0);
	ck_assert_str_eq(opt.comm, "mpi");
	ck_assert(opt.comm_timeout == 2.5 && opt.deterministic && opt.micro_batches == 6);
	ck_assert_uint_eq(opt.bucket_kb, 7);
	ck_assert_int_eq(parse(&opt, nccl), 0);
	ck_assert_str_eq(opt.comm, "nccl");
}
END_TEST

/* Fails if --stream's window, --memory-budget's MiB or --keep-denormals do not reach the options as given. */
START_TEST(test_stream)
{
	static const char *const plain[] = { "--data=/tmp/x", "--stream", "--keep-denormals", NULL };
	static const char *const window[] = { "--stream=3", "--memory-budget=64", "--val-split=0", NULL };
	static const char *const budget[] = { "--memory-budget=5", NULL };
	struct tr_options opt;

	ck_assert_int_eq(parse(&opt, plain), 0);
	ck_assert(opt.stream && opt.keep_denormals);
	ck_assert_uint_eq(opt.window_chunks, 0); /* the loader's default */
	ck_assert_uint_eq(opt.memory_budget, 0);
	ck_assert_int_eq(parse(&opt, window), 0);
	ck_assert(opt.stream);
	ck_assert_uint_eq(opt.window_chunks, 3);
	ck_assert_uint_eq(opt.memory_budget, 64u << 20);
	ck_assert_int_eq(parse(&opt, budget), 0);
	ck_assert(!opt.stream);
	ck_assert_uint_eq(opt.memory_budget, 5u << 20);
}
END_TEST

/* Fails if a 2x2x2 grid does not give 8 runs covering every combination in order. */
START_TEST(test_grid)
{
	static const char *const args[] = { "--batch-size=100,1000", "-w", "0,2", "--pin-memory=on,off",
					    "--model", "conv:6:5,relu,maxpool:2,flatten,fc:10", NULL };
	struct tr_options opt;
	struct tr_params p;
	unsigned seen = 0;

	ck_assert_int_eq(parse(&opt, args), 0);
	ck_assert_uint_eq(tr_options_runs(&opt), 8);
	for (size_t i = 0; i < 8; i++) {
		ck_assert_int_eq(tr_options_run_params(&opt, i, &p), 0);
		ck_assert_str_eq(p.model, "conv:6:5,relu,maxpool:2,flatten,fc:10");
		seen |= 1u << ((p.batch_size == 1000) * 4 + (p.workers == 2) * 2 + p.pin_memory);
	}
	ck_assert_uint_eq(seen, 0xff);
	ck_assert_int_eq(tr_options_run_params(&opt, 1, &p), 0);
	ck_assert(!p.pin_memory && p.workers == 0 && p.batch_size == 100); /* last axis fastest */
	ck_assert_int_eq(tr_options_run_params(&opt, 8, &p), -ERANGE);
}
END_TEST

/*
 * Fails if --threads is not an axis of the grid (auto or counts), or if
 * auto does not give the threads that pay for the batch on the cores the
 * workers leave: every core with workers on data in memory (2 for the
 * README's command on 2 cores, 1 worker), a core less a worker with
 * --stream; a count given is taken as it is.
 */
START_TEST(test_threads)
{
	static const char *const grid[] = { "--threads=1,auto,8", "-w", "1", NULL };
	static const char *const stream[] = { "--stream", "-w", "1,3", NULL };
	struct tr_options opt;
	struct tr_params p;

	ck_assert_int_eq(parse(&opt, grid), 0);
	ck_assert_uint_eq(tr_options_runs(&opt), 3);
	ck_assert_int_eq(tr_options_run_params(&opt, 0, &p), 0);
	ck_assert_uint_eq(p.threads, 1);
	ck_assert_uint_eq(tr_options_threads(&opt, &p, 16), 1);
	ck_assert_int_eq(tr_options_run_params(&opt, 1, &p), 0);
	ck_assert_uint_eq(p.threads, 0);
	ck_assert_uint_eq(tr_options_threads(&opt, &p, 2), 2);
	ck_assert_uint_eq(tr_options_threads(&opt, &p, 1), 1);
	ck_assert_uint_eq(tr_options_threads(&opt, &p, 16), pp_model_cpu_threads(100, 16));
	p.batch_size = 1000;
	ck_assert_uint_eq(tr_options_threads(&opt, &p, 16), 16);
	ck_assert_int_eq(tr_options_run_params(&opt, 2, &p), 0);
	ck_assert_uint_eq(tr_options_threads(&opt, &p, 2), 8);
	ck_assert_int_eq(parse(&opt, stream), 0);
	ck_assert_int_eq(tr_options_run_params(&opt, 0, &p), 0);
	ck_assert_uint_eq(tr_options_threads(&opt, &p, 2), 1);
	ck_assert_uint_eq(tr_options_threads(&opt, &p, 16), pp_model_cpu_threads(100, 15));
	ck_assert_int_eq(tr_options_run_params(&opt, 1, &p), 0);
	ck_assert_uint_eq(tr_options_threads(&opt, &p, 2), 1);
}
END_TEST

/* Fails if presets in one list are not split, or repeated --model does not add values. */
START_TEST(test_model_lists)
{
	static const char *const presets[] = { "--model=cnn,mlp", NULL };
	static const char *const repeated[] = { "-m", "mlp", "-m", "fc:10", NULL };
	struct tr_options opt;

	ck_assert_int_eq(parse(&opt, presets), 0);
	ck_assert_uint_eq(opt.model.n, 2);
	ck_assert_int_eq(parse(&opt, repeated), 0);
	ck_assert_uint_eq(opt.model.n, 2);
	ck_assert_str_eq(opt.model.values[1], "fc:10");
}
END_TEST

/* Fails if a bad option or value is accepted rather than answered with exit code 2. */
START_TEST(test_bad_input)
{
	static const char *const cases[][3] = {
		{ "--batch-size=0", NULL }, { "--batch-size=10x", NULL }, { "--workers=-1", NULL },
		{ "--pin-memory=maybe", NULL }, { "--lr=0", NULL }, { "--lr=nan", NULL },
		{ "--optimizer=rmsprop", NULL }, { "--device=tpu", NULL }, { "--epochs=0", NULL },
		{ "--sort=speed", NULL }, { "--frobnicate", NULL }, { "--resume", NULL },
		{ "--momentum=1", NULL }, { "extra", NULL }, { "--epochs", NULL },
		{ "--checkpoint=x.ckpt", "--lr=0.1,0.2" },
		{ "--stream=0", NULL }, { "--stream=x", NULL }, { "--stream=1048577", NULL },
		{ "--stream=", NULL }, { "--memory-budget=0", NULL }, { "--memory-budget=1.5", NULL },
		{ "--memory-budget", NULL }, { "--stream", "--val-split=100" },
		{ "--stream", "--data=synthetic:600" }, { "--data=synthetic", "--stream=4" },
		{ "--threads=0", NULL }, { "--threads=257", NULL }, { "--threads=1,many", NULL },
		{ "--comm=tcp", NULL }, { "--comm-timeout=0", NULL }, { "--comm-timeout=-1", NULL },
		{ "--comm-timeout=x", NULL }, { "--micro-batches=4", NULL },
		{ "--bucket-kb=-1", NULL }, { "--bucket-kb=1k", NULL },
		{ "--deterministic", "--micro-batches=0" }, { "--deterministic", "--stream" },
		/* An empty value in a list: strtok_r() passed over it. */
		{ "--batch-size=,", NULL }, { "--lr=0.1,,0.2", NULL }, { "--threads=1,", NULL },
		{ "--model=,cnn", NULL }, { "--workers=0,,1", NULL },
	};
	struct tr_options opt;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		ck_assert_msg(parse(&opt, cases[i]) == 2, "accepted: %s", cases[i][0]);
}
END_TEST

/*
 * A sim's options are separated by commas, as the grid's values are.
 * Fails if "sim:bw=25GB/s,call_us=20" is split into two devices, if a
 * device after a sim's options is taken as one of them, or if a sim's bad
 * option, or an option after a device that takes none, is not a usage error.
 */
START_TEST(test_device_list)
{
	static const char *const one[] = { "--device=sim:bw=25GB/s,call_us=20", NULL };
	static const char *const three[] = { "--device=cpu,sim:bw=25GB/s,call_us=20,poison,cuda:1",
					     NULL };
	static const char *const bad[][2] = {
		{ "--device=sim:bw=fast", NULL }, { "--device=sim:bw=25GB/s,call_us=x", NULL },
		{ "--device=sim:bw=25GB/s,frob=1", NULL }, { "--device=cpu,bw=25GB/s", NULL },
		{ "--device=sim,call_us=20", NULL }, { "--device=cuda:x", NULL },
		{ "--device=sim:bw=25GB/s,call_us=20,mem=2GiB,poison,bw=1GB/s,bw=2GB/s,bw=3GB/s", NULL },
	};
	struct tr_options opt;
	struct tr_params p;

	ck_assert_int_eq(parse(&opt, one), 0);
	ck_assert_uint_eq(tr_options_runs(&opt), 1);
	ck_assert_int_eq(tr_options_run_params(&opt, 0, &p), 0);
	ck_assert_str_eq(p.device, "sim:bw=25GB/s,call_us=20");
	ck_assert_int_eq(parse(&opt, three), 0);
	ck_assert_uint_eq(opt.device.n, 3);
	ck_assert_str_eq(opt.device.values[0], "cpu");
	ck_assert_str_eq(opt.device.values[1], "sim:bw=25GB/s,call_us=20,poison");
	ck_assert_str_eq(opt.device.values[2], "cuda:1");
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(parse(&opt, bad[i]) == 2, "accepted: %s", bad[i][0]);
}
END_TEST

/*
 * Fails if an output that cannot be written (a missing directory, a
 * directory where a file goes, a file where a directory goes) is taken,
 * or if one that can (a new file, a folder made with its parents,
 * /dev/full, whose failures come at the writes) is refused.
 */
START_TEST(test_outputs)
{
	char dir[] = "/tmp/pinpipe-options-XXXXXX", file[64], a[128], b[128];
	const char *args[3] = { a, NULL, NULL };
	struct tr_options opt;
	FILE *f;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(file, sizeof(file), "%s/file", dir);
	f = fopen(file, "w");
	ck_assert_ptr_nonnull(f);
	fclose(f);
	/* Each an option and the path under the scratch directory. */
	static const char *const refused[][2] = {
		{ "csv", "/none/x.csv" }, { "csv", "" }, { "jsonl", "/file/x.jsonl" },
		{ "checkpoint", "/none/c.ckpt" }, { "checkpoint", "" }, { "checkpoint", "/file/c.ckpt" },
		{ "logdir", "/file" }, { "logdir", "/file/runs" },
	};
	static const char *const taken[][2] = {
		{ "csv", "/x.csv" }, { "csv", "/file" }, { "jsonl", "/x.jsonl" },
		{ "checkpoint", "/c.ckpt" }, { "logdir", "/runs/a/b" }, { "logdir", "" },
	};
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		snprintf(a, sizeof(a), "--%s=%s%s", refused[i][0], dir, refused[i][1]);
		ck_assert_msg(parse(&opt, args) == 2, "accepted: %s", a);
	}
	for (size_t i = 0; i < sizeof(taken) / sizeof(taken[0]); i++) {
		snprintf(a, sizeof(a), "--%s=%s%s", taken[i][0], dir, taken[i][1]);
		ck_assert_msg(parse(&opt, args) == 0, "refused: %s", a);
	}
	snprintf(a, sizeof(a), "--jsonl=/dev/full");
	ck_assert_int_eq(parse(&opt, args), 0);
	/* Nothing was made by the checks. */
	snprintf(b, sizeof(b), "%s/runs", dir);
	ck_assert_int_ne(access(b, F_OK), 0);
	snprintf(b, sizeof(b), "%s/x.csv", dir);
	ck_assert_int_ne(access(b, F_OK), 0);
	unlink(file);
	ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

/* Fails if --columns takes a name that is no column or one twice, or does not keep a good list. */
START_TEST(test_columns)
{
	static const char *const list[] = { "--columns=epoch,test_acc", NULL };
	static const char *const all[] = { "--columns=all", NULL };
	static const char *const bad[] = { "--columns=epoch,speed", NULL };
	static const char *const twice[] = { "--columns=epoch,test_acc,epoch", NULL };
	struct tr_options opt;

	ck_assert_int_eq(parse(&opt, list), 0);
	ck_assert_str_eq(opt.columns, "epoch,test_acc");
	ck_assert_int_eq(parse(&opt, all), 0);
	ck_assert_str_eq(opt.columns, "all");
	ck_assert_int_eq(parse(&opt, bad), 2);
	ck_assert_int_eq(parse(&opt, twice), 2); /* a column shown twice */
	ck_assert_int_eq(parse(&opt, (const char *const[]){ NULL }), 0);
	ck_assert_str_eq(opt.columns, "");
}
END_TEST

/*
 * -q means only the final table, before or after --progress and
 * --no-progress, which otherwise take the last word.  Fails if either of
 * them undoes -q, or if they stop overriding each other.
 */
/*
 * Fails if the folder of an output path is not its text before the last
 * '/' ("." without one, "/" for "/x"), or if the folder check (both
 * programs' outputs, common/args.c) takes a missing folder or a file, or
 * refuses a folder that can take files, or says why in other words.
 */
START_TEST(test_output_folder)
{
	char dir[64], why[256], tmpl[] = "/tmp/pp-options-XXXXXX", file[64];
	FILE *f;

	pp_args_folder_of("x.csv", dir, sizeof(dir));
	ck_assert_str_eq(dir, ".");
	pp_args_folder_of("/x.csv", dir, sizeof(dir));
	ck_assert_str_eq(dir, "/");
	pp_args_folder_of("runs/a/x.csv", dir, sizeof(dir));
	ck_assert_str_eq(dir, "runs/a");
	ck_assert_ptr_nonnull(mkdtemp(tmpl));
	ck_assert_int_eq(pp_args_check_folder(tmpl, why, sizeof(why)), 0);
	snprintf(file, sizeof(file), "%s/f", tmpl);
	ck_assert_ptr_nonnull(f = fopen(file, "w"));
	fclose(f);
	ck_assert_int_eq(pp_args_check_folder(file, why, sizeof(why)), -ENOTDIR);
	ck_assert_str_eq(why + strlen(why) - strlen(" is not a directory"), " is not a directory");
	ck_assert_ptr_nonnull(strstr(why, file));
	unlink(file);
	ck_assert_int_eq(pp_args_check_folder(file, why, sizeof(why)), -ENOENT);
	ck_assert_ptr_nonnull(strstr(why, "No such file or directory"));
	rmdir(tmpl);
}
END_TEST

START_TEST(test_quiet)
{
	static const struct {
		const char *args[3];
		int progress;
	} cases[] = {
		{ { "-q", "--no-progress", NULL }, -1 },
		{ { "-q", "--progress", NULL }, -1 },
		{ { "--no-progress", "-q", NULL }, -1 },
		{ { "--progress", "--quiet", NULL }, -1 },
		{ { "--progress", "--no-progress", NULL }, 0 },
		{ { "--no-progress", "--progress", NULL }, 1 },
	};
	struct tr_options opt;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		ck_assert_int_eq(parse(&opt, cases[i].args), 0);
		ck_assert_msg(opt.progress == cases[i].progress, "%s %s: progress %d, expected %d",
			      cases[i].args[0], cases[i].args[1], opt.progress, cases[i].progress);
	}
}
END_TEST

Suite *pp_test_suite(void)
{
	Suite *s = suite_create("options");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_defaults);
	tcase_add_test(tc, test_stream);
	tcase_add_test(tc, test_ranks);
	tcase_add_test(tc, test_grid);
	tcase_add_test(tc, test_threads);
	tcase_add_test(tc, test_model_lists);
	tcase_add_test(tc, test_bad_input);
	tcase_add_test(tc, test_quiet);
	tcase_add_test(tc, test_device_list);
	tcase_add_test(tc, test_outputs);
	tcase_add_test(tc, test_columns);
	tcase_add_test(tc, test_output_folder);
	suite_add_tcase(s, tc);
	return s;
}
