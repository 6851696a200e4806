/*
 * trainer/resume.c: a run of pinpipe-train placed where its --resume
 * checkpoint left it (trainer/resume.h).
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "trainer/resume.h"
#include "trainer/run.h"

/*
 * The plan key of the job's training data with several ranks: that of one
 * process's loader with the global batch (ranks x --batch-size), so that a
 * checkpoint resumes at any number of ranks with the same global batch.
 * A loader of rank 0 of 1 is made for it and begins epoch 0.  Where the
 * ranks' plan depends on their number, the key holds it too, so that a
 * resume at another number is refused: --stream (chunks dealt to the ranks,
 * each padded to the largest share), and --drop-last (without
 * --deterministic) when the ranks do not divide the training samples.
 */
static int job_plan_key(const struct tr_options *opt, const struct tr_params *p,
			const struct tr_split *s, const struct tr_run *r, uint64_t *key_p)
{
	struct pp_loader_config lc;
	struct pp_loader_position pos;
	struct pp_loader *l;
	int ret;

	tr_loader_config(opt, p, s, true, r, &lc);
	lc.rank = 0;
	lc.world_size = 1;
	lc.batch_size = p->batch_size * (uint32_t)r->dist->size;
	lc.workers = 0;
	lc.pin_memory = false;
	lc.prefetch = 1;
	ret = pp_loader_create(&lc, &l);
	if (ret < 0)
		return ret;
	ret = pp_loader_begin_epoch(l, 0);
	if (ret == 0)
		ret = pp_loader_get_position(l, &pos);
	if (ret == 0 && (s->ds == NULL || (opt->drop_last && !opt->deterministic &&
					   pp_loader_info(l)->count % (uint64_t)r->dist->size != 0)))
		pos.plan_key = (pos.plan_key ^ (uint64_t)r->dist->size) * 0x9e3779b97f4a7c15ull;
	pp_loader_destroy(l);
	if (ret == 0)
		*key_p = pos.plan_key;
	return ret;
}

int tr_begin_epoch(struct tr_run *r, unsigned epoch, bool resuming, uint64_t steps,
		   uint64_t batches, uint64_t key)
{
	struct pp_loader_position pos;
	int ret = pp_transfer_begin_epoch(r->train_xfer, epoch);

	if (ret < 0 || !resuming || batches == 0 || (steps % batches == 0 && key == 0))
		return ret;
	ret = pp_loader_get_position(r->train_loader, &pos);
	if (ret < 0)
		return ret;
	pos.epoch = epoch;
	pos.batch = steps % batches;
	if (key != 0)
		pos.plan_key = key;
	return pp_transfer_resume(r->train_xfer, &pos);
}

int tr_resume_check(const struct tr_options *opt, const struct tr_params *p,
		    struct pp_model *model, bool say, char *why, size_t size)
{
	const char *want = pp_model_preset(p->model) ? pp_model_preset(p->model) : p->model;
	struct pp_optimizer_config o;
	const char *kind;

	pp_model_get_optimizer(model, &o);
	kind = o.kind == PP_OPTIM_SGD ? "sgd" : "adam";
	if (strcmp(want, pp_model_spec(model)) != 0)
		snprintf(why, size, "--resume: %s holds the model '%s', not --model=%s ('%s'): resume "
			 "it with its own model", opt->checkpoint, pp_model_spec(model), p->model, want);
	else if (strcmp(p->optimizer, kind) != 0)
		snprintf(why, size, "--resume: %s holds the optimizer %s, not --optimizer=%s: resume "
			 "it with its own optimizer", opt->checkpoint, kind, p->optimizer);
	else if (o.momentum != (float)opt->momentum || o.weight_decay != (float)opt->weight_decay ||
		 o.nesterov != opt->nesterov)
		snprintf(why, size, "--resume: %s holds the optimizer's --momentum=%g "
			 "--weight-decay=%g%s, not --momentum=%g --weight-decay=%g%s", opt->checkpoint,
			 (double)o.momentum, (double)o.weight_decay, o.nesterov ? " --nesterov" : "",
			 opt->momentum, opt->weight_decay, opt->nesterov ? " --nesterov" : "");
	else if (o.lr != (float)p->lr) {
		if (say)
			fprintf(stderr, "pinpipe-train: --resume: %s was trained at the learning rate "
				"%g: it goes on at --lr=%g\n", opt->checkpoint, (double)o.lr, p->lr);
		return pp_model_set_lr(model, (float)p->lr);
	} else
		return 0;
	return -EINVAL;
}

uint64_t tr_resume_file_crc(const char *path)
{
	unsigned char b[4];
	FILE *f = fopen(path, "rb");
	uint64_t crc = 0;

	if (f != NULL && fseek(f, -4, SEEK_END) == 0 && fread(b, 1, 4, f) == 4)
		crc = (uint64_t)b[0] | (uint64_t)b[1] << 8 | (uint64_t)b[2] << 16 | (uint64_t)b[3] << 24;
	if (f != NULL)
		fclose(f);
	return crc;
}

void tr_resume_other_order(char *why, size_t len, const char *path, bool ranks)
{
	snprintf(why, len, "--resume: %s was written by a run whose training data came in another "
		 "order (%s differ%s); resume it with the options it was written with", path,
		 ranks ? "a global batch of ranks x --batch-size, --data, --seed, --val-split, "
			 "--no-shuffle, --drop-last or --deterministic"
		       : "--data, --seed, --batch-size, --val-split, --no-shuffle, --drop-last, "
			 "--deterministic or the --stream window",
		 ranks ? ", or, with --stream or --drop-last, the number of ranks" : "");
}

int tr_resume_place(const struct tr_options *opt, const struct tr_params *p,
		    const struct tr_split *train, unsigned run, struct tr_run *r,
		    struct tr_place *pl, char *why, size_t len)
{
	uint64_t steps, batches;
	unsigned first_epoch;
	int ret;

	memset(pl, 0, sizeof(*pl));
	/* The loader knows an epoch's batch count once one is begun (the same for
	 * every epoch of one rank, in memory or streamed): it places a resumed
	 * model's steps. */
	ret = pp_transfer_begin_epoch(r->train_xfer, 0);
	if (ret < 0)
		return ret;
	batches = pp_loader_batches_per_epoch(r->train_loader);
	steps = pp_model_steps(r->model);
	/* A resumed model's steps place it in the plan: epoch steps / batches,
	 * at batch steps % batches.  No run goes past TR_MAX_EPOCHS epochs, so
	 * a count beyond them is no position of this plan: a damaged file. */
	if (steps != 0 && (batches == 0 || steps / batches > TR_MAX_EPOCHS ||
			   (steps / batches == TR_MAX_EPOCHS && steps % batches != 0))) {
		snprintf(why, len, "--resume: %s: its step count %" PRIu64 " lies past the "
			 "end of any run of its training data (%" PRIu64 " batches an epoch, %u epochs "
			 "at most): the file is damaged, or was not written by pinpipe-train",
			 opt->checkpoint, steps, batches, TR_MAX_EPOCHS);
		return -EINVAL;
	}
	first_epoch = batches ? (unsigned)(steps / batches) : 0;
	pl->batches = batches;
	pl->steps = steps;
	pl->first_epoch = first_epoch;
	if (steps != 0 && (first_epoch >= opt->epochs || (opt->max_steps && steps >= opt->max_steps))) {
		struct pp_loader_position pos;
		char at[64], limit[64];

		/* The order first: in another plan, the steps are no place of this one, and
		 * "complete" would be a guess (the loader's key on one process, the job's
		 * on several ranks, as tr_resume_key() checks it). */
		ret = pp_loader_get_position(r->train_loader, &pos);
		if (ret == 0 && r->dist->size > 1)
			ret = job_plan_key(opt, p, train, r, &pos.plan_key);
		if (ret < 0)
			return ret;
		if (pp_model_tag(r->model) != 0 && pos.plan_key != pp_model_tag(r->model)) {
			tr_resume_other_order(why, len, opt->checkpoint, r->dist->size > 1);
			return -EINVAL;
		}

		if (steps % batches == 0)
			snprintf(at, sizeof(at), "the end of epoch %u", first_epoch);
		else
			snprintf(at, sizeof(at), "batch %" PRIu64 " of epoch %u", steps % batches,
				 first_epoch + 1);
		if (first_epoch >= opt->epochs)
			snprintf(limit, sizeof(limit), "--epochs=%u", opt->epochs);
		else
			snprintf(limit, sizeof(limit), "--max-steps=%" PRIu64, opt->max_steps);
		fprintf(stderr, "pinpipe-train: run %u: %s is at step %" PRIu64 ", %s (of %" PRIu64
			" batches), at or past %s: the run is already complete, nothing was trained\n",
			run, opt->checkpoint, steps, at, batches, limit);
		return 1;
	}
	return 0;
}

int tr_resume_key(const struct tr_options *opt, const struct tr_params *p,
		  const struct tr_split *train, struct tr_run *r, struct tr_place *pl, char *why,
		  size_t len)
{
	struct pp_loader_position pos;
	uint64_t resumed_key;
	int ret;

	/* The model keeps the order of its training data (the loader's plan key)
	 * in its checkpoints, so that a resume can be checked against it. */
	ret = pp_loader_get_position(r->train_loader, &pos);
	if (ret < 0)
		return ret;
	if (r->dist->size > 1)
		ret = job_plan_key(opt, p, train, r, &pos.plan_key);
	if (ret < 0)
		return ret;
	resumed_key = pl->steps ? pp_model_tag(r->model) : 0;
	pp_model_set_tag(r->model, pos.plan_key);
	/* Several ranks: the job's key is checked here, and each rank's loader
	 * resumes its own share of the same position. */
	if (r->dist->size > 1 && resumed_key != 0 && resumed_key != pos.plan_key) {
		tr_resume_other_order(why, len, opt->checkpoint, true);
		return -EINVAL;
	}
	if (r->dist->size > 1)
		resumed_key = 0;
	pl->key = resumed_key;
	return 0;
}
