/*
 * lib/pipeline/shards.c - deterministic mode: sums over a fixed number
 * of virtual shards, so that the bits do not depend on the rank count
 * (doc/design.md, "Bit for bit on any number of ranks").
 *
 * The batch is cut into V shards of equal size, V fixed by the user. A
 * stage of k data-parallel ranks runs V / k micro-batches; micro-batch j
 * holds shard r * (V / k) + j on its rank r, so each rank holds V / k
 * consecutive shards and every shard is computed alone, with the same
 * shapes whatever k is. Instead of letting autograd add the micro-
 * batches' gradients (an order that depends on k), each rank keeps every
 * shard's gradient apart; then each parameter's gradient is the sum over
 * the V shards in shard order 0, 1, ..., V-1, whichever rank holds them
 * (mfi_allreduce_pieces). The loss is summed the same way, from each
 * shard's summed loss.
 *
 * On a mesh (data parallel x tensor parallel), the shards are cut along
 * the data-parallel dimension: each parameter is B there, and its
 * shards are summed among the ranks that differ only in that coordinate.
 * What tensor parallelism leaves partial (a B parameter whose uses see
 * different pieces, e.g. sequence parallel's LayerNorms) is then summed
 * by boxing over the other dimensions, whose sizes the run fixes, so the
 * bits still do not depend on the data-parallel rank count.
 *
 * A parameter that ZeRO-2/3 splits over the data-parallel ranks is
 * gathered for each use; while the sink is on (mfi_shards_sink), each
 * use hands its whole gradient here instead of reduce-scattering it, so
 * it is stashed and summed in shard order like the others, and this
 * rank then keeps its rows. The sum of squares for gradient clipping is
 * taken from the whole gradient, before the rows are cut.
 *
 * Cost: V / k copies of the stage's gradients on each rank, an
 * all-to-all and an allgather per parameter instead of one allreduce,
 * and GEMMs of B / V rows.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lib/global/global_internal.h"
#include "lib/pipeline/shards.h"

typedef struct sparam {
    mf_tensor *t;        /* the parameter (one reference) */
    char name[128];      /* its name in the stage's layers, for messages */
    int64_t numel;
    char *pieces;        /* n pieces of numel elements, this rank's shards in order */
    /* a parameter split by ZeRO-2/3: its uses' whole gradients (the sink) */
    bool zero;
    mf_tensor *acc;      /* this shard's, summed over the uses in backward's order */
    mf_nd_sbp zsbp;      /* their layout (P along the data-parallel dimension) */
    int zndim;
    int64_t zshape[MF_MAX_DIMS], znumel;
    char *zpieces;       /* n pieces of znumel elements */
} sparam;

struct mfi_shards {
    int V, n;            /* shards, and this rank's share of them */
    int dp;              /* the data-parallel mesh dimension */
    int np;
    sparam *p;
};

void mfi_shards_destroy(mfi_shards *s)
{
    if (!s) return;
    for (int i = 0; i < s->np; i++) {
        free(s->p[i].pieces);
        free(s->p[i].zpieces);
        mf_tensor_destroy(s->p[i].acc);
        mf_tensor_destroy(s->p[i].t);
    }
    free(s->p);
    free(s);
}

/* t among the parameters, once (a tied weight belongs to two layers) */
static mf_status add(mfi_shards *s, mf_tensor *t, const char *name)
{
    for (int j = 0; j < s->np; j++)
        if (s->p[j].t == t) return MF_OK;
    if (!mf_tensor_requires_grad(t)) return MF_OK;
    if (!t->global)
        MF_FAIL(MF_ERR_ARG, "deterministic shards: parameter '%s' is not global on its stage's placement", name);
    sparam *np = realloc(s->p, (size_t)(s->np + 1) * sizeof *np);
    if (!np) MF_FAIL(MF_ERR_NOMEM, "deterministic shards: out of memory");
    s->p = np;
    sparam *p = &s->p[s->np];
    memset(p, 0, sizeof *p);
    const mf_tensor *l = t->global->local;
    p->numel = l ? mf_tensor_numel(l) : 0;
    p->pieces = malloc((size_t)(s->n * p->numel) * mf_dtype_size(t->dtype) + 1);
    if (!p->pieces)
        MF_FAIL(MF_ERR_NOMEM, "deterministic shards: out of memory for %d copies of '%s''s gradient", s->n, name);
    p->t = mf_tensor_retain(t);
    snprintf(p->name, sizeof p->name, "%s", name);
    s->np++;
    return MF_OK;
}

mfi_shards *mfi_shards_create(mf_module *seq, int first, int last, int V, int n, int dp)
{
    mfi_shards *s = calloc(1, sizeof *s);
    if (!s) {
        mfi_error(MF_ERR_NOMEM, "deterministic shards: out of memory");
        return NULL;
    }
    s->V = V;
    s->n = n;
    s->dp = dp;
    mf_status st = MF_OK;
    for (int c = first; c < last && st == MF_OK; c++) {
        mf_tensor_list *l = mf_module_parameters(mf_module_child_at(seq, c));
        if (!l) st = mf_last_status();
        for (int i = 0; l && i < l->n && st == MF_OK; i++) st = add(s, l->items[i].tensor, l->items[i].name);
        mf_tensor_list_destroy(l);
    }
    if (st != MF_OK) {
        mfi_shards_destroy(s);
        return NULL;
    }
    return s;
}

static mf_tensor *local_of(mf_tensor *t) { return t->global->local; }

/* the sink (mfi_use_sunk): one use's gradient of ZeRO parameter w */
static mf_status sink(void *ctx, mf_tensor *w, mf_tensor *gy, const mf_nd_sbp *gsbp)
{
    mfi_shards *s = ctx;
    sparam *p = NULL;
    for (int i = 0; i < s->np && !p; i++)
        if (s->p[i].t == w) p = &s->p[i];
    if (!p) MF_FAIL(MF_ERR_INTERNAL, "deterministic shards: '%s' is not a parameter of this stage", mf_tensor_name(w));
    if (p->acc) {
        if (mf_tensor_numel(gy) != p->znumel)
            MF_FAIL(MF_ERR_INTERNAL, "deterministic shards: two uses of '%s' with other layouts", mf_tensor_name(w));
        return mf_add_(p->acc, gy, 1.0);
    }
    if (p->zpieces && (mf_tensor_numel(gy) != p->znumel || !mfi_nd_sbp_equal(gsbp, &p->zsbp)))
        MF_FAIL(MF_ERR_INTERNAL, "deterministic shards: '%s' used with another layout than before", mf_tensor_name(w));
    p->zero = true;
    p->zsbp = *gsbp;
    p->zndim = gy->ndim;
    memcpy(p->zshape, gy->shape, (size_t)gy->ndim * sizeof *gy->shape);
    p->znumel = mf_tensor_numel(gy);
    if (!p->zpieces && !(p->zpieces = calloc((size_t)s->n, (size_t)p->znumel * mf_dtype_size(gy->dtype))))
        MF_FAIL(MF_ERR_NOMEM, "deterministic shards: out of memory for '%s'", mf_tensor_name(w));
    p->acc = mfi_contiguous_raw(gy);
    if (p->acc && p->acc == gy) {   /* its own bytes, to add the next use into */
        mf_tensor_destroy(p->acc);
        p->acc = mfi_tensor_new_on(mf_tensor_device(gy), gy->dtype, gy->ndim, gy->shape);
        if (p->acc && mf_copy_(p->acc, gy) != MF_OK) {
            mf_tensor_destroy(p->acc);
            p->acc = NULL;
        }
    }
    return p->acc ? MF_OK : mf_last_status();
}

void mfi_shards_sink(mfi_shards *s, bool on) { mfi_set_use_sink(on && s ? sink : NULL, s); }

/* slot j of a ZeRO parameter: its uses' gradient in this shard */
static mf_status stash_zero(sparam *p, int j)
{
    size_t bytes = (size_t)p->znumel * mf_dtype_size(p->t->dtype);
    char *dst = p->zpieces + (size_t)j * bytes;
    if (!p->acc) {
        memset(dst, 0, bytes);
        return MF_OK;
    }
    mf_status st = mfi_stage_out(mf_tensor_device(p->acc), dst, mf_tensor_data(p->acc), bytes);
    mf_tensor_destroy(p->acc);
    p->acc = NULL;
    return st;
}

mf_status mfi_shards_stash(mfi_shards *s, int j)
{
    for (int i = 0; i < s->np; i++) {
        sparam *p = &s->p[i];
        if (p->zpieces) MF_TRY(stash_zero(p, j));
        if (p->zero && local_of(p->t) && local_of(p->t)->grad)
            return mfi_error(MF_ERR_ARG, "deterministic shards: parameter '%s' is split over the data-parallel ranks "
                             "and was read outside its module's use (mf_module_use_begin) too, so part of its gradient "
                             "cannot be summed in shard order", p->name);
        mf_tensor *l = local_of(p->t);
        size_t es = mf_dtype_size(p->t->dtype), bytes = (size_t)p->numel * es;
        char *dst = p->pieces + (size_t)j * bytes;
        if (!l) continue;
        if (!l->grad) {   /* nothing reached it from this shard */
            memset(dst, 0, bytes);
            continue;
        }
        mf_tensor *g = mfi_contiguous_raw(l->grad);
        if (!g) return mf_last_status();
        mf_status st = mf_tensor_numel(g) == p->numel && g->dtype == p->t->dtype
                           ? mfi_stage_out(mf_tensor_device(g), dst, mf_tensor_data(g), bytes)
                           : mfi_error(MF_ERR_INTERNAL, "deterministic shards: the gradient of '%s' does not match it",
                                       mf_tensor_name(p->t));
        mf_tensor_destroy(g);
        MF_TRY(st);
        MF_TRY(mf_tensor_set_grad(l, NULL));   /* the next shard's starts from nothing */
    }
    return MF_OK;
}

/* g (this rank's piece of p's gradient, summed over the shards, laid
 * out as `from`: B over the data-parallel dimension) with the other
 * dimensions' partial sums done: p's own layout. Takes g. With sumsq,
 * also the sum of squares of the whole gradient, taken before a
 * data-parallel split (ZeRO) cuts it into rows. */
static mf_tensor *finish_other_dims(const mfi_shards *s, mf_tensor *p, const mf_nd_sbp *gsbp, mf_tensor *g, double *sumsq)
{
    mf_nd_sbp from = *gsbp, to = p->global->sbp;
    from.d[s->dp] = (mf_sbp){MF_SBP_B, 0};
    if (mfi_nd_sbp_equal(&from, &to) && !sumsq) return g;
    mfi_meta gm;
    mfi_meta_of(p, &gm);
    mf_tensor *w = mfi_global_wrap(g, p->global->placement, &from, &gm, false);
    if (!w) return NULL;
    bool prev = mf_set_grad_enabled(false);
    mf_tensor *done = NULL;
    if (sumsq) {   /* whole over dp, the other dimensions p's own */
        mf_nd_sbp whole = to;
        whole.d[s->dp] = (mf_sbp){MF_SBP_B, 0};
        mf_tensor *b = mfi_redistribute(w, p->global->placement, &whole);
        mf_tensor *sq = b ? mfi_reduce(MFI_RED_SUMSQ, b, 0, NULL, false) : NULL;
        if (sq) *sumsq = mf_tensor_item(sq);
        done = sq ? mfi_redistribute(b, p->global->placement, &to) : NULL;
        mf_tensor_destroy(sq);
        mf_tensor_destroy(b);
    } else {
        done = mfi_redistribute(w, p->global->placement, &to);
    }
    mf_set_grad_enabled(prev);
    mf_tensor *l = done && done->global->local ? mf_tensor_retain(done->global->local) : NULL;
    if (done && !l) mfi_error(MF_ERR_INTERNAL, "deterministic shards: no local piece of '%s'", mf_tensor_name(p));
    mf_tensor_destroy(done);
    mf_tensor_destroy(w);
    return l;
}

mf_status mfi_shards_sum(mfi_shards *s)
{
    mf_status st = MF_OK;
    for (int i = 0; i < s->np && st == MF_OK; i++) {
        sparam *p = &s->p[i];
        mf_tensor *l = local_of(p->t);
        if (!l) continue;
        mfi_comm *c = p->t->global->placement->dim_comm[s->dp];
        const bool z = p->zero;   /* ZeRO: the whole gradient's pieces, then this rank's rows */
        if (!z && p->t->global->sbp.d[s->dp].kind != MF_SBP_B)
            return mfi_error(MF_ERR_ARG, "deterministic shards: parameter '%s' is split over the data-parallel ranks "
                             "but was not gathered for its module's use (mf_module_use_begin), so its gradient cannot be "
                             "summed in shard order", p->name);
        const int64_t numel = z ? p->znumel : p->numel;
        size_t bytes = (size_t)numel * mf_dtype_size(p->t->dtype);
        mf_tensor *g = z ? mfi_tensor_new_on(MF_DEV_CPU, l->dtype, p->zndim, p->zshape)
                         : mfi_tensor_new_on(MF_DEV_CPU, l->dtype, l->ndim, l->shape);
        if (!g) return mf_last_status();
        if (mfi_ledger_on()) {
            char text[160];
            snprintf(text, sizeof text, "deterministic gradient sum of '%s' over %d shards", mf_tensor_name(p->t), s->V);
            mfi_ledger_context(text);
        }
        st = mfi_allreduce_pieces(c, z ? p->zpieces : p->pieces, s->V, mf_tensor_data(g), numel, l->dtype, MF_COLL_AUTO);
        mfi_ledger_context("");
        if (st == MF_OK && mf_tensor_device(l) != MF_DEV_CPU) {
            mf_tensor *d = mfi_tensor_new_on(mf_tensor_device(l), l->dtype, g->ndim, g->shape);
            st = d ? mfi_stage_in(mf_tensor_device(l), mf_tensor_data(d), mf_tensor_data(g), bytes) : mf_last_status();
            mf_tensor_destroy(g);
            g = d;
        }
        mf_nd_sbp dual = mfi_nd_sbp_dual(&p->t->global->sbp);
        double sq = 0;
        if (st == MF_OK && !(g = finish_other_dims(s, p->t, z ? &p->zsbp : &dual, g, z ? &sq : NULL))) st = mf_last_status();
        if (st == MF_OK) st = mf_tensor_set_grad(l, g);
        if (st == MF_OK) st = mfi_global_set_grad_synced(p->t, true);   /* summed: the optimizer's sync leaves it */
        if (st == MF_OK && z) st = mfi_global_set_grad_sumsq(p->t, sq);
        mf_tensor_destroy(g);
    }
    return st;
}

mf_status mfi_shards_loss(mfi_comm *dp, const double *mine, int n, int V, double *sum)
{
    int k = mfi_comm_size_of(dp);
    double *all = malloc((size_t)V * sizeof *all);
    int64_t *counts = malloc((size_t)k * sizeof *counts);
    mf_status st = all && counts ? MF_OK : mfi_error(MF_ERR_NOMEM, "deterministic shards: out of memory");
    if (st == MF_OK && (int64_t)k * n != V) st = mfi_error(MF_ERR_INTERNAL, "deterministic shards: %d ranks x %d != %d", k, n, V);
    for (int q = 0; st == MF_OK && q < k; q++) counts[q] = n;
    if (st == MF_OK) st = mfi_allgather(dp, mine, all, counts, MF_F64);
    *sum = 0;
    for (int v = 0; st == MF_OK && v < V; v++) *sum += all[v];   /* in shard order */
    free(all);
    free(counts);
    return st;
}
