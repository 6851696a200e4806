/*
 * trainer/options.h: pinpipe-train's command line.  Options that take a
 * comma-separated list of values (device, batch size, workers, pin_memory,
 * lr, model, optimizer) span a grid: every combination is a run.
 */
#ifndef PP_TRAINER_OPTIONS_H
#define PP_TRAINER_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pinpipe/nn.h"
#include "trainer/results.h"

#define TR_MAX_VALUES 16

/* One axis of the grid: the values given for one option. */
struct tr_axis {
	char values[TR_MAX_VALUES][160];
	size_t n;
};

/* The most epochs a run trains (--epochs); no checkpoint of a run lies past them. */
#define TR_MAX_EPOCHS 100000u

/* --bucket-kb's default: a bucket a layer, the fastest measured (bench/README.md). */
#define TR_BUCKET_KB 0u

struct tr_options {
	struct tr_axis device, batch_size, workers, pin_memory, lr, model, optimizer, threads;
	char data[4096];          /* dataset directory, or "synthetic[:COUNT]" */
	bool data_from_env;       /* data is $PINPIPE_DATA's (no --data given) */
	unsigned epochs;
	uint64_t seed;
	double momentum;
	double weight_decay;
	bool nesterov;
	unsigned prefetch;        /* ring slots */
	uint64_t val_split;       /* training samples held out for validation */
	bool shuffle;
	bool drop_last;
	bool eval;                /* evaluate on the test set after each epoch */
	char checkpoint[4096];    /* "" for none */
	bool resume;
	bool stream;              /* stream the shards (PP_LOADER_CACHE_STREAM), not decode them whole */
	uint32_t window_chunks;   /* --stream: chunks shuffled together; 0: the loader's default */
	size_t memory_budget;     /* bytes each loader may allocate; 0: no limit */
	uint32_t image_size;      /* JPEGs (a folder, or shards of them): the decoded side */
	uint64_t max_steps;       /* 0: no limit */
	bool keep_denormals;      /* pp_model_config.keep_denormals */
	enum pp_model_graph graph; /* pp_model_config.graph */
	char sort[32];            /* column, "-column", or "": runs by mean epoch_s, epochs in order */
	char columns[512];        /* the table's columns: "", "all" or a list (tr_results_print_table()) */
	char csv[4096];
	char jsonl[4096];
	char logdir[4096];
	int progress;             /* 1 bar, 0 plain lines, -1 quiet */
	char comm[16];            /* the communicator: auto, local, mpi, nccl */
	double comm_timeout;      /* seconds each collective may take */
	bool deterministic;       /* N ranks give one process's parameters bit for bit */
	unsigned micro_batches;   /* --deterministic: micro-batches per global batch; 0: default */
	unsigned bucket_kb;       /* gradients averaged in buckets of at least this many KiB */
};

/*
 * Parses argv into *opt.  Returns 0 to run, 1 when --help or --version was
 * printed, or 2 after printing a one-line error to stderr: a bad option or
 * value, a sim's option the sim does not take, or an output that cannot be
 * written (--csv, --jsonl, --checkpoint's folder, --logdir), checked on the
 * file system now so that it fails before any training.
 */
int tr_options_parse(int argc, char **argv, struct tr_options *opt);

/* Number of runs in the grid: the product of the axes' sizes. */
size_t tr_options_runs(const struct tr_options *opt);

/*
 * The compute threads of a run given 'cores' processors: its --threads, or
 * for "auto" (p->threads 0) those that pay for its batch
 * (pp_model_cpu_threads()) on the cores its loader's workers leave.
 * Workers that inflate streamed shards (--stream) take a core each;
 * workers that gather batches of samples decoded in memory use a few
 * percent of one, and leave every core to the step.
 */
unsigned tr_options_threads(const struct tr_options *opt, const struct tr_params *p, unsigned cores);

/* Writes the parameters of run i (0-based, last axis fastest) into *p. */
int tr_options_run_params(const struct tr_options *opt, size_t i, struct tr_params *p);

#endif
