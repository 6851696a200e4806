/*
 * nn/spec.c: model specs ("conv:6:5,relu,maxpool:2,...") and the presets
 * "mlp" and "cnn": parsed into layers with their shapes and the places of
 * their parameters in the model's parameter vector.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common_impl.h"
#include "nn/nn_impl.h"

#define NN_MAX_LAYERS 64
#define NN_MAX_FIELDS 5
#define NN_MAX_DIM 65535

static const struct {
	const char *name;
	const char *spec;
} presets[] = {
	{ "mlp", "flatten,fc:32,relu,fc:10" },
	{ "cnn", "conv:6:5,relu,maxpool:2,conv:12:5,relu,maxpool:2,flatten,fc:120,relu,fc:60,relu,fc:10" },
};

/* Splits 'tok' at ':' into at most NN_MAX_FIELDS fields; returns their number, or -1 if more. */
static int split_fields(char *tok, char **fields)
{
	int n = 0;

	for (char *p = tok;; p++) {
		if (n == NN_MAX_FIELDS)
			return -1;
		fields[n++] = p;
		p = strchr(p, ':');
		if (!p)
			return n;
		*p = '\0';
	}
}

/* Parses a decimal integer in [lo, NN_MAX_DIM]; false if it is not one. */
static bool parse_int(const char *s, int lo, int *v_p)
{
	char *end;
	long v;

	if (*s < '0' || *s > '9')
		return false;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || v < lo || v > NN_MAX_DIM)
		return false;
	*v_p = (int)v;
	return true;
}

static int layer_error(const char *spec, size_t i, const char *tok, const char *what)
{
	return pp_error(-EINVAL, "model spec '%s': layer %zu '%s': %s", spec, i + 1, tok, what);
}

/* Fills l's kind and settings from the fields of one layer, and its shapes from the input's. */
static int parse_layer(const char *spec, size_t i, const char *tok, char **f, int nf,
		       struct nn_layer *l)
{
	const char *name = f[0];
	bool ok = true;

	memset(l, 0, sizeof(*l));
	if (strcmp(name, "conv") == 0) {
		l->kind = NN_CONV;
		l->stride = 1;
		ok = nf >= 3 && nf <= 5 && parse_int(f[1], 1, &l->out_c) && parse_int(f[2], 1, &l->k) &&
		     (nf < 4 || parse_int(f[3], 1, &l->stride)) && (nf < 5 || parse_int(f[4], 0, &l->pad));
		if (!ok)
			return layer_error(spec, i, tok,
					   "expected conv:OUT:K[:STRIDE[:PAD]] with positive integers up to 65535 (PAD from 0)");
	} else if (strcmp(name, "maxpool") == 0) {
		l->kind = NN_MAXPOOL;
		ok = nf >= 2 && nf <= 3 && parse_int(f[1], 1, &l->k);
		l->stride = l->k;
		ok = ok && (nf < 3 || parse_int(f[2], 1, &l->stride));
		if (!ok)
			return layer_error(spec, i, tok,
					   "expected maxpool:K[:STRIDE] with positive integers up to 65535");
	} else if (strcmp(name, "fc") == 0) {
		l->kind = NN_LINEAR;
		if (nf != 2 || !parse_int(f[1], 1, &l->out_c))
			return layer_error(spec, i, tok, "expected fc:OUT with a positive integer up to 65535");
	} else if (strcmp(name, "relu") == 0 || strcmp(name, "flatten") == 0) {
		l->kind = name[0] == 'r' ? NN_RELU : NN_FLATTEN;
		if (nf != 1)
			return layer_error(spec, i, tok, "takes no arguments");
	} else {
		return layer_error(spec, i, tok,
				   "unknown layer (expected conv, maxpool, relu, flatten or fc)");
	}
	return 0;
}

/* Sets the output shape of l from its input shape (already in l); error if it does not fit. */
static int shape_layer(const char *spec, size_t i, const char *tok, struct nn_layer *l)
{
	char what[160];

	switch (l->kind) {
	case NN_CONV:
	case NN_MAXPOOL: {
		int p = l->kind == NN_CONV ? l->pad : 0;

		if (l->in_h == 1 && l->in_w == 1 && l->kind == NN_CONV && l->k > 1) {
			snprintf(what, sizeof(what), "needs an image input, got %d flat features", l->in_c);
			return layer_error(spec, i, tok, what);
		}
		if (l->k > l->in_h + 2 * p || l->k > l->in_w + 2 * p) {
			snprintf(what, sizeof(what), "kernel %d does not fit the %dx%d input (padding %d)",
				 l->k, l->in_h, l->in_w, p);
			return layer_error(spec, i, tok, what);
		}
		if (l->kind == NN_MAXPOOL)
			l->out_c = l->in_c;
		l->out_h = (l->in_h + 2 * p - l->k) / l->stride + 1;
		l->out_w = (l->in_w + 2 * p - l->k) / l->stride + 1;
		break;
	}
	case NN_RELU:
		l->out_c = l->in_c;
		l->out_h = l->in_h;
		l->out_w = l->in_w;
		break;
	case NN_FLATTEN:
		l->out_c = l->in_c * l->in_h * l->in_w;
		l->out_h = l->out_w = 1;
		break;
	case NN_LINEAR:
		l->in_c = l->in_c * l->in_h * l->in_w;
		l->in_h = l->in_w = 1;
		l->out_h = l->out_w = 1;
		break;
	}
	l->in_size = (size_t)l->in_c * l->in_h * l->in_w;
	l->out_size = (size_t)l->out_c * l->out_h * l->out_w;
	if (l->kind == NN_CONV)
		l->n_w = (size_t)l->out_c * l->in_c * l->k * l->k;
	else if (l->kind == NN_LINEAR)
		l->n_w = (size_t)l->out_c * l->in_size;
	l->n_b = l->kind == NN_CONV || l->kind == NN_LINEAR ? (size_t)l->out_c : 0;
	if (l->out_size > (size_t)1 << 28 || l->n_w > (size_t)1 << 30) {
		snprintf(what, sizeof(what), "too large (%zu outputs, %zu weights per sample)",
			 l->out_size, l->n_w);
		return layer_error(spec, i, tok, what);
	}
	return 0;
}

PP_API const char *pp_model_preset(const char *name)
{
	for (size_t i = 0; name != NULL && i < PP_ARRAY_SIZE(presets); i++)
		if (strcmp(name, presets[i].name) == 0)
			return presets[i].spec;
	return NULL;
}

int pp_nn_spec_parse(const char *spec, int c, int h, int w, struct nn_layer **layers_p,
		  size_t *n_p, char **expanded_p)
{
	struct nn_layer *layers = NULL;
	char *text = NULL, *expanded = NULL, *save = NULL;
	size_t n = 0, off = 0;
	int ret;

	if (!spec || !*spec)
		return pp_error(-EINVAL, "model spec is empty (expected a preset, mlp or cnn, or layers)");
	for (size_t i = 0; i < PP_ARRAY_SIZE(presets); i++)
		if (strcmp(spec, presets[i].name) == 0)
			spec = presets[i].spec;
	if (c < 1 || h < 1 || w < 1 || c > NN_MAX_DIM || h > NN_MAX_DIM || w > NN_MAX_DIM)
		return pp_error(-EINVAL, "model spec '%s': input shape %dx%dx%d (expected 1..%d each)",
				spec, c, h, w, NN_MAX_DIM);
	text = strdup(spec);
	expanded = strdup(spec);
	layers = calloc(NN_MAX_LAYERS, sizeof(*layers));
	if (!text || !expanded || !layers) {
		ret = pp_error(-ENOMEM, "model spec: out of memory");
		goto err_free;
	}
	for (char *tok = strtok_r(text, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char copy[64], *fields[NN_MAX_FIELDS];
		int nf;

		if (n == NN_MAX_LAYERS) {
			ret = pp_error(-EINVAL, "model spec '%s': more than %d layers", spec, NN_MAX_LAYERS);
			goto err_free;
		}
		snprintf(copy, sizeof(copy), "%s", tok);
		nf = split_fields(tok, fields);
		if (nf < 0) {
			ret = layer_error(spec, n, copy, "too many ':' fields");
			goto err_free;
		}
		ret = parse_layer(spec, n, copy, fields, nf, &layers[n]);
		if (ret)
			goto err_free;
		layers[n].in_c = n ? layers[n - 1].out_c : c;
		layers[n].in_h = n ? layers[n - 1].out_h : h;
		layers[n].in_w = n ? layers[n - 1].out_w : w;
		ret = shape_layer(spec, n, copy, &layers[n]);
		if (ret)
			goto err_free;
		layers[n].need_din = off > 0;
		layers[n].w_off = off;
		layers[n].b_off = off + layers[n].n_w;
		off += layers[n].n_w + layers[n].n_b;
		n++;
	}
	if (n == 0 || strstr(spec, ",,") || spec[0] == ',' || spec[strlen(spec) - 1] == ',') {
		ret = pp_error(-EINVAL,
			       "model spec '%s': empty layer (expected layers separated by single commas)",
			       spec);
		goto err_free;
	}
	for (size_t i = 0; i < n; i++) {
		size_t next = i + 1 < n && layers[i + 1].kind == NN_RELU ? i + 2 : i + 1;

		layers[i].sparse_dout = layers[i].kind == NN_CONV && next < n &&
					layers[next].kind == NN_MAXPOOL && layers[next].stride >= layers[next].k;
	}
	free(text);
	*layers_p = layers;
	*n_p = n;
	*expanded_p = expanded;
	return 0;

err_free:
	free(layers);
	free(expanded);
	free(text);
	return ret;
}
