/*
 * mpiflow/pipeline.h - pipeline parallelism: a Sequential model cut into
 * stages, each on its own placement (doc/design.md section 4).
 *
 *   int first[P + 1];
 *   mf_pipeline_balance(model, P, first);      // stage s runs children first[s] .. first[s+1]-1
 *   mf_pipeline_parse_cuts(model, "4,8", &P, first);   // or given explicitly
 *
 * A pipeline runs each stage on its own placement (disjoint sets of
 * ranks; each may be a mesh with data and tensor parallelism inside).
 * A training step cuts the batch into M micro-batches; every rank runs
 * only its own stage, in the order the schedule gives (GPipe or 1F1B),
 * and passes activations forward and gradients back with non-blocking
 * transfers. The parameters' gradients accumulate over the micro-batches
 * and the optimizer steps once, as usual:
 *
 *   mf_pipeline_opts po = {P, first, stage_placements, input_sbps, M, MF_PIPELINE_1F1B};
 *   mf_pipeline *pipe = mf_pipeline_create(model, &po);
 *   mf_optim_zero_grad(opt);
 *   mf_pipeline_train_step(pipe, x, y, NULL, NULL, &loss);  // x[m], y[m]: micro-batch m
 *   mf_optim_step(opt);
 *
 * x[m] is global on stage 0's placement, y[m] on the last stage's
 * (metadata only on other ranks, e.g. mf_global_from_piece with NULL).
 * Each micro-batch's loss is scaled by 1/M, so the gradients are those
 * of the whole batch's mean loss. Dropout masks are keyed by (step draw,
 * micro-batch, layer), so a run gives the same numbers for any number
 * of stages and either schedule. doc/pipeline.md has the details.
 */
#ifndef MPIFLOW_PIPELINE_H
#define MPIFLOW_PIPELINE_H

#include "mpiflow/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most stages a model may be cut into. */
#define MF_MAX_STAGES 64

/* Cuts the children of a Sequential into nstages contiguous, non-empty
 * stages with the largest stage's parameter count as small as possible
 * (ties: the fewest children in the largest stage, then the earliest
 * cut). first gets nstages + 1 entries: stage s runs children
 * first[s] .. first[s+1]-1; first[0] = 0, first[nstages] = the number of
 * children. MF_ERR_ARG when nstages is not in 1 .. children. */
MF_API mf_status mf_pipeline_balance(const mf_module *seq, int nstages, int *first);
/* Explicit cuts: "4,8" starts stage 1 at child 4 and stage 2 at child 8
 * (so 3 stages). *nstages and first as mf_pipeline_balance. MF_ERR_ARG,
 * naming the cut, for cuts that are not increasing or not inside the
 * model. */
MF_API mf_status mf_pipeline_parse_cuts(const mf_module *seq, const char *cuts, int *nstages, int *first);

/* ---- schedules */
typedef enum mf_pipeline_schedule { MF_PIPELINE_GPIPE = 0, MF_PIPELINE_1F1B } mf_pipeline_schedule;
/* "gpipe" or "1f1b"; MF_ERR_ARG naming both otherwise. */
MF_API mf_status mf_pipeline_schedule_parse(const char *text, mf_pipeline_schedule *out);
MF_API const char *mf_pipeline_schedule_name(mf_pipeline_schedule s);
/* The order in which stage `stage` of nstages runs a step's work: ops
 * gets 2 * micro_batches entries, m >= 0 for micro-batch m's forward
 * and ~m (negative) for its backward. */
MF_API mf_status mf_pipeline_order(mf_pipeline_schedule s, int nstages, int stage, int micro_batches, int *ops);

/* ---- the executor */
typedef struct mf_pipeline mf_pipeline;
typedef struct mf_pipeline_opts {
    int nstages;
    const int *first;                   /* nstages + 1 cuts, as from mf_pipeline_balance */
    mf_placement *const *placements;    /* stage s's ranks; no rank in two stages */
    const char *const *input_sbp;       /* the layout stage s takes its input in, e.g. "S(0)" or
                                           "S(0),B" (S or B on each mesh dimension) */
    int micro_batches;                  /* M >= 1 */
    mf_pipeline_schedule schedule;
    /* Deterministic mode (0: off): the batch is V virtual shards, and
     * losses and gradients have the same bits on any number of ranks.
     * Needs data parallelism only (1-D stages, parameters B, input
     * "S(0)") and M x (ranks per stage) == V: micro-batch m holds shard
     * r x M + m on the stage's rank r. The loss function must return the
     * micro-batch's summed loss (MF_REDUCTION_SUM); the executor divides
     * by the batch's rows. See doc/design.md. */
    int shards;
} mf_pipeline_opts;

/* Checks the stages (placements disjoint, every parameter and buffer of
 * stage s's children global on stage s's placement, the input layouts)
 * and keeps the model borrowed. Collective (same arguments on every
 * rank); a bad request fails the same way on every rank. */
MF_API mf_pipeline *mf_pipeline_create(mf_module *seq, const mf_pipeline_opts *o);
MF_API void mf_pipeline_destroy(mf_pipeline *pipe);
/* A parameter used on two stages (a tied embedding, doc/pipeline.md):
 * param on an earlier stage, copy (same shape, dtype and nd-SBP, on a
 * later stage's placement of the same mesh shape) on a later one. The
 * copy takes param's values at the start of every step and evaluation,
 * and its gradient is added into param's before the earlier stage's
 * last backward, so that the optimizer (which must hold param, not the
 * copy) steps the sum of both uses' gradients. Not with deterministic
 * shards. Collective. */
MF_API mf_status mf_pipeline_tie(mf_pipeline *pipe, mf_tensor *param, mf_tensor *copy);
/* This rank's stage, or -1 when it is in none. */
MF_API int mf_pipeline_stage(const mf_pipeline *pipe);
MF_API int mf_pipeline_micro_batches(const mf_pipeline *pipe);

/* The scalar mean loss of one micro-batch (runs on the last stage's
 * ranks only: use ops, not mf_tensor_item, which needs every rank). */
typedef mf_tensor *(*mf_pipeline_loss_fn)(mf_tensor *out, mf_tensor *target, void *user);
/* One step's forward and backward over the M micro-batches x[0..M-1]
 * (all with the same number of rows) and targets y[0..M-1]. loss NULL:
 * cross-entropy. *mean_loss gets the batch's mean loss on every rank.
 * Gradients accumulate into the parameters' .grad (with an optimizer's
 * gradient buckets, the data-parallel sums start during the last
 * backward). Collective. */
MF_API mf_status mf_pipeline_train_step(mf_pipeline *pipe, mf_tensor *const *x, mf_tensor *const *y,
                                        mf_pipeline_loss_fn loss, void *user, double *mean_loss);

/* Forward only (no autograd; the model in its current mode) over n
 * micro-batches of any sizes. On the last stage, fn computes nvals
 * scalar tensors from each micro-batch's output and target (new
 * references, e.g. a summed loss and a count of correct answers);
 * sums[0..nvals-1] gets their totals over the micro-batches on every
 * rank. Collective. */
typedef mf_status (*mf_pipeline_metric_fn)(mf_tensor *out, mf_tensor *target, void *user, mf_tensor **vals);
MF_API mf_status mf_pipeline_eval(mf_pipeline *pipe, int n, mf_tensor *const *x, mf_tensor *const *y,
                                  mf_pipeline_metric_fn fn, void *user, int nvals, double *sums);

/* This rank's view of the last mf_pipeline_train_step (which resets the
 * allocator's peak, mf_memory_reset_peak, at its start). */
typedef struct mf_pipeline_stats {
    double step_s;                 /* wall time of the step */
    double busy_s;                 /* in this stage's forward and backward compute */
    double bubble;                 /* 1 - busy / step: the share spent waiting */
    int max_in_flight;             /* most micro-batches whose activations were held at once */
    int64_t peak_bytes;            /* highest tensor memory above the step's start */
} mf_pipeline_stats;
MF_API mf_status mf_pipeline_last_stats(const mf_pipeline *pipe, mf_pipeline_stats *out);

#ifdef __cplusplus
}
#endif
#endif
