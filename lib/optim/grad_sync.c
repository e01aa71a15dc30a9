/*
 * lib/optim/grad_sync.c - gradient sync for global parameters, in
 * buckets that overlap the backward pass.
 *
 * Backward leaves each global parameter's local gradient laid out as
 * dual(SBP): a B (data-parallel) parameter gets a P gradient, which must
 * be summed over the ranks of its B mesh axes. Parameters whose SBP is B
 * on every axis, or B on one axis and S on the others, are packed in
 * reverse parameter order (the order backward produces them) into
 * buckets of about bucket_mb MiB, one list per communicator and dtype.
 * Autograd's grad-ready hook copies each gradient into its bucket as soon
 * as it is final; when a bucket is full and every bucket before it has
 * started, its allreduce starts as a non-blocking request on the progress
 * thread while backward goes on (PyTorch DDP's scheme). The sync at the
 * step waits for the buckets in order and installs the sums as the
 * gradients. Other parameters (split on a B axis's partner in 3-D
 * meshes, or bucketing off) are boxed one at a time, as before.
 *
 * Under ZeRO-1 (zero.c) the buckets of B parameters on 1-D placements
 * are laid out rank by rank and reduce-scattered, so each rank gets the
 * summed gradient of its rows only.
 *
 * A gradient that arrives twice in one round (two backwards before a
 * step: gradient accumulation) marks the round dirty: the sync then
 * discards what is in flight and sums the final gradients, blocking.
 */
#include <stdio.h>
#include "base/ptrmap.h"
#include "lib/global/global_internal.h"
#include "lib/optim/optim_internal.h"

typedef struct bucket {
    mfi_comm *comm;
    mf_dtype dt;
    int np, nready;
    int *params;         /* optimizer indices, in packing order */
    int64_t *off;        /* element offset of each */
    int64_t numel;
    void *buf;           /* host memory: pinned when the gradients are on a GPU ... */
    bool pinned;
    bool on_dev;         /* ... or GPU memory, handed to a CUDA-aware MPI */
    mfi_request *req;
    /* ZeRO-1 buckets: the buffer is laid out rank by rank (each rank's
     * rows of every parameter), reduce-scattered into shard */
    bool zero;
    int n, me;
    int64_t *counts;     /* [n]: elements of each rank's part */
    int64_t *pos;        /* [np * n]: where slot s's rows for rank q start */
    void *shard;         /* counts[me] elements */
} bucket;

struct mfi_grad_buckets {
    mf_optim *o;
    int nb;
    bucket *b;
    int *bucket_of;      /* per parameter: its bucket, -1 when not bucketed */
    int *slot_of;        /* per parameter: its slot in the bucket */
    bool *ready;         /* per parameter, this round */
    int next;            /* the next bucket to start */
    bool dirty, active;  /* active: a gradient arrived this round */
    /* the parameter of a local leaf, by its address (a parameter's
     * local piece is fixed for its lifetime) */
    mfi_ptr_map leaf_param;
    mfi_grad_buckets *next_live;
};

/* Every optimizer's buckets, so that autograd's one grad-ready hook
 * reaches the optimizer that owns each leaf, and clipping the ones that
 * hold its parameters: each optimizer's state stays its own. */
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

/* rows of parameter slot s for rank q in a ZeRO bucket */
static void zero_rows(const mfi_opt_param *p, const bucket *b, int q, int64_t *row0, int64_t *rows)
{
    const mf_tensor *l = p->p->global->local;
    mfi_split(l->ndim ? l->shape[0] : 1, b->n, q, row0, rows);
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

void mfi_grad_buckets_free(mfi_grad_buckets *gb)
{
    if (!gb) return;
    unregister_live(gb);
    for (int k = 0; k < gb->nb; k++) {
        mfi_wait(gb->b[k].req);   /* its buffer goes next */
        free(gb->b[k].params);
        free(gb->b[k].off);
        if (gb->b[k].on_dev) mfi_free_on(MF_DEV_CUDA, gb->b[k].buf, (size_t)gb->b[k].numel * mf_dtype_size(gb->b[k].dt) + 1);
        else mfi_host_buffer_free(gb->b[k].buf, gb->b[k].pinned);
        free(gb->b[k].counts);
        free(gb->b[k].pos);
        free(gb->b[k].shard);
    }
    free(gb->b);
    free(gb->bucket_of);
    free(gb->slot_of);
    free(gb->ready);
    mfi_ptr_map_free(&gb->leaf_param);
    free(gb);
}

/* the bucket (comm, dt) being filled, or a new one */
static bucket *open_bucket(mfi_grad_buckets *gb, int *open, mfi_comm *c, mf_dtype dt, int64_t add, int64_t cap,
                           bool zero)
{
    for (int k = 0; k < gb->nb; k++) {
        bucket *b = &gb->b[k];
        if (!open[k] || b->comm != c || b->dt != dt || b->zero != zero) continue;
        if (b->numel > 0 && (b->numel + add) * (int64_t)mf_dtype_size(dt) > cap) {
            open[k] = 0;   /* full: the parameter starts the next one */
            continue;
        }
        return b;
    }
    bucket *nbk = realloc(gb->b, (size_t)(gb->nb + 1) * sizeof *nbk);
    if (!nbk) return NULL;
    gb->b = nbk;
    open[gb->nb] = 1;
    bucket *b = &gb->b[gb->nb++];
    *b = (bucket){.comm = c, .dt = dt, .zero = zero, .n = mfi_comm_size_of(c), .me = mfi_comm_rank_in(c)};
    return b;
}

/* a ZeRO bucket's rank-by-rank layout */
static mf_status zero_layout(mf_optim *o, bucket *b)
{
    b->counts = calloc((size_t)b->n, sizeof *b->counts);
    b->pos = malloc((size_t)b->np * (size_t)b->n * sizeof *b->pos + 1);
    if (!b->counts || !b->pos) MF_FAIL(MF_ERR_NOMEM, "gradient buckets: out of memory");
    for (int q = 0; q < b->n; q++)
        for (int s = 0; s < b->np; s++) {
            int64_t r0, rows;
            zero_rows(&o->params[b->params[s]], b, q, &r0, &rows);
            b->counts[q] += rows * o->params[b->params[s]].inner;
        }
    for (int q = 0; q < b->n; q++) {
        int64_t pos = 0;
        for (int r = 0; r < q; r++) pos += b->counts[r];
        for (int s = 0; s < b->np; s++) {
            int64_t r0, rows;
            b->pos[s * b->n + q] = pos;
            zero_rows(&o->params[b->params[s]], b, q, &r0, &rows);
            pos += rows * o->params[b->params[s]].inner;
        }
    }
    b->shard = malloc((size_t)b->counts[b->me] * mf_dtype_size(b->dt) + 1);
    if (!b->shard) MF_FAIL(MF_ERR_NOMEM, "gradient buckets: out of memory");
    return MF_OK;
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
        bucket *b = open_bucket(gb, open, c, l->dtype, numel, cap, o->params[i].zero);
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
    for (int k = 0; st == MF_OK && k < gb->nb; k++) {
        bucket *b = &gb->b[k];
        size_t bytes = (size_t)b->numel * mf_dtype_size(b->dt) + 1;
        /* GPU gradients stay on the GPU when MPI takes GPU buffers (its own
         * algorithm then sums them: ours add on the host) */
        b->on_dev = !b->zero && !mfi_coll_deterministic() && mfi_coll_cuda_aware() && b->np > 0 &&
                    mf_tensor_device(o->params[b->params[0]].p->global->local) == MF_DEV_CUDA;
        b->buf = b->on_dev ? mfi_alloc_on(MF_DEV_CUDA, bytes) : mfi_host_buffer(bytes, &b->pinned);
        if (!gb->b[k].buf) st = mfi_error(MF_ERR_NOMEM, "gradient buckets: out of memory");
        if (st == MF_OK && gb->b[k].zero) st = zero_layout(o, &gb->b[k]);
    }
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

/* Copies parameter i's local gradient (or zeros, without one) into its
 * bucket. */
static mf_status pack(mfi_grad_buckets *gb, int i)
{
    bucket *b = &gb->b[gb->bucket_of[i]];
    const mfi_opt_param *p = &gb->o->params[i];
    mf_tensor *l = p->p->global->local;
    size_t es = mf_dtype_size(b->dt);
    int slot = gb->slot_of[i];
    char *dst = (char *)b->buf + (size_t)b->off[slot] * es;
    int64_t numel = mf_tensor_numel(l);
    if (!l->grad && b->on_dev) {
        mfi_view z;
        memset(&z, 0, sizeof z);
        z.data = dst;
        z.dtype = b->dt;
        z.ndim = 1;
        z.shape[0] = numel;
        z.stride[0] = 1;
        return mfi_backend_for(MF_DEV_CUDA)->fill(&z, 0.0);
    }
    if (!l->grad) {
        if (!b->zero) memset(dst, 0, (size_t)numel * es);
        for (int q = 0; b->zero && q < b->n; q++) {
            int64_t r0, rows;
            zero_rows(p, b, q, &r0, &rows);
            memset((char *)b->buf + (size_t)b->pos[slot * b->n + q] * es, 0, (size_t)(rows * p->inner) * es);
        }
        return MF_OK;
    }
    mf_tensor *g = mfi_contiguous_raw(l->grad);
    if (!g) return mf_last_status();
    mf_status st = mf_tensor_dtype(g) == b->dt && mf_tensor_numel(g) == numel
                       ? MF_OK
                       : mfi_error(MF_ERR_INTERNAL, "gradient of '%s' does not match its parameter", gb->o->params[i].name);
    /* from a GPU: on its communication stream, while backward goes on */
    mf_device_type dev = mf_tensor_device(g);
    if (st == MF_OK && b->on_dev) st = mfi_device_memcpy(dev, b->dt, dst, mf_tensor_data(g), numel);
    else if (st == MF_OK && !b->zero) st = mfi_stage_out(dev, dst, mf_tensor_data(g), (size_t)numel * es);
    for (int q = 0; st == MF_OK && b->zero && q < b->n; q++) {   /* rank q's rows, in rank q's part */
        int64_t r0, rows;
        zero_rows(p, b, q, &r0, &rows);
        st = mfi_stage_out(dev, (char *)b->buf + (size_t)b->pos[slot * b->n + q] * es,
                           (const char *)mf_tensor_data(g) + (size_t)(r0 * p->inner) * es, (size_t)(rows * p->inner) * es);
    }
    mf_tensor_destroy(g);
    return st;
}

/* Names bucket k's collective for the watchdog (MF_TIMEOUT): "gradient
 * bucket 2 of 3, 1.50 MiB"; what NULL clears it. */
static void name_bucket(const mfi_grad_buckets *gb, int k, const char *what)
{
    if (!mfi_ledger_on()) return;
    char text[128] = "";
    const bucket *b = &gb->b[k];
    if (what)
        snprintf(text, sizeof text, "%s bucket %d of %d, %.2f MiB", what, k + 1, gb->nb,
                 (double)b->numel * (double)mf_dtype_size(b->dt) / 1048576.0);
    mfi_ledger_context(text);
}

/* starts bucket b's sum: an allreduce, or for ZeRO a reduce-scatter */
static mf_status start_one(bucket *b)
{
    if (b->on_dev) {   /* MPI reads the buffer outside the stream's order: the packing must be done */
        MF_TRY(mf_synchronize());
        return mfi_iallreduce(b->comm, b->buf, b->numel, b->dt, MF_COLL_MPI, &b->req);
    }
    if (b->zero) return mfi_ireduce_scatter(b->comm, b->buf, b->shard, b->counts, b->dt, &b->req);
    return mfi_iallreduce(b->comm, b->buf, b->numel, b->dt, MF_COLL_AUTO, &b->req);
}

static mf_status sum_blocking(bucket *b)
{
    if (b->on_dev) {
        MF_TRY(mf_synchronize());
        return mfi_allreduce_algo(b->comm, b->buf, b->buf, b->numel, b->dt, MF_COLL_MPI);
    }
    if (b->zero) return mfi_reduce_scatter(b->comm, b->buf, b->shard, b->counts, b->dt);
    return mfi_allreduce(b->comm, b->buf, b->buf, b->numel, b->dt);
}

static void start_ready(mfi_grad_buckets *gb)
{
    while (!gb->dirty && gb->next < gb->nb && gb->b[gb->next].nready == gb->b[gb->next].np) {
        bucket *b = &gb->b[gb->next];
        name_bucket(gb, gb->next, b->zero ? "ZeRO gradient" : "gradient");
        mf_status st = start_one(b);
        name_bucket(gb, gb->next, NULL);
        if (st != MF_OK) {
            gb->dirty = true;   /* the sync redoes it, blocking, and reports */
            return;
        }
        gb->next++;
    }
}

/* leaf's gradient is final for this backward: into gb's bucket, if its
 * parameter i has one */
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

/* Installs bucket k's sums as the gradients of its parameters. */
static mf_status unpack(mfi_grad_buckets *gb, int k)
{
    bucket *b = &gb->b[k];
    size_t es = mf_dtype_size(b->dt);
    for (int s = 0; s < b->np; s++) {
        mfi_opt_param *p = &gb->o->params[b->params[s]];
        mf_tensor *l = p->p->global->local;
        if (!l->grad) continue;   /* no gradient on this rank: as unbucketed, none after */
        if (b->zero) {   /* the summed rows stay in the shard; the P gradient stays as it is */
            p->zgrad = (char *)b->shard + (size_t)(b->pos[s * b->n + b->me] - b->pos[b->me]) * es;
            continue;
        }
        /* a fresh tensor: the old gradient's storage may be shared */
        mf_tensor *g = mfi_tensor_new_on(mf_tensor_device(l), b->dt, l->ndim, l->shape);
        if (!g) return mf_last_status();
        mf_status st = b->on_dev ? mfi_device_memcpy(MF_DEV_CUDA, b->dt, mf_tensor_data(g),
                                                      (char *)b->buf + (size_t)b->off[s] * es, mf_tensor_numel(g))
                                 : mfi_stage_in(mf_tensor_device(l), mf_tensor_data(g),
                                                (char *)b->buf + (size_t)b->off[s] * es, (size_t)mf_tensor_numel(g) * es);
        if (st == MF_OK) st = mf_tensor_set_grad(l, g);
        mf_tensor_destroy(g);
        MF_TRY(st);
        MF_TRY(mfi_global_set_grad_synced(p->p, true));
    }
    return MF_OK;
}

/* Finishes the round: starts what backward did not, waits in order,
 * installs the sums. Collective over the buckets' communicators. */
static mf_status finish(mfi_grad_buckets *gb)
{
    mf_status st = MF_OK;
    if (gb->dirty) {   /* discard what is in flight, then sum the final gradients */
        for (int k = 0; k < gb->next; k++) mfi_wait(gb->b[k].req);
        for (int k = 0; k < gb->nb; k++) gb->b[k].req = NULL;
        for (int i = 0; i < gb->o->n && st == MF_OK; i++)
            if (gb->bucket_of[i] >= 0) st = pack(gb, i);
        for (int k = 0; k < gb->nb; k++) {
            bucket *b = &gb->b[k];
            name_bucket(gb, k, b->zero ? "ZeRO gradient" : "gradient");
            mf_status s = st == MF_OK ? sum_blocking(b) : st;
            name_bucket(gb, k, NULL);
            if (s == MF_OK) s = unpack(gb, k);
            if (st == MF_OK) st = s;
        }
        reset_round(gb);
        return st;
    }
    for (int k = gb->next; k < gb->nb && st == MF_OK; k++) {   /* parameters backward did not reach */
        bucket *b = &gb->b[k];
        for (int s = 0; s < b->np && st == MF_OK; s++)
            if (!gb->ready[b->params[s]]) st = pack(gb, b->params[s]);
        b->nready = b->np;
    }
    if (st == MF_OK) start_ready(gb);
    for (int k = 0; k < gb->nb; k++) {   /* every started request is waited for, whatever failed */
        bucket *b = &gb->b[k];
        if (!b->req) continue;
        double t0 = 0, t1 = 0;
        mf_status s = mfi_wait_times(b->req, &t0, &t1);
        b->req = NULL;
        if (mf_trace_enabled()) {
            char name[64];
            snprintf(name, sizeof name, "%s bucket %d (%.2f MiB)", b->zero ? "reduce-scatter" : "allreduce", k,
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
    if (!o->buckets) MF_TRY(build(o, &o->buckets));
    if (o->buckets->active) MF_TRY(finish(o->buckets));   /* a backward without a step: drop nothing */
    return MF_OK;
}

mf_status mfi_grad_sync_one(mf_tensor *param)
{
    if (!mfi_is_global(param)) return MF_OK;
    mfi_global *g = param->global;
    mf_tensor *l = g->local;
    if (!l || !l->grad || mfi_global_grad_synced(param)) return MF_OK;
    mf_tensor *dual = mf_tensor_grad(param);   /* the wrapper, laid out as dual(sbp) */
    if (!dual) return mf_last_status();
    bool prev = mf_set_grad_enabled(false);
    mf_tensor *synced = mfi_redistribute(dual, g->placement, &g->sbp);
    mf_set_grad_enabled(prev);
    if (!synced) return mfi_error_context("gradient sync of '%s'", mf_tensor_name(param));
    mf_status st = mf_tensor_set_grad(l, synced->global->local);
    if (st == MF_OK) st = mfi_global_set_grad_synced(param, true);
    mf_tensor_destroy(synced);
    return st;
}

mf_status mf_optim_sync_grads(mf_optim *o)
{
    if (!o) MF_FAIL(MF_ERR_ARG, "mf_optim_sync_grads: optimizer is NULL");
    mfi_grad_buckets *gb = o->buckets;
    mf_status st = MF_OK;
    if (gb && gb->active) st = finish(gb);
    else if (o->bucket_mb > 0 || o->zero) {   /* no backward hook this round (grads set by hand, or
                                                  ZeRO without overlap) */
        if (!gb) MF_TRY(build(o, &o->buckets));
        gb = o->buckets;
        bool fresh = false, synced = false;   /* the same on every rank: same program */
        for (int i = 0; i < o->n; i++) {
            const mf_tensor *l = gb->bucket_of[i] >= 0 ? o->params[i].p->global->local : NULL;
            bool done = l && (mfi_global_grad_synced(o->params[i].p) || o->params[i].zgrad);   /* ZeRO shards: summed already */
            if (l && l->grad) fresh |= !done, synced |= done;
        }
        if (fresh && !synced) {   /* sum them bucketed; a mix goes one by one below */
            gb->dirty = true;
            st = finish(gb);
        }
    }
    /* the rest one by one, in reverse order */
    for (int i = o->n - 1; i >= 0 && st == MF_OK; i--)
        if (!o->params[i].zgrad) st = mfi_grad_sync_one(o->params[i].p);
    /* ZeRO parameters whose whole gradient was summed (one by one, or by
     * the pipeline's deterministic shards): their step takes this rank's
     * rows of it */
    for (int i = 0; i < o->n && st == MF_OK; i++) {
        mfi_opt_param *p = &o->params[i];
        mf_tensor *l = p->zero && !p->zgrad ? p->p->global->local : NULL;
        if (l && l->grad && mfi_global_grad_synced(p->p) && mf_tensor_is_contiguous(l->grad) &&
            mf_tensor_device(l->grad) == MF_DEV_CPU)
            p->zgrad = (char *)mf_tensor_data(l->grad) + (size_t)(p->row0 * p->inner) * mf_dtype_size(l->dtype);
    }
    return st;
}

mf_status mf_optim_set_bucket_mb(mf_optim *o, double mb)
{
    if (!o) MF_FAIL(MF_ERR_ARG, "mf_optim_set_bucket_mb: optimizer is NULL");
    if (!(mb >= 0) || mb > 1 << 20) MF_FAIL(MF_ERR_ARG, "mf_optim_set_bucket_mb: %g MiB is not in [0, 2^20]", mb);
    if (o->buckets && o->buckets->active) MF_TRY(finish(o->buckets));
    mfi_grad_buckets_free(o->buckets);
    o->buckets = NULL;
    o->bucket_mb = mb;
    return MF_OK;
}

static void scale_shards(mfi_grad_buckets *gb, double coef);

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
        if (gb->active && holds_any(gb, params)) st = finish(gb);
    return st;
}

void mfi_grad_buckets_scaled(const mf_tensor_list *params, double coef)
{
    for (mfi_grad_buckets *gb = live; gb; gb = gb->next_live)
        if (holds_any(gb, params)) scale_shards(gb, coef);
}

/* the ZeRO shards of gb, scaled by coef */
static void scale_shards(mfi_grad_buckets *gb, double coef)
{
    for (int k = 0; k < gb->nb; k++) {
        bucket *b = &gb->b[k];
        int64_t n = b->zero ? b->counts[b->me] : 0;
        if (b->dt == MF_F32)
            for (int64_t i = 0; i < n; i++) ((float *)b->shard)[i] *= (float)coef;
        else if (b->dt == MF_F64)
            for (int64_t i = 0; i < n; i++) ((double *)b->shard)[i] *= coef;
    }
}

mf_status mfi_zero_gather(mf_optim *o)
{
    mfi_grad_buckets *gb = o->buckets;
    mf_status st = MF_OK;
    for (int k = 0; gb && k < gb->nb && st == MF_OK; k++) {
        bucket *b = &gb->b[k];
        bool any = false;   /* the same on every rank */
        for (int s = 0; s < b->np; s++) any |= o->params[b->params[s]].zgrad != NULL;
        if (!b->zero || !any) continue;
        size_t es = mf_dtype_size(b->dt);
        for (int s = 0; s < b->np; s++) {   /* this rank's updated rows into its part */
            const mfi_opt_param *p = &o->params[b->params[s]];
            memcpy((char *)b->shard + (size_t)(b->pos[s * b->n + b->me] - b->pos[b->me]) * es,
                   (const char *)mf_tensor_data(p->p->global->local) + (size_t)(p->row0 * p->inner) * es,
                   (size_t)(p->rows * p->inner) * es);
        }
        name_bucket(gb, k, "ZeRO parameter");
        st = mfi_allgather(b->comm, b->shard, b->buf, b->counts, b->dt);
        name_bucket(gb, k, NULL);
        for (int s = 0; s < b->np && st == MF_OK; s++) {   /* every rank's rows back into the parameters */
            mfi_opt_param *p = &o->params[b->params[s]];
            mf_tensor *l = p->p->global->local;
            for (int q = 0; q < b->n; q++) {
                int64_t r0, rows;
                zero_rows(p, b, q, &r0, &rows);
                memcpy((char *)mf_tensor_data(l) + (size_t)(r0 * p->inner) * es,
                       (const char *)b->buf + (size_t)b->pos[s * b->n + q] * es, (size_t)(rows * p->inner) * es);
            }
            mfi_bump_version(l);
        }
    }
    for (int i = 0; i < o->n; i++) o->params[i].zgrad = NULL;
    return st;
}
