/*
 * lib/optim/buckets.c - gradient buckets that overlap the backward pass
 * (doc/gradient-sync.md; doc/design.md section 6).
 *
 * Backward leaves each global parameter's local gradient laid out as
 * dual(SBP): a B (data-parallel) parameter gets a P gradient, which must
 * be summed over the ranks of its B mesh axes. Parameters whose SBP is B
 * on every axis, or B on one axis and S on the others, are packed in
 * reverse parameter order (the order backward produces them) into
 * buckets of about bucket_mb MiB, one list per communicator, dtype and
 * kind of sum (buckets.h). Autograd's grad-ready hook packs each gradient
 * into its bucket as soon as it is final; when a bucket is full and every
 * bucket before it has started, its sum starts as a non-blocking request
 * on the progress thread while backward goes on (PyTorch DDP's scheme).
 * The sync at the step waits for the buckets in order and hands the sums
 * back to the parameters. Other parameters are synced one at a time
 * (grad_sync.c).
 *
 * A gradient that arrives twice in one round (two backwards before a
 * step: gradient accumulation) marks the round dirty: the sync then
 * discards what is in flight and sums the final gradients, blocking.
 *
 * Each optimizer owns its buckets; the list of live ones lets autograd's
 * one hook reach the optimizer that owns each leaf, and clipping the ones
 * that hold its parameters.
 */
#include <stdio.h>
#include "lib/optim/buckets.h"

static mfi_grad_buckets *live;

/* The index of the parameter whose local piece is leaf, or -1. */
static int param_of(mfi_grad_buckets *gb, const mf_tensor *leaf)
{
    int *i = leaf ? mfi_ptr_map_at(&gb->leaf_param, leaf, false) : NULL;
    return i ? *i : -1;
}

static mf_status map_leaves(mfi_grad_buckets *gb)
{
    const mf_optim *o = gb->o;
    for (int i = o->n - 1; i >= 0; i--) {   /* downwards: a piece listed twice maps to its first */
        const mf_tensor *l = o->params[i].p->global ? o->params[i].p->global->local : NULL;
        int *v = l ? mfi_ptr_map_at(&gb->leaf_param, l, true) : NULL;
        if (l && !v) MF_FAIL(MF_ERR_NOMEM, "gradient buckets: out of memory");
        if (v) *v = i;
    }
    return MF_OK;
}

static void on_ready(mf_tensor *leaf, void *user);

static void register_live(mfi_grad_buckets *gb)
{
    gb->next_live = live;
    live = gb;
    mfi_autograd_set_sync_hook(on_ready, NULL);
}

static void unregister_live(mfi_grad_buckets *gb)
{
    for (mfi_grad_buckets **p = &live; *p; p = &(*p)->next_live)
        if (*p == gb) {
            *p = gb->next_live;
            break;
        }
    if (!live) mfi_autograd_set_sync_hook(NULL, NULL);
}

/* The communicator summing param's gradient: all ranks of the placement
 * (B on every axis) or one mesh axis (B there, S elsewhere); NULL when
 * the parameter is not bucketed. */
static mfi_comm *sum_comm(const mf_tensor *param)
{
    const mfi_global *g = param->global;
    if (!g || !g->local || !mf_dtype_is_float(param->dtype)) return NULL;
    int nb = 0, axis = -1;
    for (int d = 0; d < g->sbp.ndim; d++) {
        if (g->sbp.d[d].kind == MF_SBP_B) nb++, axis = d;
        else if (g->sbp.d[d].kind != MF_SBP_S) return NULL;
    }
    mfi_comm *c = nb == 0 ? NULL : nb == g->sbp.ndim ? g->placement->comm : nb == 1 ? g->placement->dim_comm[axis] : NULL;
    return c && mfi_comm_size_of(c) > 1 ? c : NULL;
}

/* How parameter i's bucket sums: ZeRO's reduce-scatter, or an allreduce
 * that stays in GPU memory when MPI takes GPU buffers (its own algorithm
 * then sums: ours add on the host, which deterministic mode needs). */
static const mfi_bucket_kind *kind_of(const mf_optim *o, int i)
{
    if (o->params[i].zero) return &mfi_bucket_zero;
    bool gpu = mf_tensor_device(o->params[i].p->global->local) == MF_DEV_CUDA;
    return gpu && !mfi_coll_deterministic() && mfi_coll_cuda_aware() ? &mfi_bucket_allreduce_gpu : &mfi_bucket_allreduce;
}

void mfi_grad_buckets_free(mfi_grad_buckets *gb)
{
    if (!gb) return;
    unregister_live(gb);
    for (int k = 0; k < gb->nb; k++) {
        mfi_bucket *b = &gb->b[k];
        mfi_wait(b->req);   /* its buffers go next */
        b->kind->release(b);
        free(b->params);
        free(b->off);
    }
    free(gb->b);
    free(gb->bucket_of);
    free(gb->slot_of);
    free(gb->ready);
    mfi_ptr_map_free(&gb->leaf_param);
    free(gb);
}

/* the bucket (comm, dt, kind) being filled, or a new one */
static mfi_bucket *open_bucket(mfi_grad_buckets *gb, int *open, mfi_comm *c, mf_dtype dt, const mfi_bucket_kind *kind,
                               int64_t add, int64_t cap)
{
    for (int k = 0; k < gb->nb; k++) {
        mfi_bucket *b = &gb->b[k];
        if (!open[k] || b->comm != c || b->dt != dt || b->kind != kind) continue;
        if (b->numel > 0 && (b->numel + add) * (int64_t)mf_dtype_size(dt) > cap) {
            open[k] = 0;   /* full: the parameter starts the next one */
            continue;
        }
        return b;
    }
    mfi_bucket *nbk = realloc(gb->b, (size_t)(gb->nb + 1) * sizeof *nbk);
    if (!nbk) return NULL;
    gb->b = nbk;
    open[gb->nb] = 1;
    mfi_bucket *b = &gb->b[gb->nb++];
    *b = (mfi_bucket){.kind = kind, .comm = c, .dt = dt};
    return b;
}

static mf_status build(mf_optim *o, mfi_grad_buckets **out)
{
    *out = NULL;
    mfi_grad_buckets *gb = calloc(1, sizeof *gb);
    int n = o->n ? o->n : 1, *open = calloc((size_t)n + 1, sizeof *open);
    if (gb) {
        gb->o = o;
        gb->bucket_of = malloc((size_t)n * sizeof *gb->bucket_of);
        gb->slot_of = calloc((size_t)n, sizeof *gb->slot_of);
        gb->ready = calloc((size_t)n, sizeof *gb->ready);
    }
    mf_status st = gb && open && gb->bucket_of && gb->slot_of && gb->ready ? MF_OK
                                                                         : mfi_error(MF_ERR_NOMEM, "gradient buckets: out of memory");
    int64_t cap = (int64_t)(o->bucket_mb * 1048576.0);
    for (int i = o->n - 1; st == MF_OK && i >= 0; i--) {
        gb->bucket_of[i] = -1;
        mfi_comm *c = sum_comm(o->params[i].p);
        if (!c) continue;
        mf_tensor *l = o->params[i].p->global->local;
        int64_t numel = mf_tensor_numel(l);
        mfi_bucket *b = open_bucket(gb, open, c, l->dtype, kind_of(o, i), numel, cap);
        int *np = b ? realloc(b->params, (size_t)(b->np + 1) * sizeof *np) : NULL;
        if (np) b->params = np;
        int64_t *no = np ? realloc(b->off, (size_t)(b->np + 1) * sizeof *no) : NULL;
        if (!no) {
            st = mfi_error(MF_ERR_NOMEM, "gradient buckets: out of memory");
            break;
        }
        b->off = no;
        gb->bucket_of[i] = (int)(b - gb->b);
        gb->slot_of[i] = b->np;
        b->params[b->np] = i;
        b->off[b->np++] = b->numel;
        b->numel += numel;
    }
    for (int k = 0; st == MF_OK && k < gb->nb; k++) st = gb->b[k].kind->setup(o, &gb->b[k]);
    free(open);
    if (st == MF_OK) st = map_leaves(gb);
    if (st != MF_OK) {
        mfi_grad_buckets_free(gb);
        return st;
    }
    register_live(gb);
    *out = gb;
    return MF_OK;
}

mfi_grad_buckets *mfi_grad_buckets_of(mf_optim *o)
{
    if (!o->buckets && build(o, &o->buckets) != MF_OK) return NULL;
    return o->buckets;
}

/* Packs parameter i's local gradient (or zeros, without one) into its
 * bucket. */
static mf_status pack(mfi_grad_buckets *gb, int i)
{
    mfi_bucket *b = &gb->b[gb->bucket_of[i]];
    const mfi_opt_param *p = &gb->o->params[i];
    mf_tensor *l = p->p->global->local;
    if (!l->grad) return b->kind->pack(b, gb->slot_of[i], p, NULL);
    mf_tensor *g = mfi_contiguous_raw(l->grad);
    if (!g) return mf_last_status();
    mf_status st = mf_tensor_dtype(g) == b->dt && mf_tensor_numel(g) == mf_tensor_numel(l)
                       ? b->kind->pack(b, gb->slot_of[i], p, g)
                       : mfi_error(MF_ERR_INTERNAL, "gradient of '%s' does not match its parameter", p->name);
    mf_tensor_destroy(g);
    return st;
}

void mfi_bucket_name(const mfi_grad_buckets *gb, int k, const char *what)
{
    if (!mfi_ledger_on()) return;
    char text[128] = "";
    const mfi_bucket *b = &gb->b[k];
    if (what)
        snprintf(text, sizeof text, "%s bucket %d of %d, %.2f MiB", what, k + 1, gb->nb,
                 (double)b->numel * (double)mf_dtype_size(b->dt) / 1048576.0);
    mfi_ledger_context(text);
}

static void start_ready(mfi_grad_buckets *gb)
{
    while (!gb->dirty && gb->next < gb->nb && gb->b[gb->next].nready == gb->b[gb->next].np) {
        mfi_bucket *b = &gb->b[gb->next];
        mfi_bucket_name(gb, gb->next, b->kind->what);
        mf_status st = b->kind->start(b);
        mfi_bucket_name(gb, gb->next, NULL);
        if (st != MF_OK) {
            gb->dirty = true;   /* the sync redoes it, blocking, and reports */
            return;
        }
        gb->next++;
    }
}

/* parameter i's gradient is final for this backward: into its bucket,
 * if it has one */
static void leaf_ready(mfi_grad_buckets *gb, int i)
{
    if (gb->bucket_of[i] < 0) return;
    gb->active = true;
    if (gb->ready[i] || gb->dirty) {
        gb->dirty = true;
        return;
    }
    gb->ready[i] = true;
    if (pack(gb, i) != MF_OK) {
        gb->dirty = true;
        return;
    }
    gb->b[gb->bucket_of[i]].nready++;
    start_ready(gb);
}

/* autograd's grad-ready hook: to the optimizer(s) whose parameter the
 * leaf is */
static void on_ready(mf_tensor *leaf, void *user)
{
    (void)user;
    for (mfi_grad_buckets *gb = live; gb; gb = gb->next_live) {
        int i = param_of(gb, leaf);
        if (i >= 0) leaf_ready(gb, i);
    }
}

static void reset_round(mfi_grad_buckets *gb)
{
    for (int i = 0; i < gb->o->n; i++) gb->ready[i] = false;
    for (int k = 0; k < gb->nb; k++) gb->b[k].nready = 0;
    gb->next = 0;
    gb->dirty = gb->active = false;
}

/* Hands bucket k's sums to its parameters. */
static mf_status unpack(mfi_grad_buckets *gb, int k)
{
    mfi_bucket *b = &gb->b[k];
    for (int s = 0; s < b->np; s++) {
        mfi_opt_param *p = &gb->o->params[b->params[s]];
        if (!p->p->global->local->grad) continue;   /* no gradient on this rank: as unbucketed, none after */
        MF_TRY(b->kind->unpack(b, s, p));
    }
    return MF_OK;
}

mf_status mfi_grad_buckets_finish(mfi_grad_buckets *gb)
{
    mf_status st = MF_OK;
    if (gb->dirty) {   /* discard what is in flight, then sum the final gradients */
        for (int k = 0; k < gb->next; k++) mfi_wait(gb->b[k].req);
        for (int k = 0; k < gb->nb; k++) gb->b[k].req = NULL;
        for (int i = 0; i < gb->o->n && st == MF_OK; i++)
            if (gb->bucket_of[i] >= 0) st = pack(gb, i);
        for (int k = 0; k < gb->nb; k++) {
            mfi_bucket *b = &gb->b[k];
            mfi_bucket_name(gb, k, b->kind->what);
            mf_status s = st == MF_OK ? b->kind->sum(b) : st;
            mfi_bucket_name(gb, k, NULL);
            if (s == MF_OK) s = unpack(gb, k);
            if (st == MF_OK) st = s;
        }
        reset_round(gb);
        return st;
    }
    for (int k = gb->next; k < gb->nb && st == MF_OK; k++) {   /* parameters backward did not reach */
        mfi_bucket *b = &gb->b[k];
        for (int s = 0; s < b->np && st == MF_OK; s++)
            if (!gb->ready[b->params[s]]) st = pack(gb, b->params[s]);
        b->nready = b->np;
    }
    if (st == MF_OK) start_ready(gb);
    for (int k = 0; k < gb->nb; k++) {   /* every started request is waited for, whatever failed */
        mfi_bucket *b = &gb->b[k];
        if (!b->req) continue;
        double t0 = 0, t1 = 0;
        mf_status s = mfi_wait_times(b->req, &t0, &t1);
        b->req = NULL;
        if (mf_trace_enabled()) {
            char name[64];
            snprintf(name, sizeof name, "%s bucket %d (%.2f MiB)", b->kind->trace, k,
                     (double)b->numel * (double)mf_dtype_size(b->dt) / 1048576.0);
            mf_trace_span(name, "comm", 1, t0, t1);
        }
        if (s == MF_OK) s = unpack(gb, k);
        if (st == MF_OK) st = s;
    }
    if (st == MF_OK && gb->next < gb->nb) st = mfi_error(MF_ERR_INTERNAL, "gradient buckets: a bucket did not start");
    reset_round(gb);
    return st;
}

mf_status mfi_grad_buckets_prepare(mf_optim *o)
{
    for (int i = 0; i < o->n; i++) o->params[i].zgrad = NULL;
    if (o->bucket_mb <= 0) return MF_OK;
    mfi_grad_buckets *gb = mfi_grad_buckets_of(o);
    if (!gb) return mf_last_status();
    if (gb->active) MF_TRY(mfi_grad_buckets_finish(gb));   /* a backward without a step: drop nothing */
    return MF_OK;
}

mf_status mf_optim_set_bucket_mb(mf_optim *o, double mb)
{
    if (!o) MF_FAIL(MF_ERR_ARG, "mf_optim_set_bucket_mb: optimizer is NULL");
    if (!(mb >= 0) || mb > 1 << 20) MF_FAIL(MF_ERR_ARG, "mf_optim_set_bucket_mb: %g MiB is not in [0, 2^20]", mb);
    if (o->buckets && o->buckets->active) MF_TRY(mfi_grad_buckets_finish(o->buckets));
    mfi_grad_buckets_free(o->buckets);
    o->buckets = NULL;
    o->bucket_mb = mb;
    return MF_OK;
}

/* whether gb holds one of params */
static bool holds_any(mfi_grad_buckets *gb, const mf_tensor_list *params)
{
    for (int i = 0; i < params->n; i++)
        if (param_of(gb, mfi_local(params->items[i].tensor)) >= 0) return true;
    return false;
}

mf_status mfi_grad_buckets_flush(const mf_tensor_list *params)
{
    mf_status st = MF_OK;
    for (mfi_grad_buckets *gb = live; gb && st == MF_OK; gb = gb->next_live)
        if (gb->active && holds_any(gb, params)) st = mfi_grad_buckets_finish(gb);
    return st;
}

void mfi_grad_buckets_scaled(const mf_tensor_list *params, double coef)
{
    for (mfi_grad_buckets *gb = live; gb; gb = gb->next_live) {
        if (!holds_any(gb, params)) continue;
        for (int k = 0; k < gb->nb; k++)
            if (gb->b[k].kind->scale) gb->b[k].kind->scale(&gb->b[k], coef);
    }
}

/* The squared L2 norm of params' summed gradients where ZeRO buckets of
 * one communicator hold every one of them: each rank's summed rows (the
 * shards the reduce-scatter left, which the step updates) in one
 * allreduce, instead of summing each parameter's gradient again. False,
 * with nothing done, for any other list and in deterministic mode (whose
 * norm keeps its order). */
bool mfi_grad_buckets_zero_sumsq(const mf_tensor_list *params, double *sq, mf_status *st)
{
    mfi_grad_buckets *gb = live;
    while (gb && !holds_any(gb, params)) gb = gb->next_live;
    if (!gb || mfi_coll_deterministic()) return false;
    mfi_comm *comm = NULL;
    for (int i = 0; i < params->n; i++) {
        if (!mf_tensor_grad(params->items[i].tensor)) continue;
        int k = param_of(gb, mfi_local(params->items[i].tensor)), b = k >= 0 ? gb->bucket_of[k] : -1;
        if (b < 0 || gb->b[b].kind != &mfi_bucket_zero || !gb->o->params[k].zgrad || (comm && gb->b[b].comm != comm) ||
            (gb->b[b].dt != MF_F32 && gb->b[b].dt != MF_F64))
            return false;
        comm = gb->b[b].comm;
    }
    double local = 0;
    for (int i = 0; i < params->n; i++) {
        if (!mf_tensor_grad(params->items[i].tensor)) continue;
        int k = param_of(gb, mfi_local(params->items[i].tensor));
        const mfi_opt_param *p = &gb->o->params[k];
        const int64_t n = mfi_sim_on() ? 0 : p->rows * p->inner;   /* a simulated rank's rows have no bytes */
        if (gb->b[gb->bucket_of[k]].dt == MF_F64)
            for (int64_t e = 0; e < n; e++) local += ((const double *)p->zgrad)[e] * ((const double *)p->zgrad)[e];
        else
            for (int64_t e = 0; e < n; e++) local += (double)((const float *)p->zgrad)[e] * ((const float *)p->zgrad)[e];
    }
    *st = comm ? mfi_allreduce(comm, &local, sq, 1, MF_F64) : MF_OK;
    if (!comm) *sq = 0;
    return comm != NULL;
}
