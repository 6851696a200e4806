/*
 * nn/optim.c: SGD and Adam on the CPU, following torch.optim.SGD and
 * torch.optim.Adam of PyTorch 1.13 (single-tensor, non-foreach paths):
 *
 * SGD:  g = grad + wd p;  with momentum: b = g at the first step, else
 *       b = momentum b + (1 - dampening) g;  g = nesterov ? g + momentum b : b;
 *       p -= lr g
 * Adam: g = grad + wd p;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
 *       p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
 *
 * Built with -fno-math-errno (nn/Makefile.inc), so that sqrtf is one
 * instruction: the square roots here are of non-negative numbers.
 */
#include "config.h"

#include <errno.h>
#include <math.h>

#include "common/internal.h"
#include "nn/nn_internal.h"

int nn_optim_check(const struct pp_optimizer_config *c)
{
	if (c->kind != PP_OPTIM_SGD && c->kind != PP_OPTIM_ADAM)
		return pp_error(-EINVAL, "optimizer: unknown kind %d (expected sgd or adam)", (int)c->kind);
	if (!(c->lr > 0.0f) || !isfinite(c->lr))
		return pp_error(-EINVAL, "optimizer: learning rate %g (expected > 0)", (double)c->lr);
	if (!(c->weight_decay >= 0.0f) || !isfinite(c->weight_decay))
		return pp_error(-EINVAL, "optimizer: weight decay %g (expected >= 0)", (double)c->weight_decay);
	if (c->kind == PP_OPTIM_SGD) {
		if (!(c->momentum >= 0.0f) || !(c->dampening >= 0.0f))
			return pp_error(-EINVAL, "sgd: momentum %g, dampening %g (expected >= 0)",
					(double)c->momentum, (double)c->dampening);
		if (c->nesterov && (c->momentum <= 0.0f || c->dampening != 0.0f))
			return pp_error(-EINVAL, "sgd: Nesterov momentum requires a momentum and zero dampening");
	} else {
		if (!(c->beta1 >= 0.0f && c->beta1 < 1.0f) || !(c->beta2 >= 0.0f && c->beta2 < 1.0f))
			return pp_error(-EINVAL, "adam: betas %g, %g (expected in [0, 1))",
					(double)c->beta1, (double)c->beta2);
		if (!(c->eps > 0.0f))
			return pp_error(-EINVAL, "adam: eps %g (expected > 0)", (double)c->eps);
	}
	return 0;
}

static void sgd_step(struct nn_optim *o, float *p, const float *grad, size_t n)
{
	const struct pp_optimizer_config *c = &o->cfg;
	const float lr = c->lr, wd = c->weight_decay, mom = c->momentum, damp = 1.0f - c->dampening;
	float *b = o->buf1;

	for (size_t i = 0; i < n; i++) {
		float g = grad[i];

		if (wd != 0.0f)
			g += wd * p[i];
		if (mom != 0.0f) {
			b[i] = o->t == 1 ? g : mom * b[i] + damp * g;
			g = c->nesterov ? g + mom * b[i] : b[i];
		}
		p[i] -= lr * g;
	}
}

static void adam_step(struct nn_optim *o, float *p, const float *grad, size_t n)
{
	const struct pp_optimizer_config *c = &o->cfg;
	const float b1 = c->beta1, b2 = c->beta2, wd = c->weight_decay, eps = c->eps;
	/* bias corrections in double, as PyTorch computes them in Python floats */
	const double bc1 = 1.0 - pow(b1, (double)o->t);
	const float bc2_sqrt = (float)sqrt(1.0 - pow(b2, (double)o->t));
	const float step = (float)(c->lr / bc1);
	float *m = o->buf1, *v = o->buf2;
	size_t i = 0;

	/* 4 at a time, the same operations in the same order as the scalar tail */
	for (; i + 4 <= n; i += 4) {
		nn_f32x4 g, pv, mv, vv, root;

		memcpy(&g, grad + i, sizeof(g));
		memcpy(&pv, p + i, sizeof(pv));
		memcpy(&mv, m + i, sizeof(mv));
		memcpy(&vv, v + i, sizeof(vv));
		if (wd != 0.0f)
			g += wd * pv;
		mv = b1 * mv + (1.0f - b1) * g;
		vv = b2 * vv + (1.0f - b2) * g * g;
		for (int k = 0; k < 4; k++)
			root[k] = sqrtf(vv[k]);
		pv -= step * (mv / (root / bc2_sqrt + eps));
		memcpy(p + i, &pv, sizeof(pv));
		memcpy(m + i, &mv, sizeof(mv));
		memcpy(v + i, &vv, sizeof(vv));
	}
	for (; i < n; i++) {
		float g = grad[i];

		if (wd != 0.0f)
			g += wd * p[i];
		m[i] = b1 * m[i] + (1.0f - b1) * g;
		v[i] = b2 * v[i] + (1.0f - b2) * g * g;
		p[i] -= step * (m[i] / (sqrtf(v[i]) / bc2_sqrt + eps));
	}
}

void nn_optim_step_cpu(struct nn_optim *o, float *p, const float *g, size_t n)
{
	o->t++;
	if (o->cfg.kind == PP_OPTIM_SGD)
		sgd_step(o, p, g, n);
	else
		adam_step(o, p, g, n);
}
