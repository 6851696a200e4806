/*
 * nn/nn_impl.h: what the runtime of nn/ shares (the files at nn/'s top:
 * model, spec, checkpoint, graph, tensor, devmem) and what it asks of a
 * backend: the tensor and model structures, the layer descriptions, the
 * optimizer's state, and struct nn_backend, the ops table of a backend,
 * whose own state is behind m->ctx (nn/cpu/cpu_impl.h, nn/cuda/cuda_impl.h).
 */
#ifndef PP_NN_IMPL_H
#define PP_NN_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "pinpipe/nn.h"

struct pp_tensor {
	struct pp_device *dev;  /* NULL: host memory */
	enum pp_dtype dtype;
	int ndim;
	size_t shape[PP_TENSOR_MAX_DIMS]; /* elements per dimension */
	size_t numel;           /* product of shape */
	void *data;             /* numel elements of dtype, on dev */
	bool owned;             /* free data on destroy */
};

/* Host or device memory for the nn module, zeroed (nn/devmem.c). */
int pp_nn_mem_alloc(struct pp_device *dev, size_t bytes, void **ptr_p);
void pp_nn_mem_free(struct pp_device *dev, void *ptr);
/* Copies bytes between two places, each on its device (NULL: host); returns when done. */
int pp_nn_mem_copy(struct pp_device *dst_dev, void *dst, struct pp_device *src_dev, const void *src,
		size_t bytes);
/* The name of a device for messages: "cpu" for the host. */
const char *pp_nn_device_name(const struct pp_device *dev);
/* True when the CPU can use the device's memory in place (the host, cpu, sim). */
bool pp_nn_host_addressable(const struct pp_device *dev);
/* True when the device's memory is the host's own (the host, cpu): one place for tensors. */
bool pp_nn_host_is_device(const struct pp_device *dev);
/* The cudaStream_t of a stream of a cuda device (NULL for NULL). */
void *pp_nn_cuda_stream(struct pp_stream *stream);

enum nn_layer_kind {
	NN_CONV = 1,
	NN_MAXPOOL,
	NN_RELU,
	NN_FLATTEN,
	NN_LINEAR,
};

/* One layer: its geometry per sample and where its parameters are. */
struct nn_layer {
	enum nn_layer_kind kind;
	int in_c, in_h, in_w;    /* input shape of one sample (linear: in_c features, 1 x 1) */
	int out_c, out_h, out_w; /* output shape of one sample */
	int k, stride, pad;      /* conv, maxpool: kernel size, stride, zero padding (pixels) */
	size_t in_size;          /* in_c * in_h * in_w floats */
	size_t out_size;         /* out_c * out_h * out_w floats */
	size_t w_off;            /* offset of the weight in the parameter vector (floats) */
	size_t n_w;              /* conv (out_c, in_c, k, k), linear (out_c, in_c) floats */
	size_t b_off;            /* offset of the bias (out_c floats) */
	size_t n_b;              /* out_c for conv and linear, else 0 */
	bool need_din;           /* the backward must produce the input gradient
				  * (a trainable layer precedes) */
	bool sparse_dout;        /* conv: a max-pool (after a ReLU or not) with stride >= its kernel
				  * follows, so at most one output in each pooling window has a
				  * gradient; the CPU backward of the three is pp_nn_conv2d_backward_pooled() */
};

/* Parses a spec for input c x h x w into layers (malloc'd, *n_p of them); message on error. */
int pp_nn_spec_parse(const char *spec, int c, int h, int w, struct nn_layer **layers_p,
		  size_t *n_p, char **expanded_p);

/* ------------------------------------------------------------------ optimizers */

/* Optimizer state: sized by the parameter count. */
struct nn_optim {
	struct pp_optimizer_config cfg;
	uint64_t t;   /* steps taken */
	float *buf1;  /* SGD momentum buffer, Adam first moment (n) */
	float *buf2;  /* Adam second moment (n); NULL for SGD */
};

/* Checks an optimizer's settings: 0, or -EINVAL with a message (nn/model.c). */
int pp_nn_optim_check(const struct pp_optimizer_config *cfg);

/* ------------------------------------------------------------------ models */

struct nn_graphs;

/* A batch to run through a model. */
struct nn_job {
	bool train;           /* backward and update too */
	size_t batch;         /* samples */
	const uint8_t *in_u8; /* (batch, in_size) or NULL */
	const float *in_f32;  /* (batch, in_size) or NULL */
	const int32_t *labels; /* (batch) */
	float *logits;        /* (batch, classes) on the model's device, or NULL */
	bool warm;            /* train's kernels without their effects: no hook, no update, no
			       * step counted (nn_backend.warm) */
};

/*
 * What the runtime asks of a backend, the way a model runs on its kind of
 * device: the CPU kernels and the step's threads (nn/cpu/), where the host
 * addresses the device's memory (the host, cpu, sim), or else the CUDA
 * kernels (nn/cuda/).  A backend keeps its own state in m->ctx, made by
 * setup() and freed by teardown(); the runtime never looks inside it.
 */
struct nn_backend {
	/* Makes m->ctx, what the backend needs once the parameters exist. */
	int (*setup)(struct pp_model *m);
	/* Frees it and sets m->ctx to NULL.  Safe after a failed setup (m->ctx NULL or partial). */
	void (*teardown)(struct pp_model *m);
	/* Allocates what a batch of m->capacity samples needs beyond the activations. */
	int (*reserve)(struct pp_model *m);
	/* Runs a job: forward and loss, and backward and update when job->train. */
	int (*run)(struct pp_model *m, struct nn_job *job);
	/* Writes the running totals, resetting them when asked. */
	int (*metrics)(struct pp_model *m, bool reset, struct pp_model_metrics *metrics_p);
	/* run() queues its work on the model's stream (cfg.stream) rather than doing it */
	bool queued;
	/* Queued backends: makes the device's copy of the host's state current before a
	 * capture (outside it).  (optional) */
	int (*prepare)(struct pp_model *m);
	/* Queued backends: the host's bookkeeping of a step launched as a graph, which
	 * run() left undone while m->capturing (steps taken, samples).  (optional) */
	void (*account)(struct pp_model *m, const struct nn_job *job);
	/* Queued backends: launches once, on scratch, what a training step of 'batch'
	 * samples launches (pp_model_prepare()), leaving every state as it was and the
	 * hooks uncalled; waits for it.  (optional) */
	int (*warm)(struct pp_model *m, size_t batch);
};

extern const struct nn_backend pp_nn_backend_cpu;
extern const struct nn_backend pp_nn_backend_cuda;

/* Checks the settings a checkpoint does not hold (threads, mean, std); -EINVAL with a message. */
int pp_nn_model_check_runtime(const struct pp_model_config *cfg);

/*
 * True for layer i when it is the ReLU or max-pool behind a convolution
 * whose pooled kernels run them too (l->sparse_dout: the CPU's
 * pp_nn_conv2d_backward_pooled(), cuda's fused conv + ReLU + pool): the
 * layer's own pass is then skipped.
 */
bool pp_nn_behind_pooled_conv(const struct pp_model *m, size_t i);

/*
 * Layer i, or the first layer below it that is not a Flatten: a Flatten
 * changes only the shape, so its output is its input's and its input's
 * gradient its output's.  SIZE_MAX (past the bottom: the model's input)
 * where all of them are Flattens, or i is SIZE_MAX.
 */
size_t pp_nn_past_flattens(const struct pp_model *m, size_t i);

/* Waits for the model's queued work (nn_backend.queued); 0 or -errno. */
int pp_nn_model_wait(struct pp_model *m);

/*
 * Hands the gradient's range [offset, offset + count) to the model's
 * gradient hook (pp_model_config.grad_hook), if any: 0, PP_MODEL_GRAD_KEEP
 * (no update this step) or its error.
 */
int pp_nn_model_grads_ready(struct pp_model *m, size_t offset, size_t count);

/*
 * Calls the gradient hook with count 0 between pieces of the backward
 * pass, once some ranges have been handed over: 0, PP_MODEL_GRAD_KEEP or
 * its error.
 */
int pp_nn_model_grads_tick(struct pp_model *m);

/*
 * The end of a step's gradient ranges: the model's grad_sync
 * (pp_model_config.grad_sync), if any: 0, PP_MODEL_GRAD_KEEP or its error.
 */
int pp_nn_model_grads_sync(struct pp_model *m);

/* Activations and per-batch buffers for 'batch' samples (nn/model.c). */
int pp_nn_model_reserve(struct pp_model *m, size_t batch);

/*
 * Steps as graphs (nn/graph.c): set up from cfg.graph once the backend is
 * (0 or -EINVAL: graphs asked for and no stream), freed, all dropped (their
 * buffers moved, the learning rate changed), and a step run through them:
 * launched as a graph, captured, or run by the backend op by op.
 */
int pp_nn_graph_init(struct pp_model *m);
void pp_nn_graph_free(struct pp_model *m);
void pp_nn_graph_drop(struct pp_model *m);
int pp_nn_graph_run(struct pp_model *m, struct nn_job *job);

struct pp_model {
	struct pp_device *dev;    /* NULL: host */
	const struct nn_backend *backend;
	void *ctx;                /* the backend's state (struct nn_cpu, struct nn_cuda) */
	struct pp_model_config cfg;
	char *spec;               /* expanded */
	uint64_t tag;             /* the caller's, kept in checkpoints (pp_model_set_tag()) */
	struct nn_layer *layers;  /* n_layers */
	size_t n_layers;
	size_t n_params;          /* floats */
	float *params;            /* (n_params) on dev */
	float *grads;             /* (n_params) on dev */
	struct nn_optim optim;    /* buffers on dev */
	bool optim_t_set;         /* optim.t set on the host (a new model, a checkpoint's load):
				   * a backend that keeps its own copy takes it again */
	/* activations, allocated for 'capacity' samples at the first step that needs them */
	size_t capacity;          /* samples */
	float *input;             /* (capacity, in_size of layer 0): the normalised batch */
	float **acts;             /* n_layers x (capacity, out_size) */
	float **dacts;            /* n_layers x (capacity, out_size) */
	int32_t **pool_idx;       /* n_layers x (capacity, out_size) for maxpool, else NULL */
	struct pp_model_metrics metrics; /* cuda: samples only; the sums on the device */
	struct nn_graphs *graphs; /* the captured steps (nn/graph.c), NULL without graphs */
	bool capturing;           /* run() is being captured: its work is recorded, not done */
};

/* Builds a model with its buffers, parameters not yet set (nn/model.c). */
int pp_nn_model_new(const char *spec, struct pp_device *dev, const struct pp_model_config *cfg,
		 struct pp_model **model_p);

#endif
