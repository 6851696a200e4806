/*
 * pinpipe/nn.h: float32 tensors on a device, and small trainable models
 * (Linear, Conv2d, MaxPool2d, ReLU, Flatten, softmax cross-entropy) built
 * from a spec string, with SGD and Adam, PyTorch's default initialisation
 * and checkpoints.
 *
 * Devices: every tensor and model lives on a device from pinpipe/device.h,
 * or on the host when the device is NULL.  The host, the cpu device and
 * the sim device run the CPU kernels (OpenBLAS for the matrix products);
 * a cuda device runs the CUDA kernels (cuBLAS) on the model's stream.  A
 * tensor handed to a model on another device is an error that names both
 * ("expected device cuda:0 but got cpu"), never a crash.
 *
 * Layout is NCHW and the weights are laid out as PyTorch's, so that
 * parameters can be exchanged with a PyTorch model of the same spec.
 *
 * Thread safety: a model or a tensor belongs to one thread at a time.
 * Different models may be used from different threads at once.  A
 * model's compute threads (cfg->threads - 1 of them) block the
 * asynchronous signals (pinpipe/common.h).
 */
#ifndef PINPIPE_NN_H
#define PINPIPE_NN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pinpipe/common.h"
#include "pinpipe/device.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PP_TENSOR_MAX_DIMS 4

/* ------------------------------------------------------------------ tensors */

struct pp_tensor;

/*
 * Creates a contiguous tensor of 'dtype' (PP_DTYPE_F32 or PP_DTYPE_U8) with
 * 'ndim' (1..PP_TENSOR_MAX_DIMS) dimensions of sizes 'shape' (each >= 1) on
 * 'dev' (NULL: host memory).  The contents are zero.  Returns 0 and the
 * tensor in *tensor_p, or -EINVAL (bad dtype or shape), -EOVERFLOW (too
 * many elements), -ENOMEM.  Free with pp_tensor_destroy().
 */
PP_API int pp_tensor_create(struct pp_device *dev, enum pp_dtype dtype, int ndim,
			    const size_t *shape, struct pp_tensor **tensor_p);

/*
 * Wraps memory that the caller owns ('data', on 'dev', NULL: host) as a
 * tensor without copying it, e.g. a batch in a loader's ring slot.  The
 * memory must stay valid until the tensor is destroyed, which does not
 * free it.  Returns 0 or -EINVAL, -ENOMEM.
 */
PP_API int pp_tensor_wrap(struct pp_device *dev, void *data, enum pp_dtype dtype, int ndim,
			  const size_t *shape, struct pp_tensor **tensor_p);

/* Frees the tensor (and its memory unless it was wrapped).  NULL is allowed. */
PP_API void pp_tensor_destroy(struct pp_tensor *tensor);

/* Number of dimensions, and the size of dimension 'i' (0 if i is out of range). */
PP_API int pp_tensor_ndim(const struct pp_tensor *tensor);
PP_API size_t pp_tensor_dim(const struct pp_tensor *tensor, int i);

/* Number of elements (the product of the shape), and the element type. */
PP_API size_t pp_tensor_numel(const struct pp_tensor *tensor);
PP_API enum pp_dtype pp_tensor_dtype(const struct pp_tensor *tensor);

/* The device the tensor lives on (NULL: host), and its name ("cpu" for the host). */
PP_API struct pp_device *pp_tensor_device(const struct pp_tensor *tensor);
PP_API const char *pp_tensor_device_name(const struct pp_tensor *tensor);

/* Pointer to the first element, in the tensor's device memory. */
PP_API void *pp_tensor_data(const struct pp_tensor *tensor);

/*
 * Copies 'bytes' from host memory 'src' into the tensor, or from the tensor
 * into host memory 'dst'.  'bytes' must be the tensor's size in bytes
 * (-EINVAL otherwise).  Both return when the copy is complete.
 */
PP_API int pp_tensor_copy_from_host(struct pp_tensor *tensor, const void *src, size_t bytes);
PP_API int pp_tensor_copy_to_host(const struct pp_tensor *tensor, void *dst, size_t bytes);

/*
 * Copies 'src' into 'dst', across devices if they differ.  Both must have
 * the same dtype and number of elements (-EINVAL otherwise; the shapes may
 * differ).  Returns when the copy is complete.
 */
PP_API int pp_tensor_copy(struct pp_tensor *dst, const struct pp_tensor *src);

/* ------------------------------------------------------------------ models */

enum pp_optimizer_kind {
	PP_OPTIM_SGD = 1,  /* SGD with optional momentum, weight decay, Nesterov */
	PP_OPTIM_ADAM = 2, /* Adam (Kingma & Ba), with L2 weight decay as PyTorch's Adam */
};

/* Optimizer settings; the update rules are PyTorch 1.13's torch.optim.SGD and Adam. */
struct pp_optimizer_config {
	enum pp_optimizer_kind kind;
	float lr;           /* learning rate, > 0 */
	float momentum;     /* SGD: momentum factor, >= 0 (0: plain SGD) */
	float dampening;    /* SGD: dampening of the momentum, >= 0 */
	bool nesterov;      /* SGD: Nesterov momentum (needs momentum > 0, dampening 0) */
	float weight_decay; /* L2 penalty added to the gradient, >= 0 */
	float beta1;        /* Adam: decay of the first moment, in [0, 1) */
	float beta2;        /* Adam: decay of the second moment, in [0, 1) */
	float eps;          /* Adam: term added to the denominator, > 0 */
};

/* A gradient hook's return that ends the step without an update (pp_model_config.grad_hook). */
#define PP_MODEL_GRAD_KEEP 1
/* Whether a model's steps are captured as graphs (pp_model_config.graph). */
enum pp_model_graph {
	PP_MODEL_GRAPH_AUTO = 0, /* on where it pays: a device with a queue of its own (cuda) */
	PP_MODEL_GRAPH_OFF = 1,  /* every step launched op by op */
	PP_MODEL_GRAPH_ON = 2,   /* wherever the model has a stream (cfg.stream): on cpu and
				  * sim too, where the step is recorded as one host function
				  * and replayed (for tests of the logic) */
};

/* How to build a model. */
struct pp_model_config {
	uint32_t in_channels;  /* shape of one input sample: channels */
	uint32_t in_height;    /* rows */
	uint32_t in_width;     /* columns */
	uint32_t num_classes;  /* size of the last layer's output that the loss expects */
	uint64_t seed;         /* seeds the initialisation; same seed, same parameters */
	int threads;           /* CPU threads for a step, >= 1; pp_model_cpu_threads() says how many pay */
	float mean;            /* uint8 inputs become (x / 255 - mean) / std */
	float std;             /* > 0; mean and std finite, not subnormal */
	struct pp_stream *stream; /* cuda: the stream all the model's work goes on (required) */
	/*
	 * CPU: false (the default) runs the model's work with subnormal
	 * numbers flushed to zero, results and operands alike (x86 MXCSR FTZ
	 * and DAZ, set in the model's threads and in the caller's for the
	 * length of each call, then put back), as TensorFlow does: on x86 each
	 * subnormal costs a microcode assist, and training makes them (Adam's
	 * moments of a parameter whose gradient stays zero).  Values below
	 * 1.18e-38 then read as 0; nothing else changes.  true keeps IEEE
	 * gradual underflow, as PyTorch's default, for bit-for-bit comparisons
	 * where subnormals occur.
	 */
	bool keep_denormals;
	/*
	 * Called by each training step once the backward pass has produced
	 * the gradient of the step's loss (before the optimizer's weight
	 * decay) and before the optimizer reads it, once for each range of
	 * the gradient vector (the layout of pp_model_params_read()), the last
	 * layers' first, so that a trainer can average gradients across
	 * processes (pinpipe/comm.h) while the backward pass goes on.
	 * 'grads' is the range's first float in the model's device memory,
	 * 'offset' its index in the vector and 'count' its floats (> 0).
	 * The CPU backend also calls it with 'count' 0 ('grads' NULL,
	 * 'offset' the vector's size) between pieces of the backward pass
	 * that hand over no range, once a range of the step has been: a tick,
	 * for the hook's work in flight to move on (MPI progresses a
	 * non-blocking collective only inside its calls: pp_comm_progress()).
	 * Each layer with parameters is one range, handed over as soon as its
	 * gradient is produced, so that a range's reduction overlaps the rest
	 * of the backward pass.  The CPU backend calls it from the caller's
	 * thread with 'stream' NULL, once the range is final (the other
	 * threads may still be finishing the ranges after it: the hook may use
	 * its own range in place, and nothing else of the gradient).  On
	 * cuda it is called as soon as that layer's backward is queued on the
	 * model's stream, which is passed: work the hook queues there comes
	 * before the rest of the backward.
	 * The hook may change the gradient in place.  It returns 0 to go on;
	 * PP_MODEL_GRAD_KEEP to end the step without an update (the rest of
	 * the backward runs, the running totals count the batch, the step
	 * count does not change: for gradients the caller gathers over several
	 * batches, as fixed micro-batches do); or a negative errno, which
	 * fails the step with that error (its message is the hook's) and
	 * leaves the parameters as they were.  NULL: no hook.  Kept by
	 * pp_model_load() from the caller's config, as the stream is.  A
	 * model with a hook takes no graphs (the field 'graph' below), as a
	 * replayed step would not call it: its steps are launched op by op.
	 */
	int (*grad_hook)(void *arg, float *grads, size_t offset, size_t count,
			 struct pp_stream *stream);
	/*
	 * Called once a training step, after the step's last grad_hook call
	 * and before the optimizer reads the gradient, with the hook's
	 * argument and stream: a hook that started work without waiting for
	 * it (an allreduce in flight, pp_comm_iallreduce()) ends it here, so
	 * that the gradient is whole when it returns (on cuda: in the
	 * stream's order, before the update).  Returns as grad_hook does: 0,
	 * PP_MODEL_GRAD_KEEP (no update this step), or a negative errno that
	 * fails the step with the parameters left as they were.  Not called
	 * when the step failed before it (a grad_hook call among others):
	 * what the hook started is then the caller's to end.  NULL: none.
	 */
	int (*grad_sync)(void *arg, struct pp_stream *stream);
	void *grad_hook_arg;   /* the first argument of grad_hook and grad_sync */
	/*
	 * Steps as graphs: the second time a step of the same kind (training or
	 * evaluation) comes with the same input, label and logits pointers and
	 * batch size (the transfer stage's device slots, each reused batch
	 * after batch), the whole step is captured once as a graph
	 * (pp_stream_begin_capture()) and from then on launched as one call:
	 * some 50 kernel launches a step become one.  Up to 16 keys are kept:
	 * a new one replaces a key seen only once before a captured graph, the
	 * least recently used first.  A larger batch than any
	 * before (new buffers) or pp_model_set_lr() drops them.  When a
	 * capture fails, the model goes on without graphs and says why in
	 * pp_model_get_graph_stats().fallback.  Results are those of the steps
	 * launched op by op.
	 */
	enum pp_model_graph graph;
	struct pp_optimizer_config optim;
};

/*
 * Fills *cfg with the defaults: 1 x 28 x 28 inputs, 10 classes, seed 0,
 * 1 thread, Fashion-MNIST's mean 0.2860 and std 0.3530, no stream,
 * subnormals flushed to zero on the CPU, and Adam with PyTorch's defaults
 * (lr 0.001, betas 0.9 and 0.999, eps 1e-8, no weight decay).
 */
PP_API void pp_model_config_init(struct pp_model_config *cfg);

struct pp_model;

/*
 * Builds a model from 'spec' on 'dev' (NULL: the host) and initialises it
 * as PyTorch does (weights kaiming_uniform with a = sqrt(5), that is
 * U(-1/sqrt(fan_in), 1/sqrt(fan_in)), biases U(-1/sqrt(fan_in), 1/sqrt(fan_in)))
 * from a generator seeded with cfg->seed: on the CPU, two models made with
 * the same spec and seed are bit-identical, and stay so step after step at
 * the same thread count.
 *
 * 'spec' is a preset, "mlp" (flatten,fc:32,relu,fc:10) or "cnn"
 * (conv:6:5,relu,maxpool:2,conv:12:5,relu,maxpool:2,flatten,fc:120,relu,
 * fc:60,relu,fc:10), or comma-separated layers:
 *   conv:OUT:K[:STRIDE[:PAD]]  Conv2d, OUT channels, K x K kernel (stride 1, padding 0)
 *   maxpool:K[:STRIDE]         MaxPool2d (stride K)
 *   relu                       ReLU
 *   flatten                    Flatten (C x H x W -> C*H*W); fc flattens by itself
 *   fc:OUT                     Linear with OUT outputs
 * Each number is at most 65535.  The last layer must produce
 * cfg->num_classes outputs.
 *
 * The CPU kernels run single-threaded OpenBLAS calls and split a batch
 * across cfg->threads threads: on the CPU this loads OpenBLAS when it is
 * not yet (pp_blas_get_info() says how its kernels were chosen) and calls
 * its openblas_set_num_threads(1), which is process-wide where the
 * program links the same OpenBLAS.  On cuda, cfg->stream (a stream of 'dev') is
 * required and all the model's work goes on it; creation loads cuBLAS and
 * makes its first GEMM there, waiting for it and for the stream's work
 * before it (cuBLAS sets itself up at a process's first GEMM, some 0.1 s,
 * which a first training step would otherwise carry).
 *
 * Returns 0 and the model in *model_p, or -EINVAL (a bad spec or config;
 * the message names the layer and what was expected; no stream on cuda),
 * -ENODEV (also: a device whose memory is not the host's and whose streams
 * are not CUDA streams, for which nn has no backend), -ENOMEM, -EIO (a CUDA
 * call failed), -ENOENT (OpenBLAS, for a model on the CPU, cannot be
 * loaded; the message names it).
 */
PP_API int pp_model_create(const char *spec, struct pp_device *dev,
			   const struct pp_model_config *cfg, struct pp_model **model_p);

/* Frees the model and everything it holds.  NULL is allowed. */
PP_API void pp_model_destroy(struct pp_model *model);

/* The expanded spec (presets replaced by their layers). */
PP_API const char *pp_model_spec(const struct pp_model *model);

/* The layers of the preset 'name' ("mlp", "cnn") as pp_model_spec() gives them; NULL for no preset. */
PP_API const char *pp_model_preset(const char *name);

/* Copies the model's optimizer settings (kind, learning rate, momentum, ...) into *cfg_p. */
PP_API void pp_model_get_optimizer(const struct pp_model *model, struct pp_optimizer_config *cfg_p);

/* Number of trainable parameters (floats). */
PP_API size_t pp_model_param_count(const struct pp_model *model);

/* Optimizer steps taken since initialisation (kept across checkpoints). */
PP_API uint64_t pp_model_steps(const struct pp_model *model);

/*
 * Writes a summary to 'buf' (NUL-terminated, truncated to 'size'): one line
 * per layer with its output shape and parameter count, then the total,
 * e.g. "conv 1x28x28 -> 6x24x24 k5 s1 p0   156 params".  Returns the length
 * of the whole summary (as snprintf does).
 */
PP_API int pp_model_summary(const struct pp_model *model, char *buf, size_t size);

/*
 * Copies all parameters, in layer order (each layer's weight then bias, in
 * PyTorch's layout), to or from host memory of 'count' floats, which must
 * equal pp_model_param_count() (-EINVAL otherwise).  Reading waits for the
 * model's work to finish.
 */
PP_API int pp_model_params_read(struct pp_model *model, float *dst, size_t count);
PP_API int pp_model_params_write(struct pp_model *model, const float *src, size_t count);

/*
 * Copies the gradient of the last pp_model_train_step()'s loss (before the
 * optimizer's weight decay; zeros before the first step, and after a load)
 * to host memory, in the layout of pp_model_params_read(); 'count' must
 * equal pp_model_param_count() (-EINVAL otherwise).  Waits for the model's
 * work to finish.
 */
PP_API int pp_model_grads_read(struct pp_model *model, float *dst, size_t count);

/* One parameter tensor of a model: a layer's weight or its bias. */
struct pp_model_param {
	char name[32];  /* "<layer>.<kind>.weight" or "<layer>.<kind>.bias", layers numbered
			   from 0 in the expanded spec: "0.conv.weight", "7.fc.bias" */
	size_t offset;  /* its first float in the vectors of pp_model_params_read() */
	size_t count;   /* its floats */
};

/*
 * Writes the model's parameter tensors, in layer order, to params[0..max)
 * and returns how many the model has (when more than max, the first max
 * were written).  Their counts add up to pp_model_param_count().
 */
PP_API size_t pp_model_param_list(const struct pp_model *model, struct pp_model_param *params,
				  size_t max);

/*
 * One training step on a batch: zero the gradients, forward, softmax
 * cross-entropy (mean over the batch), backward, optimizer update.
 * 'inputs' is a tensor on the model's device of PP_DTYPE_U8 (normalised
 * on the fly with cfg->mean, cfg->std, fused into the first layer's input)
 * or PP_DTYPE_F32, with the batch as its first dimension and the sample
 * shape (or its size) after it; 'labels' points to dim(0) int32 labels in
 * the model's device memory.  The batch loss and the count of correct
 * predictions are added to the model's running totals (pp_model_metrics()).
 * On cuda everything is queued on the model's stream and the host is not
 * made to wait: the inputs must be ready on that stream, and stay unchanged
 * until its work is done.  Returns 0, or -EINVAL (shape or device mismatch,
 * named), -ERANGE (a label outside 0..num_classes-1, on the CPU, where the
 * parameters are then left unchanged; on cuda pp_model_metrics() reports
 * it), -ENOMEM, -EIO (a CUDA call failed).
 */
PP_API int pp_model_train_step(struct pp_model *model, const struct pp_tensor *inputs,
			       const int32_t *labels);

/*
 * Forward pass only, on a batch as in pp_model_train_step(), adding the
 * loss and correct predictions to the running totals.  When 'logits' is
 * not NULL it receives the outputs: an F32 tensor on the model's device of
 * batch x num_classes elements.  Does not change the parameters.
 */
PP_API int pp_model_evaluate(struct pp_model *model, const struct pp_tensor *inputs,
			     const int32_t *labels, struct pp_tensor *logits);

/*
 * Readies the model for steps of 'batch' samples before the first of them,
 * so that a first epoch carries no setting up (optional): makes room for
 * them (otherwise the first step of a batch larger than any before
 * allocates its activations, and drops the graphs captured with the old
 * ones), and on cuda launches once, on scratch, every kernel and GEMM a
 * training step of exactly 'batch' samples launches but the optimizer's,
 * waiting for them, and where the model takes graphs captures that step
 * once, never launched.  A CUDA kernel loads at its first launch:
 * cuBLAS's took some 17 ms a kernel family on an H200 host, and a
 * process's first capture 13 ms, where a whole epoch at batch 1000 takes
 * 15 ms.  cuBLAS picks its kernels by shape, so a
 * trainer whose epochs end with a shorter batch calls it for that size
 * too.  Changes nothing a caller can see: the parameters, the gradient,
 * the optimizer's state and step count and the running totals stay as
 * they were (unless a CUDA call fails), and the gradient hook is not
 * called.  Returns 0, or -EINVAL (a batch of 0; on cuda, a batch past
 * what a step takes, as pp_model_train_step() says), -EOVERFLOW (a batch
 * too large to address), -ENOMEM, -EIO (a CUDA call failed).
 */
PP_API int pp_model_prepare(struct pp_model *model, size_t batch);

/*
 * Sets the optimizer's learning rate (> 0, finite) for the next steps, as a
 * scheduler would; a new rate drops the graphs captured with the old one
 * (each key is then captured again on its second step), so a schedule
 * that changes the rate every step runs without graphs.  Returns 0 or
 * -EINVAL.
 */
PP_API int pp_model_set_lr(struct pp_model *model, float lr);

/* How a model's steps ran (pp_model_config.graph). */
struct pp_model_graph_stats {
	bool enabled;            /* steps are captured as graphs */
	uint64_t captures;       /* graphs captured */
	uint64_t launches;       /* steps run by launching a graph */
	uint64_t eager;          /* steps launched op by op */
	uint64_t drops;          /* times all graphs were dropped (new buffers, new learning rate) */
	char fallback[256];      /* why capturing stopped (the capture's error), or "" */
};

/* Writes the model's graph counters to *stats_p. */
PP_API void pp_model_get_graph_stats(const struct pp_model *model,
				     struct pp_model_graph_stats *stats_p);

/* Running totals since the last reset. */
struct pp_model_metrics {
	double loss_sum;  /* sum over batches of (mean batch loss x batch size) */
	uint64_t correct; /* samples whose largest logit was their label */
	uint64_t samples; /* samples seen */
};

/*
 * Writes the running totals to *metrics_p (waiting for the model's queued
 * work on cuda), and sets them to zero when 'reset'.  On cuda, where a
 * step cannot stop the host to report a label out of range, this returns
 * -ERANGE (and writes nothing) when such a label was seen since the last
 * reset; that sample was left out of the loss and its gradient.
 */
PP_API int pp_model_metrics(struct pp_model *model, bool reset, struct pp_model_metrics *metrics_p);

/*
 * A number the caller keeps with the model and its checkpoints, e.g. what
 * the model's training data was (pinpipe-train keeps the training loader's
 * pp_loader_position.plan_key, and refuses to resume a checkpoint on data
 * in another order).  0 for a new model and for a checkpoint of version 1.
 */
PP_API void pp_model_set_tag(struct pp_model *model, uint64_t tag);
PP_API uint64_t pp_model_tag(const struct pp_model *model);

/*
 * Saves the model to 'path': a versioned binary checkpoint with the spec,
 * the input shape, the parameters, the optimizer's settings and state, the
 * step count, the tag and a CRC-32 of the whole.  The file is written under a
 * temporary name of its own beside 'path' ("PATH.tmp-XXXXXX", created anew:
 * never a file or link found there, nor another writer's), synced and
 * renamed, and the directory synced, so an existing checkpoint is never left
 * half written.  A symbolic link at 'path' is followed (the file it names
 * is replaced, the link stays, and the temporary file is beside that file); a path that names anything but a regular
 * file or nothing (a device such as /dev/null, a FIFO, a directory) is
 * refused with -EINVAL, since the rename would replace it.  The temporary
 * file is locked (flock) while written; one a killed save left (no lock,
 * its status 2 seconds old or more, this user's) is removed by the next
 * save to the same file.  Returns 0 or -errno with the path in the message.
 */
PP_API int pp_model_save(struct pp_model *model, const char *path);

/*
 * Loads a checkpoint written by pp_model_save() into a new model on 'dev'.
 * 'cfg' supplies what a checkpoint does not hold (threads, stream, mean,
 * std); the spec, shapes, parameters and optimizer come from the file.
 * Training continued from it gives the same parameters as if it had never
 * stopped.  Returns 0, or -EINVAL (a bad threads, mean or std in 'cfg'),
 * -EBADMSG (bad magic, unknown version (versions 1 and 2 are read),
 * truncated, a field out of range,
 * CRC mismatch: the message names the file, the offset and what was
 * expected), -errno from opening or reading it.
 */
PP_API int pp_model_load(const char *path, struct pp_device *dev,
			 const struct pp_model_config *cfg, struct pp_model **model_p);

/* ------------------------------------------------------------------ the CPU's threads */

/*
 * The fewest threads (pp_model_config.threads) that run a CPU model's step
 * of 'batch' samples as fast as 'cores' threads would: a step's batch is
 * cut into chunks of at least 4 samples (at most 128 chunks; fewer for a
 * model whose convolutions have more than 128 Ki parameters), whole chunks
 * to a thread, so more threads than take the chunks in the fewest rounds
 * only wait.  For example 2 for a batch of 100 on 2 cores, 13 on 16 cores
 * (25 chunks, 2 rounds), 16 for a batch of 1000 on 16 cores.  Pass the
 * cores the trainer's other threads leave (the loader's workers that
 * decode or inflate; those that only gather in-memory samples use a few
 * percent of a core).  Returns at least 1; 'cores' 0 counts as 1.
 */
PP_API unsigned pp_model_cpu_threads(size_t batch, unsigned cores);

/* ------------------------------------------------------------------ the CPU's BLAS */

/* What the BLAS under the CPU kernels runs on this processor (pp_blas_get_info()). */
struct pp_blas_info {
	char library[16];   /* "OpenBLAS", or "" for a BLAS that does not say what it runs */
	char core[32];      /* the processor OpenBLAS chose its kernels for, as it names it
			     * ("SkylakeX", "Haswell", "Prescott"), or "" */
	char cpu_isa[16];   /* this processor's best vector instructions: "AVX-512", "AVX2", or ""
			     * for neither */
	char chosen_by[24]; /* who chose the core: "OpenBLAS" (its own table of processors),
			     * "OPENBLAS_CORETYPE" (the user's environment), "pinpipe" (named
			     * in OPENBLAS_CORETYPE by the library when it loaded OpenBLAS, as
			     * OpenBLAS does not know the processor); "" with core */
	char fix[48];       /* when the kernels are slower than this processor allows, the
			     * environment setting that chooses the right ones
			     * ("OPENBLAS_CORETYPE=SkylakeX"), else "" */
	char warning[384];  /* when fix is set, one sentence for the user that names the core,
			     * the processor's instructions and the fix, else "" */
};

/*
 * Fills *info with what the BLAS runs, loading it if no CPU model did.
 * OpenBLAS built for many processors (Debian's) chooses its kernels from
 * a table of the processors it knows, and on one it does not know runs
 * its generic kernels (Prescott's: SSE3) without a word, its matrix
 * products then several times slower; OPENBLAS_CORETYPE, read when
 * OpenBLAS is loaded, overrides the choice.  pinpipe loads OpenBLAS
 * itself, when it is first needed, and names the right core in
 * OPENBLAS_CORETYPE for the load where OpenBLAS would choose a slower one
 * (chosen_by "pinpipe"), unless the user's environment names a core or
 * the program links OpenBLAS (loaded then before any of pinpipe's code
 * runs).  'fix' is set when the kernels that run use neither AVX2 nor
 * AVX-512 on a processor that has either, or AVX2 kernels on a processor
 * with AVX-512 that the user did not choose; a core with AVX2 or better
 * that the user chose is taken as meant.  A trainer says the warning
 * once, at start, as pinpipe-train and pinpipe-bench do (pinpipe-train
 * records the core in its rows too).  When OpenBLAS cannot be loaded,
 * only the warning is set, saying why.  Never fails.  The load sets
 * OPENBLAS_CORETYPE and OPENBLAS_NUM_THREADS (one thread: pinpipe runs it
 * on one) for its length, where the user's environment has neither: a
 * program that reads its environment on other threads calls this first,
 * while it has one thread, as pinpipe-train does.
 */
PP_API void pp_blas_get_info(struct pp_blas_info *info);

#ifdef __cplusplus
}
#endif
#endif
