/*
 * lib/pipeline/executor.c - running a Sequential cut into stages, each
 * on its own placement, over micro-batches (GPipe or 1F1B).
 *
 * Every rank runs only its own stage, in the order schedule.c gives.
 * Stage boundaries are explicit rather than autograd across placements:
 *
 *   forward  m: stage s takes micro-batch m's activation from the
 *               transfer posted for it, as a leaf that requires grad,
 *               runs its children, sums any partial output (tensor
 *               parallelism) and starts the transfer to stage s + 1 in
 *               that stage's input layout. The last stage computes the
 *               loss and scales it by 1/M.
 *   backward m: the last stage runs backward from its loss; others from
 *               the gradient stage s + 1 sent back. Then the input
 *               leaf's gradient goes back to stage s - 1.
 *
 * All transfers are non-blocking (mf_redistribute_start on the pipeline
 * communicator) and each stage posts its next receives ahead, so two
 * neighbours never wait on each other. Between one pair of ranks only
 * activations flow one way and only gradients the other, each in
 * micro-batch order, so the messages match by order alone.
 *
 * A receiving rank needs the shape and layout of what arrives. It gets
 * them by running the earlier stages on metadata only: a rank outside a
 * placement skips an op's kernels and keeps the global shape and SBP,
 * so this "ghost" forward costs microseconds and no communication.
 *
 * Determinism: a step takes one top-level draw, as the whole model's
 * forward does on one rank, and child c runs in that draw's scope as the
 * Sequential's child c would (lib/rng.c); the rows of micro-batch m are
 * declared as the samples they are in the step's batch. So dropout masks
 * depend on (step, layer, sample), not on the micro-batches, the cut or
 * the schedule. Backwards run in micro-batch order on every stage, as on
 * one rank, so gradients add up in the same order.
 *
 * The first call of each kind runs micro-batch 0 once through all stages
 * in the SPMD way (every rank, blocking transfers) and agrees on the
 * result, so a model or loss that does not fit its data fails with the
 * same message on every rank instead of leaving a neighbour waiting.
 */
#include <math.h>
#include <stdio.h>
#include "lib/global/global_internal.h"
#include "lib/optim/optim_internal.h"
#include "lib/pipeline/shards.h"
#include "lib/pipeline/tied.h"

struct mf_pipeline {
    mf_module *seq;
    int P, M, me, nch;   /* me: this rank's stage, -1 if none */
    int first[MF_MAX_STAGES + 1];
    mf_placement *pl[MF_MAX_STAGES];
    mf_nd_sbp in_sbp[MF_MAX_STAGES];
    mf_pipeline_schedule sched;
    bool probed_train, probed_eval;
    mf_pipeline_stats stats;
    mfi_rng_rows *rows;   /* [cap]: which samples of the batch micro-batch m holds */
    int rows_cap;
    int V;                /* deterministic mode's shards (0: off) */
    int dp_dim, kdp;      /* ... the stages' data-parallel mesh dimension (input S(0)) and its size */
    mfi_shards *shards;   /* their gradients on this rank's stage */
    mfi_ties *ties;       /* parameters used on two stages (tied.c) */
};

/* one micro-batch on this rank's stage */
typedef struct mb {
    mf_tensor *in;           /* the stage's input (received: a leaf that requires grad) */
    mf_tensor *out;          /* what was sent on, or the scaled loss on the last stage */
    mf_tensor *ghost;        /* what stage me-1 sends, as metadata */
    mf_transfer *recv_act, *send_act, *recv_grad, *send_grad;
} mb;

/* ------------------------------------------------------------- create */
/* the stage whose children include child c */
static int stage_of(const mf_pipeline *pp, int c)
{
    int s = 0;
    while (s + 1 < pp->P && c >= pp->first[s + 1]) s++;
    return s;
}

/* Every parameter and buffer is global on its stage's placement. */
static mf_status check_params(const mf_pipeline *pp)
{
    mf_tensor_list *l = mf_module_state_dict(pp->seq);
    if (!l) return mf_last_status();
    mf_status st = MF_OK;
    char a[128], b[128], child[256];
    for (int i = 0; i < l->n && st == MF_OK; i++) {
        const char *name = l->items[i].name, *dot = strchr(name, '.');
        size_t len = dot ? (size_t)(dot - name) : 0;
        if (!dot || len >= sizeof child) continue;   /* the Sequential's own: none */
        memcpy(child, name, len);
        child[len] = 0;
        mf_module *cm = mf_module_child(pp->seq, child);
        int c = 0;
        while (c < pp->nch && mf_module_child_at(pp->seq, c) != cm) c++;
        int s = stage_of(pp, c);
        mf_tensor *t = l->items[i].tensor;
        const char *what = l->items[i].kind == MF_ENTRY_BUFFER ? "buffer" : "parameter";
        if (!t->global)
            st = mfi_error(MF_ERR_ARG, "mf_pipeline_create: %s '%s' of layer %d (stage %d) is local; place each "
                           "stage's parameters on its placement (mf_module_to_global on the layer)", what, name, c, s);
        else if (!mf_placement_equal(t->global->placement, pp->pl[s]))
            st = mfi_error(MF_ERR_ARG, "mf_pipeline_create: %s '%s' of layer %d is on placement '%s', not on "
                           "stage %d's '%s'", what, name, c, mf_placement_str(t->global->placement, a, sizeof a), s,
                           mf_placement_str(pp->pl[s], b, sizeof b));
    }
    mf_tensor_list_destroy(l);
    return st;
}

static mf_status check_opts(mf_pipeline *pp, mf_module *seq, const mf_pipeline_opts *o)
{
    const char *fn = "mf_pipeline_create";
    if (!seq || !o) MF_FAIL(MF_ERR_ARG, "%s: the %s is NULL", fn, seq ? "options" : "model");
    int n = mf_module_num_children(seq);
    if (o->nstages < 1 || o->nstages > MF_MAX_STAGES || o->nstages > n)
        MF_FAIL(MF_ERR_ARG, "%s: %d stages for a model of %d layers (1 .. %d, one layer at least per stage)", fn,
                o->nstages, n, n < MF_MAX_STAGES ? n : MF_MAX_STAGES);
    if (o->micro_batches < 1) MF_FAIL(MF_ERR_ARG, "%s: %d micro-batches (at least 1)", fn, o->micro_batches);
    if (o->shards < 0) MF_FAIL(MF_ERR_ARG, "%s: %d deterministic shards", fn, o->shards);
    if (o->schedule != MF_PIPELINE_GPIPE && o->schedule != MF_PIPELINE_1F1B)
        MF_FAIL(MF_ERR_ARG, "%s: unknown schedule %d", fn, (int)o->schedule);
    if (!o->first || !o->placements || !o->input_sbp)
        MF_FAIL(MF_ERR_ARG, "%s: the stage cuts, placements and input layouts are all needed", fn);
    int P = o->nstages;
    if (o->first[0] != 0 || o->first[P] != n)
        MF_FAIL(MF_ERR_ARG, "%s: the cuts must start at layer 0 and end at %d (got %d and %d)", fn, n, o->first[0],
                o->first[P]);
    for (int s = 0; s < P; s++) {
        if (o->first[s + 1] <= o->first[s])
            MF_FAIL(MF_ERR_ARG, "%s: stage %d would have no layers (cuts %d, %d)", fn, s, o->first[s], o->first[s + 1]);
        if (!o->placements[s]) MF_FAIL(MF_ERR_ARG, "%s: stage %d's placement is NULL", fn, s);
    }
    /* no rank in two stages: a rank runs one stage's schedule */
    char a[128], b[128];
    for (int s = 0; s < P; s++)
        for (int t = s + 1; t < P; t++)
            for (int i = 0; i < o->placements[s]->n; i++)
                for (int j = 0; j < o->placements[t]->n; j++)
                    if (o->placements[s]->ranks[i] == o->placements[t]->ranks[j])
                        MF_FAIL(MF_ERR_ARG, "%s: stage placements overlap: rank %d is in stage %d ('%s') and stage %d "
                                "('%s'); give each stage its own ranks", fn, o->placements[s]->ranks[i], s,
                                mf_placement_str(o->placements[s], a, sizeof a), t,
                                mf_placement_str(o->placements[t], b, sizeof b));
    for (int s = 0; s < P; s++) {
        if (o->placements[s]->dev != o->placements[0]->dev)
            MF_FAIL(MF_ERR_ARG, "%s: stage %d's device type differs from stage 0's", fn, s);
        mf_nd_sbp *sb = &pp->in_sbp[s];
        MF_TRY(mf_nd_sbp_parse(o->input_sbp[s] ? o->input_sbp[s] : "", sb));
        if (sb->ndim != o->placements[s]->mesh_ndim)
            MF_FAIL(MF_ERR_ARG, "%s: stage %d's input layout '%s' has %d entries for a %d-D mesh", fn, s,
                    o->input_sbp[s], sb->ndim, o->placements[s]->mesh_ndim);
        for (int d = 0; d < sb->ndim; d++)
            if (sb->d[d].kind == MF_SBP_P)
                MF_FAIL(MF_ERR_ARG, "%s: stage %d's input layout '%s' is partial; inputs arrive split or "
                        "broadcast", fn, s, o->input_sbp[s]);
        if (!o->shards) continue;
        /* one mesh dimension splits the batch (S(0)); the others hold
         * it whole (tensor parallelism: B, or S(1) for a sequence) */
        int dp = -1;
        for (int d = 0; d < sb->ndim; d++) {
            bool batch = sb->d[d].kind == MF_SBP_S && sb->d[d].axis == 0;
            if (batch && dp >= 0) dp = -2;
            else if (batch && dp == -1) dp = d;
        }
        if (dp < 0 || (s > 0 && dp != pp->dp_dim))
            MF_FAIL(MF_ERR_ARG, "%s: deterministic shards need data parallelism: stage %d's input is '%s', not "
                    "S(0) on exactly one mesh dimension (the same in every stage)", fn, s, o->input_sbp[s]);
        pp->dp_dim = dp;
        int k = o->placements[s]->mesh[dp];
        if (o->micro_batches * k != o->shards)
            MF_FAIL(MF_ERR_ARG, "%s: %d deterministic shards over stage %d's %d data-parallel rank(s) make %d "
                    "micro-batches of one shard each, not %d", fn, o->shards, s, k, o->shards % k ? -1 : o->shards / k,
                    o->micro_batches);
        pp->kdp = k;
    }
    return MF_OK;
}

mf_pipeline *mf_pipeline_create(mf_module *seq, const mf_pipeline_opts *o)
{
    mf_pipeline *pp = calloc(1, sizeof *pp);
    if (!pp) {
        mfi_error(MF_ERR_NOMEM, "mf_pipeline_create: out of memory");
        return NULL;
    }
    mf_status st = check_opts(pp, seq, o);
    if (st == MF_OK) {
        pp->seq = seq;
        pp->P = o->nstages;
        pp->M = o->micro_batches;
        pp->V = o->shards;
        pp->sched = o->schedule;
        pp->nch = mf_module_num_children(seq);
        pp->me = -1;
        for (int s = 0; s <= pp->P; s++) pp->first[s] = o->first[s];
        for (int s = 0; s < pp->P; s++) {
            pp->pl[s] = mf_placement_retain(o->placements[s]);
            if (pp->pl[s]->index >= 0) pp->me = s;
        }
        st = check_params(pp);
    }
    if (st != MF_OK) {
        mf_pipeline_destroy(pp);
        return NULL;
    }
    return pp;
}

void mf_pipeline_destroy(mf_pipeline *pp)
{
    if (!pp) return;
    for (int s = 0; s < pp->P; s++) mf_placement_destroy(pp->pl[s]);
    mfi_shards_destroy(pp->shards);
    mfi_ties_destroy(pp->ties);
    free(pp->rows);
    free(pp);
}

/* the stage whose placement t is on, or -1 */
static int stage_on(const mf_pipeline *pp, const mf_tensor *t)
{
    for (int s = 0; t && t->global && s < pp->P; s++)
        if (mf_placement_equal(t->global->placement, pp->pl[s])) return s;
    return -1;
}

mf_status mf_pipeline_tie(mf_pipeline *pp, mf_tensor *param, mf_tensor *copy)
{
    if (!pp) MF_FAIL(MF_ERR_ARG, "mf_pipeline_tie: the pipeline is NULL");
    if (pp->V) MF_FAIL(MF_ERR_ARG, "mf_pipeline_tie: deterministic shards do not take tied parameters");
    int from = stage_on(pp, param), to = stage_on(pp, copy);
    if (from < 0 || to < 0)
        MF_FAIL(MF_ERR_ARG, "mf_pipeline_tie: the %s is not on a stage's placement", from < 0 ? "parameter" : "copy");
    return mfi_ties_add(&pp->ties, param, from, copy, to, pp->pl);
}

int mf_pipeline_stage(const mf_pipeline *pp) { return pp ? pp->me : -1; }
int mf_pipeline_micro_batches(const mf_pipeline *pp) { return pp ? pp->M : 0; }

mf_status mf_pipeline_last_stats(const mf_pipeline *pp, mf_pipeline_stats *out)
{
    if (!pp || !out) MF_FAIL(MF_ERR_ARG, "mf_pipeline_last_stats: %s is NULL", pp ? "out" : "the pipeline");
    *out = pp->stats;
    return MF_OK;
}

/* ------------------------------------------------------------- pieces */
/* Declares the samples of the batch that each of the n micro-batches
 * holds: micro-batch m's rows follow micro-batch m - 1's. */
static mf_status layout_rows(mf_pipeline *pp, int n, mf_tensor *const *x)
{
    if (n > pp->rows_cap) {
        mfi_rng_rows *r = realloc(pp->rows, (size_t)n * sizeof *r);
        if (!r) MF_FAIL(MF_ERR_NOMEM, "pipeline: out of memory");
        pp->rows = r;
        pp->rows_cap = n;
    }
    int64_t base = 0;
    for (int m = 0; m < n; m++) {
        int64_t rows = x[m]->ndim ? x[m]->shape[0] : 1;
        pp->rows[m] = (mfi_rng_rows){rows, base, 0, 0};
        base += rows;
    }
    return MF_OK;
}

/* Deterministic mode: micro-batch m's rank r holds shard r * n + m of
 * s rows, which is samples (r * n + m) * s ... */
static mf_status layout_shards(mf_pipeline *pp, int n, mf_tensor *const *x)
{
    MF_TRY(layout_rows(pp, n, x));
    int k = pp->kdp;
    for (int m = 0; m < n; m++) {
        int64_t s = pp->rows[m].nrows / k;
        pp->rows[m] = (mfi_rng_rows){k * s, m * s, s, n * s};
    }
    return MF_OK;
}

/* Stage s's children on micro-batch m (real on its ranks, metadata
 * elsewhere). key: the step's draw, the whole model's scope. */
static mf_tensor *run_stage(mf_pipeline *pp, int s, int m, uint64_t key, mf_tensor *x)
{
    mf_tensor *cur = mf_tensor_retain(x);
    mfi_rng_set_rows(&pp->rows[m]);
    for (int c = pp->first[s]; c < pp->first[s + 1] && cur; c++) {
        mfi_rng_scope saved = mfi_rng_enter(key, (uint64_t)c);   /* as the Sequential's child c */
        mf_tensor *y = mf_module_forward(mf_module_child_at(pp->seq, c), cur);
        mfi_rng_leave(saved);
        mf_tensor_destroy(cur);
        cur = y;
    }
    mfi_rng_set_rows(NULL);
    if (!cur) mfi_error_context("pipeline stage %d, micro-batch %d", s, m);
    return cur;
}

static bool has_partial(const mf_nd_sbp *s)
{
    for (int d = 0; d < s->ndim; d++)
        if (s->d[d].kind == MF_SBP_P) return true;
    return false;
}

/* t with its partial dimensions summed (differentiable), ready to send */
static mf_tensor *sendable(mf_tensor *t)
{
    mf_nd_sbp to = t->global->sbp;
    if (!has_partial(&to)) return mf_tensor_retain(t);
    for (int d = 0; d < to.ndim; d++)
        if (to.d[d].kind == MF_SBP_P) to.d[d] = (mf_sbp){MF_SBP_B, 0};
    return mfi_redistribute(t, t->global->placement, &to);
}

/* a tensor's metadata moved onto placement p with nd-SBP s (no data) */
static mf_tensor *meta_on(const mf_tensor *t, const mf_placement *p, const mf_nd_sbp *s)
{
    mfi_meta gm;
    mfi_meta_of(t, &gm);
    return mfi_global_wrap(NULL, p, s, &gm, false);
}

/* Stage s on x (micro-batch m; real on its ranks, metadata elsewhere),
 * its partial sums done; then, by `next`, left on stage s, moved to
 * stage s + 1's input layout (blocking), or only its metadata put there. */
enum { STAY, MOVE, META };
static mf_tensor *through_stage(mf_pipeline *pp, int s, int m, uint64_t key, mf_tensor *x, int next)
{
    mf_tensor *y = run_stage(pp, s, m, key, x);
    mf_tensor *out = y ? sendable(y) : NULL;
    mf_tensor_destroy(y);
    if (!out || next == STAY) return out;
    mf_tensor *moved = next == MOVE ? mfi_redistribute(out, pp->pl[s + 1], &pp->in_sbp[s + 1])
                                    : meta_on(out, pp->pl[s + 1], &pp->in_sbp[s + 1]);
    mf_tensor_destroy(out);
    return moved;
}

/* What stage me-1 sends for micro-batch m, as metadata: the stages
 * before this rank's run on x's metadata (this rank is in none of them). */
static mf_tensor *ghost_input(mf_pipeline *pp, int m, uint64_t key, mf_tensor *x)
{
    bool prev = mf_set_grad_enabled(false);
    mf_tensor *g = mf_tensor_retain(x);
    for (int j = 0; j < pp->me && g; j++) {
        mf_tensor *h = through_stage(pp, j, m, key, g, j + 1 < pp->me ? META : STAY);
        mf_tensor_destroy(g);
        g = h;
    }
    mf_set_grad_enabled(prev);
    return g;
}

/* a scalar on the last stage's ranks as a number (no world collective) */
static mf_status stage_value(mf_tensor *t, double *v)
{
    if (!t->global) {
        *v = mf_tensor_item(t);
        return MF_OK;
    }
    mf_nd_sbp allb = mfi_nd_sbp_all(t->global->sbp.ndim, MF_SBP_B);
    bool prev = mf_set_grad_enabled(false);
    mf_tensor *b = mfi_redistribute(t, t->global->placement, &allb);
    mf_set_grad_enabled(prev);
    if (!b) return mf_last_status();
    *v = b->global->local ? mf_tensor_item(b->global->local) : NAN;
    mf_tensor_destroy(b);
    return MF_OK;
}

/* Deterministic mode: this rank's own shard's value of a loss that is
 * partial over the data-parallel dimension dp (the sum over the batch's
 * rows), summed over the other dimensions' partial sums (tensor
 * parallelism), but not over dp. Collective over the stage. */
static mf_status shard_value(mf_tensor *t, int dp, double *v)
{
    if (!t->global) {
        *v = mf_tensor_item(t);
        return MF_OK;
    }
    mf_nd_sbp to = t->global->sbp;
    for (int d = 0; d < to.ndim; d++)
        if (d != dp && to.d[d].kind == MF_SBP_P) to.d[d] = (mf_sbp){MF_SBP_B, 0};
    if (to.d[dp].kind != MF_SBP_P && t->global->placement->mesh[dp] > 1) {
        char sbp[64];
        MF_FAIL(MF_ERR_ARG, "deterministic shards: the loss must be a sum over the batch's rows (partial over the "
                "data-parallel ranks, mesh dimension %d), not a mean or a value they share; it is %s", dp,
                mf_nd_sbp_str(&t->global->sbp, sbp, sizeof sbp));
    }
    bool prev = mf_set_grad_enabled(false);
    mf_tensor *b = mfi_redistribute(t, t->global->placement, &to);
    mf_set_grad_enabled(prev);
    if (!b) return mf_last_status();
    *v = b->global->local ? mf_tensor_item(b->global->local) : NAN;
    mf_tensor_destroy(b);
    return MF_OK;
}

/* every rank gets the last stage's n values (from its first rank) */
static mf_status share(const mf_pipeline *pp, double *v, int n)
{
    return mfi_bcast(mfi_comm_world(), v, n, MF_F64, pp->pl[pp->P - 1]->ranks[0]);
}

static mf_status check_batch(const mf_pipeline *pp, const char *fn, int n, mf_tensor *const *x, mf_tensor *const *y,
                             bool equal_rows)
{
    if (!pp) MF_FAIL(MF_ERR_ARG, "%s: the pipeline is NULL", fn);
    if (!x || !y) MF_FAIL(MF_ERR_ARG, "%s: the micro-batch arrays are NULL", fn);
    char a[128], b[128];
    for (int m = 0; m < n; m++) {
        if (!x[m] || !y[m]) MF_FAIL(MF_ERR_ARG, "%s: micro-batch %d's %s is NULL", fn, m, x[m] ? "target" : "input");
        if (!x[m]->global || !mf_placement_equal(x[m]->global->placement, pp->pl[0]))
            MF_FAIL(MF_ERR_ARG, "%s: micro-batch %d's input must be global on stage 0's placement '%s'", fn, m,
                    mf_placement_str(pp->pl[0], a, sizeof a));
        if (!y[m]->global || !mf_placement_equal(y[m]->global->placement, pp->pl[pp->P - 1]))
            MF_FAIL(MF_ERR_ARG, "%s: micro-batch %d's target must be global on the last stage's placement '%s'", fn,
                    m, mf_placement_str(pp->pl[pp->P - 1], b, sizeof b));
        if (equal_rows && x[m]->ndim && x[0]->ndim && x[m]->shape[0] != x[0]->shape[0])
            MF_FAIL(MF_ERR_ARG, "%s: micro-batch %d has %lld rows and micro-batch 0 has %lld; the micro-batch "
                    "count (%d) must divide the batch", fn, m, (long long)x[m]->shape[0], (long long)x[0]->shape[0],
                    n);
    }
    return MF_OK;
}

/* ------------------------------------------------------------- probe */
/* Micro-batch 0 through every stage the SPMD way (blocking transfers,
 * all ranks, no autograd, eval mode), agreeing after each piece. */
static mf_status probe(mf_pipeline *pp, mf_tensor *x, mf_tensor *y, mf_pipeline_loss_fn loss, void *user,
                       mf_pipeline_metric_fn metric, int nvals)
{
    uint64_t base = mf_rng_draws();
    bool training = mf_module_is_training(pp->seq);
    mf_module_train(pp->seq, false);
    mf_no_grad_begin();
    mf_tensor *cur = mf_tensor_retain(x);
    mf_status st = layout_rows(pp, 1, &x);
    for (int s = 0; s < pp->P && st == MF_OK; s++) {
        mf_tensor *next = through_stage(pp, s, 0, mfi_rng_key(0, base + 1), cur, s + 1 < pp->P ? MOVE : STAY);
        mf_tensor_destroy(cur);
        cur = next;
        st = mf_agree(cur ? MF_OK : mf_last_status());
    }
    if (st == MF_OK) {
        mf_tensor *vals[8] = {NULL};
        mf_status fs = MF_OK;
        if (metric) fs = metric(cur, y, user, vals);
        else if (!(vals[0] = loss ? loss(cur, y, user) : mf_cross_entropy(cur, y, MF_REDUCTION_MEAN)))
            fs = mf_last_status() != MF_OK ? mf_last_status() : mfi_error(MF_ERR_ARG, "the loss function returned NULL");
        for (int i = 0; i < (metric ? nvals : 1) && fs == MF_OK; i++)
            if (!vals[i] || mf_tensor_numel(vals[i]) != 1)
                fs = mfi_error(MF_ERR_SHAPE, "pipeline: the %s function's value %d is %s, not a scalar",
                               metric ? "metric" : "loss", i, vals[i] ? "not one element" : "missing");
        for (int i = 0; i < 8; i++) mf_tensor_destroy(vals[i]);
        if (fs != MF_OK) mfi_error_context("on the last stage's output");
        st = mf_agree(fs);
    }
    mf_tensor_destroy(cur);
    mf_no_grad_end();
    mf_module_train(pp->seq, training);
    mf_rng_set_draws(base);
    return st;
}

/* ------------------------------------------------------------- a run */
#define MAX_VALS 8

typedef struct run {
    mf_pipeline *pp;
    int n;                        /* micro-batches */
    uint64_t base;                /* the draw counter at the start */
    uint64_t key;                 /* the step's draw: the model's random scope */
    mb *mbs;
    mf_tensor *const *x, *const *y;
    bool train;
    mf_pipeline_loss_fn loss;
    mf_pipeline_metric_fn metric;
    void *user;
    int nvals;
    double vals[MAX_VALS];        /* training: the loss of each micro-batch, summed in order */
    double *mine;                 /* deterministic mode: this rank's summed loss of each shard */
    int64_t targets;              /* ... and the batch's targets (rows, or rows x tokens) */
    double busy;
    int in_flight, max_in_flight;
} run;

/* Starts moving t for micro-batch m to or from stage `stage`, named for
 * the watchdog (MF_TIMEOUT): "pipeline recv of micro-batch 2's
 * activation from stage 0". */
static mf_status transfer(mf_tensor *t, const mf_placement *p, const mf_nd_sbp *sbp, mf_transfer **x, bool recv,
                          const char *what, int m, int stage)
{
    if (mfi_ledger_on()) {
        char text[96];
        snprintf(text, sizeof text, "pipeline %s of micro-batch %d's %s %s stage %d", recv ? "recv" : "send", m, what,
                 recv ? "from" : "to", stage);
        mfi_ledger_context(text);
    }
    mf_status st = mfi_transfer_start(t, p, sbp, x);
    mfi_ledger_context("");
    return st;
}

static mf_status finish_transfer(mf_transfer **x)
{
    if (!*x) return MF_OK;
    mf_tensor *t = mf_transfer_finish(*x);
    *x = NULL;
    if (!t) return mf_last_status();
    mf_tensor_destroy(t);
    return MF_OK;
}

static void mb_release(mb *b)
{
    mf_tensor_destroy(b->in);
    mf_tensor_destroy(b->out);
    mf_tensor_destroy(b->ghost);
    b->in = b->out = b->ghost = NULL;
}

/* posts the receive of micro-batch m's activation (stages after 0) */
static mf_status post_recv_act(run *r, int m)
{
    mf_pipeline *pp = r->pp;
    mb *b = &r->mbs[m];
    b->ghost = ghost_input(pp, m, r->key, r->x[m]);
    if (!b->ghost) return mf_last_status();
    return transfer(b->ghost, pp->pl[pp->me], &pp->in_sbp[pp->me], &b->recv_act, true, "activation", m, pp->me - 1);
}

/* the last stage: the loss (training) or the metric values (eval) */
static mf_status last_stage(run *r, int m, mf_tensor *out)
{
    mb *b = &r->mbs[m];
    mf_tensor *vals[MAX_VALS] = {NULL};
    mf_status st = MF_OK;
    if (r->train && r->pp->V) {   /* a shard's summed loss over the batch's targets, kept apart */
        vals[0] = r->loss ? r->loss(out, r->y[m], r->user) : mf_cross_entropy(out, r->y[m], MF_REDUCTION_SUM);
        if (!vals[0]) return mf_last_status();
        st = shard_value(vals[0], r->pp->dp_dim, &r->mine[m]);
        if (st == MF_OK) b->out = mf_scale(vals[0], 1.0 / (double)r->targets);
        if (!b->out) st = mf_last_status();
        mf_tensor_destroy(vals[0]);
        return st;
    }
    if (r->train) {
        vals[0] = r->loss ? r->loss(out, r->y[m], r->user) : mf_cross_entropy(out, r->y[m], MF_REDUCTION_MEAN);
        if (!vals[0]) return mf_last_status();
        b->out = mf_scale(vals[0], 1.0 / r->pp->M);   /* the batch's mean: each micro-batch weighs 1/M */
        if (!b->out) st = mf_last_status();
    } else {
        st = r->metric(out, r->y[m], r->user, vals);
    }
    for (int i = 0; i < (r->train ? 1 : r->nvals) && st == MF_OK; i++) {
        double v = 0;
        st = stage_value(vals[i], &v);
        r->vals[i] += v;
    }
    for (int i = 0; i < MAX_VALS; i++) mf_tensor_destroy(vals[i]);
    return st;
}

/* a forward or backward's compute, from t0 to now: busy time and a trace span */
static void computed(run *r, const char *what, int m, double t0)
{
    double t1 = mf_time();
    r->busy += t1 - t0;
    if (mf_trace_enabled()) {
        char name[48];
        snprintf(name, sizeof name, "%s %d", what, m);
        mf_trace_span(name, "pipeline", 0, t0, t1);
    }
}

/* Frees the sends that have completed, without waiting: their buffers
 * go as soon as the neighbour has the data, and MPI progresses the
 * transfers in flight at every forward and backward. */
static mf_status reap(run *r)
{
    mf_status st = MF_OK;
    for (int m = 0; m < r->n && st == MF_OK; m++) {
        mb *b = &r->mbs[m];
        if (b->send_act && mfi_transfer_test(b->send_act)) st = finish_transfer(&b->send_act);
        if (st == MF_OK && b->send_grad && mfi_transfer_test(b->send_grad)) st = finish_transfer(&b->send_grad);
    }
    return st;
}

static mf_status forward_one(run *r, int m)
{
    mf_pipeline *pp = r->pp;
    int s = pp->me;
    mb *b = &r->mbs[m];
    if (s == 0) {
        b->in = mf_tensor_retain(r->x[m]);
    } else {
        b->in = mf_transfer_finish(b->recv_act);
        b->recv_act = NULL;
        if (!b->in) return mf_last_status();
        if (r->train) MF_TRY(mf_tensor_set_requires_grad(b->in, true));
        if (m + 1 < r->n) MF_TRY(post_recv_act(r, m + 1));   /* the next one may arrive while this runs */
    }
    double t0 = mf_time();
    mf_tensor *out = run_stage(pp, s, m, r->key, b->in);
    if (!out) return mf_last_status();
    mf_status st = MF_OK;
    if (s == pp->P - 1) st = last_stage(r, m, out);
    else if (!(b->out = sendable(out))) st = mf_last_status();
    mf_tensor_destroy(out);
    computed(r, "forward", m, t0);
    if (st == MF_OK && s < pp->P - 1) {
        st = transfer(b->out, pp->pl[s + 1], &pp->in_sbp[s + 1], &b->send_act, false, "activation", m, s + 1);
        if (st == MF_OK && r->train) {   /* its gradient comes back in the layout it left in */
            mf_tensor *g = meta_on(b->out, pp->pl[s + 1], &pp->in_sbp[s + 1]);
            st = g ? transfer(g, pp->pl[s], &b->out->global->sbp, &b->recv_grad, true, "gradient", m, s + 1)
                   : mf_last_status();
            mf_tensor_destroy(g);
        }
    }
    if (!r->train) mb_release(b);
    else if (++r->in_flight > r->max_in_flight) r->max_in_flight = r->in_flight;
    return st == MF_OK ? reap(r) : st;
}

/* the input leaf's gradient (zeros when nothing reached it), in the
 * stage's input layout */
static mf_tensor *input_grad(mf_pipeline *pp, mb *b)
{
    mf_tensor *ga = mf_tensor_grad(b->in), *z = NULL;
    if (!ga) {
        const mf_tensor *l = b->in->global->local;
        mf_tensor *zl = mf_zeros(l->dtype, l->ndim, l->shape);
        mfi_meta gm;
        mfi_meta_of(b->in, &gm);
        ga = z = zl ? mfi_global_wrap(zl, pp->pl[pp->me], &b->in->global->sbp, &gm, false) : NULL;
        if (!ga) return NULL;
    }
    mf_tensor *out;
    if (mfi_nd_sbp_equal(&ga->global->sbp, &pp->in_sbp[pp->me])) {
        out = mf_tensor_retain(ga);
    } else {   /* B inputs get P gradients: sum them over the stage's mesh */
        bool prev = mf_set_grad_enabled(false);
        out = mfi_redistribute(ga, pp->pl[pp->me], &pp->in_sbp[pp->me]);
        mf_set_grad_enabled(prev);
    }
    mf_tensor_destroy(z);
    return out;
}

static mf_status backward_one(run *r, int m)
{
    mf_pipeline *pp = r->pp;
    int s = pp->me;
    mb *b = &r->mbs[m];
    mf_tensor *g = NULL;
    if (s < pp->P - 1) {
        g = mf_transfer_finish(b->recv_grad);
        b->recv_grad = NULL;
        if (!g) return mf_last_status();
    }
    double t0 = mf_time();
    /* data-parallel sums start in the last backward, on the accumulated
     * gradients (DDP's no_sync for the others) */
    bool sync = !pp->V && m == r->n - 1;   /* deterministic mode sums the shards itself */
    mf_status st = sync ? mfi_ties_add_grads(pp->ties, s) : MF_OK;   /* before that sum starts */
    if (st == MF_OK) st = mfi_backward(b->out, g, false, sync);
    if (st == MF_OK && sync) st = mfi_ties_send_grads(pp->ties, s);
    if (st == MF_OK && pp->V) st = mfi_shards_stash(pp->shards, m);
    mf_tensor_destroy(g);
    mf_tensor *ga = st == MF_OK && s > 0 ? input_grad(pp, b) : NULL;
    if (st == MF_OK && s > 0 && !ga) st = mf_last_status();
    computed(r, "backward", m, t0);
    if (ga) st = transfer(ga, pp->pl[s - 1], &b->ghost->global->sbp, &b->send_grad, false, "gradient", m, s - 1);
    mf_tensor_destroy(ga);
    mb_release(b);
    r->in_flight--;
    return st == MF_OK ? reap(r) : st;
}

/* Runs this rank's stage through ops[0..nops-1] and finishes every
 * transfer; then the values go from the last stage to every rank. */
static mf_status execute(run *r, const int *ops, int nops)
{
    mf_pipeline *pp = r->pp;
    mf_status st = pp->me >= 0 ? mfi_ties_start(pp->ties, pp->me, r->train) : MF_OK;
    if (st == MF_OK && pp->me > 0) st = post_recv_act(r, 0);
    for (int k = 0; k < nops && st == MF_OK && pp->me >= 0; k++)
        st = ops[k] >= 0 ? forward_one(r, ops[k]) : backward_one(r, ~ops[k]);
    for (int m = 0; m < r->n && st == MF_OK; m++) {
        mb *b = &r->mbs[m];
        st = finish_transfer(&b->send_act);
        if (st == MF_OK) st = finish_transfer(&b->send_grad);
    }
    if (st == MF_OK) st = mfi_ties_finish(pp->ties);
    for (int m = 0; m < r->n; m++) mb_release(&r->mbs[m]);
    /* after a failure some transfers stay posted: a failing stage
     * cannot finish them without its neighbours (the probe has ruled
     * out the failures that bad input causes) */
    st = mf_agree(st);
    if (st == MF_OK && r->train && pp->V && pp->me >= 0) {   /* the sums over the shards, in shard order */
        st = mfi_shards_sum(pp->shards);
        double sum = 0;
        if (st == MF_OK && pp->me == pp->P - 1)
            st = mfi_shards_loss(pp->pl[pp->me]->dim_comm[pp->dp_dim], r->mine, r->n, pp->V, &sum);
        r->vals[0] = sum / (double)r->targets;
    }
    if (r->train && pp->V) st = mf_agree(st);
    if (st == MF_OK) st = share(pp, r->vals, MAX_VALS);
    return st;
}

mf_status mf_pipeline_train_step(mf_pipeline *pp, mf_tensor *const *x, mf_tensor *const *y, mf_pipeline_loss_fn loss,
                                 void *user, double *mean_loss)
{
    const char *fn = "mf_pipeline_train_step";
    MF_TRY(check_batch(pp, fn, pp ? pp->M : 0, x, y, true));
    if (!mean_loss) MF_FAIL(MF_ERR_ARG, "%s: mean_loss is NULL", fn);
    *mean_loss = NAN;
    if (!pp->probed_train) {
        MF_TRY(probe(pp, x[0], y[0], loss, user, NULL, 0));
        pp->probed_train = true;
    }
    int *ops = malloc(2 * (size_t)pp->M * sizeof *ops);
    run r = {.pp = pp, .n = pp->M, .base = mf_rng_draws(), .mbs = calloc((size_t)pp->M, sizeof(mb)), .x = x, .y = y,
             .train = true, .loss = loss, .user = user};
    r.key = mfi_rng_key(0, r.base + 1);
    mf_status st = ops && r.mbs ? MF_OK : mfi_error(MF_ERR_NOMEM, "%s: out of memory", fn);
    if (st == MF_OK) st = pp->V ? layout_shards(pp, pp->M, x) : layout_rows(pp, pp->M, x);
    if (st == MF_OK && pp->V) {
        r.targets = (int64_t)pp->M * mf_tensor_numel(y[0]);   /* the global micro-batch's */
        r.mine = calloc((size_t)pp->M, sizeof *r.mine);
        if (!r.mine) st = mfi_error(MF_ERR_NOMEM, "%s: out of memory", fn);
        if (st == MF_OK && !pp->shards && pp->me >= 0) {
            pp->shards = mfi_shards_create(pp->seq, pp->first[pp->me], pp->first[pp->me + 1], pp->V, pp->M, pp->dp_dim);
            if (!pp->shards) st = mf_last_status();
        }
    }
    if (st == MF_OK && pp->me >= 0) st = mf_pipeline_order(pp->sched, pp->P, pp->me, pp->M, ops);
    mf_memory_stats m0, m1;
    mf_memory_get_stats(&m0);
    mf_memory_reset_peak();
    double t0 = mf_time();
    st = mf_agree(st);
    if (pp->V) mfi_shards_sink(pp->shards, true);
    if (st == MF_OK) st = execute(&r, ops, 2 * pp->M);
    if (pp->V) mfi_shards_sink(pp->shards, false);
    mf_rng_set_draws(r.base + 1);   /* one draw, as the whole model's forward takes */
    double t1 = mf_time();
    mf_memory_get_stats(&m1);
    free(ops);
    free(r.mbs);
    free(r.mine);
    if (st != MF_OK) return st;
    *mean_loss = pp->V ? r.vals[0] : r.vals[0] / pp->M;
    pp->stats = (mf_pipeline_stats){t1 - t0, r.busy, t1 > t0 ? 1 - r.busy / (t1 - t0) : 0, r.max_in_flight,
                                    m1.peak - m0.in_use};
    return MF_OK;
}

mf_status mf_pipeline_eval(mf_pipeline *pp, int n, mf_tensor *const *x, mf_tensor *const *y, mf_pipeline_metric_fn fn,
                           void *user, int nvals, double *sums)
{
    const char *name = "mf_pipeline_eval";
    if (n < 1) MF_FAIL(MF_ERR_ARG, "%s: %d micro-batches (at least 1)", name, n);
    if (!fn || !sums) MF_FAIL(MF_ERR_ARG, "%s: the metric function and sums are needed", name);
    if (nvals < 1 || nvals > MAX_VALS) MF_FAIL(MF_ERR_ARG, "%s: %d values (1 .. %d)", name, nvals, MAX_VALS);
    MF_TRY(check_batch(pp, name, n, x, y, false));
    if (!pp->probed_eval) {
        MF_TRY(probe(pp, x[0], y[0], NULL, user, fn, nvals));
        pp->probed_eval = true;
    }
    int *ops = malloc((size_t)n * sizeof *ops);
    run r = {.pp = pp, .n = n, .base = mf_rng_draws(), .mbs = calloc((size_t)n, sizeof(mb)), .x = x, .y = y,
             .metric = fn, .user = user, .nvals = nvals};
    r.key = mfi_rng_key(0, r.base + 1);
    mf_status st = ops && r.mbs ? layout_rows(pp, n, x) : mfi_error(MF_ERR_NOMEM, "%s: out of memory", name);
    for (int m = 0; ops && m < n; m++) ops[m] = m;
    mf_no_grad_begin();
    st = mf_agree(st);
    if (st == MF_OK) st = execute(&r, ops, n);
    mf_no_grad_end();
    mf_rng_set_draws(r.base);   /* evaluation leaves training's random stream as it was */
    free(ops);
    free(r.mbs);
    if (st == MF_OK)
        for (int i = 0; i < nvals; i++) sums[i] = r.vals[i];
    return st;
}
