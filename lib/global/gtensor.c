/*
 * lib/global/gtensor.c - global tensors: wrapping local pieces, creation
 * (from pieces, from a full value, zeros/ones, Philox by global index),
 * to_local, redistribute, gather, and what the local-tensor API does with
 * a global tensor (item, print, gradients, backward).
 */
#include <math.h>
#include <stdio.h>
#include "lib/global/global_internal.h"

mf_tensor *mfi_global_wrap(mf_tensor *local, const mf_placement *p, const mf_nd_sbp *s, const mfi_meta *gm, bool req)
{
    if (local && mf_tensor_device(local) != p->dev) {
        /* the piece lives on the placement's device (a recorded move when
         * it requires grad, so that gradients flow back) */
        mf_tensor *moved = mf_to_device(local, p->dev);
        mf_tensor_destroy(local);
        if (!moved) return NULL;
        local = moved;
    }
    mf_tensor *t = calloc(1, sizeof *t);
    mfi_global *g = calloc(1, sizeof *g);
    if (!t || !g) {
        free(t);
        free(g);
        mf_tensor_destroy(local);
        mfi_error(MF_ERR_NOMEM, "global tensor: out of memory");
        return NULL;
    }
    t->refcount = 1;
    t->dtype = gm->dtype;
    t->ndim = gm->ndim;
    memcpy(t->shape, gm->shape, sizeof t->shape);
    mfi_contig_strides(t->ndim, t->shape, t->stride);
    t->requires_grad = local ? local->requires_grad : req;
    g->placement = mf_placement_retain((mf_placement *)p);
    g->sbp = *s;
    g->local = local;
    t->global = g;
    return t;
}

void mfi_global_free(struct mfi_global *g)
{
    if (!g) return;
    mf_tensor_destroy(g->local);
    mf_placement_destroy(g->placement);
    free(g);
}

char *mfi_global_desc(const mf_tensor *t, char *buf, size_t size)
{
    char sh[128], sb[96], pl[128];
    if (!t) snprintf(buf, size, "(null)");
    else if (!t->global) snprintf(buf, size, "%s %s local", mf_dtype_name(t->dtype), mf_tensor_shape_str(t, sh, sizeof sh));
    else
        snprintf(buf, size, "%s %s %s on %s", mf_dtype_name(t->dtype), mf_tensor_shape_str(t, sh, sizeof sh),
                 mf_nd_sbp_str(&t->global->sbp, sb, sizeof sb), mf_placement_str(t->global->placement, pl, sizeof pl));
    return buf;
}

bool mf_tensor_is_global(const mf_tensor *t) { return mfi_is_global(t); }
const mf_placement *mf_global_placement(const mf_tensor *t) { return mfi_is_global(t) ? t->global->placement : NULL; }

mf_status mf_global_nd_sbp(const mf_tensor *t, mf_nd_sbp *out)
{
    if (!mfi_is_global(t)) MF_FAIL(MF_ERR_ARG, "mf_global_nd_sbp: not a global tensor");
    *out = t->global->sbp;
    return MF_OK;
}

char *mf_global_sbp_str(const mf_tensor *t, char *buf, size_t size)
{
    if (!mfi_is_global(t)) {
        snprintf(buf, size, "local");
        return buf;
    }
    return mf_nd_sbp_str(&t->global->sbp, buf, size);
}

static mf_status need_global(const char *fn, const mf_tensor *t)
{
    MF_TRY(mfi_check_input(fn, "the tensor", t));
    if (!t->global) MF_FAIL(MF_ERR_ARG, "%s: the tensor is local; make it global with mf_to_global", fn);
    return MF_OK;
}

/* ------------------------------------------------------------ creation */
/* the piece of a full (same on every rank) value under s */
static mf_tensor *piece_of_full(mf_tensor *full, const mf_placement *p, const mf_nd_sbp *s)
{
    if (p->index < 0) return NULL;
    mfi_meta gm;
    mfi_meta_of(full, &gm);
    mfi_box b;
    mfi_region(&gm, s, p, p->coord, &b);
    mf_tensor *v = mf_tensor_retain(full), *piece;
    for (int a = 0; a < gm.ndim && v; a++) {
        if (b.count[a] == gm.shape[a]) continue;
        mf_tensor *n = mf_narrow(v, a, b.start[a], b.count[a]);
        mf_tensor_destroy(v);
        v = n;
    }
    if (!v) return NULL;
    piece = mf_clone(v);   /* own storage, and a node to full when it requires grad */
    mf_tensor_destroy(v);
    for (int d = 0; piece && d < s->ndim; d++)
        if (s->d[d].kind == MF_SBP_P && p->coord[d] != 0) {
            mf_tensor *z = mf_zeros_like(piece);
            if (z && piece->requires_grad) {
                mf_tensor *m = mf_mul(piece, z);   /* keeps the graph */
                mf_tensor_destroy(z);
                z = m;
            }
            mf_tensor_destroy(piece);
            piece = z;
        }
    return piece;
}

mf_tensor *mf_global_from_full(mf_tensor *full, const mf_placement *p, const char *sbp)
{
    mf_nd_sbp s;
    if (mfi_check_input("mf_global_from_full", "full", full) != MF_OK) return NULL;
    if (full->global) {
        mfi_error(MF_ERR_ARG, "mf_global_from_full: the tensor is already global; use mf_redistribute");
        return NULL;
    }
    if (mfi_nd_sbp_from("mf_global_from_full", sbp, p, full->ndim, &s) != MF_OK) return NULL;
    mf_tensor *piece = piece_of_full(full, p, &s);
    if (!piece && p->index >= 0) return NULL;
    mfi_meta gm;
    mfi_meta_of(full, &gm);
    return mfi_global_wrap(piece, p, &s, &gm, full->requires_grad);
}

mf_tensor *mf_to_global(mf_tensor *local, const mf_placement *p, const char *sbp)
{
    const char *fn = "mf_to_global";
    mf_nd_sbp s;
    mfi_meta gm, lm;
    if (!p) {
        mfi_error(MF_ERR_ARG, "%s: placement is NULL", fn);
        return NULL;
    }
    bool in = p->index >= 0;
    if (in && mfi_check_input(fn, "local", local) != MF_OK) return NULL;
    if (in && local->global) {
        mfi_error(MF_ERR_ARG, "%s: the tensor is already global; use mf_redistribute", fn);
        return NULL;
    }
    /* the first member tells everyone the rank, dtype and piece shape */
    int64_t hdr[2 + MF_MAX_DIMS] = {0};
    if (in) {
        mfi_meta_of(local, &lm);
        hdr[0] = lm.ndim;
        hdr[1] = lm.dtype;
        memcpy(hdr + 2, lm.shape, (size_t)lm.ndim * sizeof *hdr);
    }
    if (mfi_bcast(mfi_comm_world(), hdr, 2 + MF_MAX_DIMS, MF_I64, p->ranks[0]) != MF_OK) return NULL;
    if (mfi_nd_sbp_from(fn, sbp, p, (int)hdr[0], &s) != MF_OK) return NULL;
    memset(&gm, 0, sizeof gm);
    gm.ndim = (int)hdr[0];
    gm.dtype = (mf_dtype)hdr[1];
    memcpy(gm.shape, hdr + 2, (size_t)gm.ndim * sizeof *hdr);
    /* split axes: the global length is the sum of the pieces along each
     * split mesh dimension, outer to inner; pieces must be balanced */
    mf_status st = MF_OK;
    char msg[256] = "";
    if (in && (lm.ndim != gm.ndim || lm.dtype != gm.dtype)) {
        snprintf(msg, sizeof msg, "%s: rank %d's piece is %d-D %s but the first rank's is %d-D %s", fn,
                 mfi_comm_rank_in(mfi_comm_world()), lm.ndim, mf_dtype_name(lm.dtype), gm.ndim, mf_dtype_name(gm.dtype));
        st = MF_ERR_SHAPE;
    }
    int64_t lens[MF_MAX_DIMS];
    for (int a = 0; a < gm.ndim; a++) lens[a] = in && st == MF_OK ? lm.shape[a] : 0;
    for (int d = s.ndim - 1; d >= 0 && in; d--) {
        if (s.d[d].kind != MF_SBP_S) continue;
        int a = s.d[d].axis;
        int64_t len = lens[a], total = len;
        if (mfi_allreduce(p->dim_comm[d], &total, &total, 1, MF_I64) != MF_OK) return NULL;
        int64_t st0, want;
        mfi_split(total, p->mesh[d], p->coord[d], &st0, &want);
        if (want != len && st == MF_OK) {
            snprintf(msg, sizeof msg, "%s: rank %d holds %lld of %lld along axis %d; S pieces must be the "
                     "balanced split (%lld here)", fn, mfi_comm_rank_in(mfi_comm_world()), (long long)len,
                     (long long)total, a, (long long)want);
            st = MF_ERR_SHAPE;
        }
        lens[a] = total;
    }
    /* the global shape comes from the first member */
    if (mfi_bcast(mfi_comm_world(), lens, gm.ndim, MF_I64, p->ranks[0]) != MF_OK) return NULL;
    memcpy(gm.shape, lens, (size_t)gm.ndim * sizeof *lens);
    if (st != MF_OK) mfi_error(st, "%s", msg);
    if (mf_agree(st) != MF_OK) return NULL;
    mf_tensor *piece = NULL;
    if (in) {
        /* B: the first rank of each B dimension broadcasts */
        /* broadcast from host memory; the wrap moves the piece back */
        piece = mf_tensor_device(local) == MF_DEV_CPU ? mf_clone(local) : mfi_on_device(local, MF_DEV_CPU);
        for (int d = 0; piece && d < s.ndim; d++)
            if (s.d[d].kind == MF_SBP_B &&
                mfi_bcast(p->dim_comm[d], mf_tensor_data(piece), mf_tensor_numel(piece), gm.dtype, 0) != MF_OK) {
                mf_tensor_destroy(piece);
                return NULL;
            }
        if (!piece) return NULL;
    }
    return mfi_global_wrap(piece, p, &s, &gm, false);
}

static mf_status shape_meta(const char *fn, mf_dtype dt, int ndim, const int64_t *shape, mfi_meta *gm)
{
    if (ndim < 0 || ndim > MF_MAX_DIMS || (ndim && !shape)) MF_FAIL(MF_ERR_ARG, "%s: bad shape", fn);
    memset(gm, 0, sizeof *gm);
    gm->dtype = dt;
    gm->ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) MF_FAIL(MF_ERR_ARG, "%s: negative size %lld", fn, (long long)shape[i]);
        gm->shape[i] = shape[i];
    }
    return MF_OK;
}

static mf_tensor *global_fill(const char *fn, mf_dtype dt, int ndim, const int64_t *shape, const mf_placement *p,
                              const char *sbp, int how)
{
    mf_nd_sbp s;
    mfi_meta gm;
    if (shape_meta(fn, dt, ndim, shape, &gm) != MF_OK) return NULL;
    if (mfi_nd_sbp_from(fn, sbp, p, ndim, &s) != MF_OK) return NULL;
    if (how >= 2 && !mf_dtype_is_float(dt)) {
        mfi_error(MF_ERR_DTYPE, "%s: dtype %s is not a float dtype", fn, mf_dtype_name(dt));
        return NULL;
    }
    /* the draw number is taken on every rank, so the generators stay in step */
    uint64_t key = how >= 2 ? mfi_rng_next_key() : 0;
    mf_tensor *piece = NULL;
    if (p->index >= 0) {
        mfi_box b;
        mfi_region(&gm, &s, p, p->coord, &b);
        bool partial_zero = false;
        for (int d = 0; d < s.ndim; d++)
            if (s.d[d].kind == MF_SBP_P && p->coord[d] != 0) partial_zero = true;
        int prev = mfi_device_push(p->dev);
        piece = partial_zero || how == 0 ? mf_zeros(dt, ndim, b.count) : how == 1 ? mf_ones(dt, ndim, b.count)
                                                                               : mfi_tensor_new(dt, ndim, b.count);
        mfi_device_pop(prev);
        if (!piece) return NULL;
        if (how >= 2 && !partial_zero && mf_tensor_numel(piece) > 0) {
            /* one Philox run per innermost row, at its global index */
            int last = ndim - 1;
            int64_t gstr[MF_MAX_DIMS], rows = 1, idx[MF_MAX_DIMS] = {0};
            mfi_contig_strides(ndim, gm.shape, gstr);
            for (int i = 0; i < last; i++) rows *= b.count[i];
            int64_t run = ndim ? b.count[last] : 1;
            const mfi_backend *be = mfi_backend_of(piece);
            for (int64_t r = 0; r < rows; r++) {
                int64_t g0 = ndim ? b.start[last] : 0;
                for (int i = 0; i < last; i++) g0 += (b.start[i] + idx[i]) * gstr[i];
                mfi_view v = mfi_view_of(piece);
                v.ndim = 1;
                v.shape[0] = run;
                v.stride[0] = 1;
                v.data = (char *)v.data + (size_t)(r * run) * mf_dtype_size(dt);
                mf_status st;
                MFI_KERNEL(st, MF_PROF_OTHER, be, philox_fill, &v, how == 2 ? MFI_DIST_UNIFORM : MFI_DIST_NORMAL, 0.0,
                           1.0, mf_seed(), key, (uint64_t)g0);
                if (st != MF_OK) {
                    mf_tensor_destroy(piece);
                    return NULL;
                }
                for (int i = last - 1; i >= 0; i--) {
                    if (++idx[i] < b.count[i]) break;
                    idx[i] = 0;
                }
            }
        }
    }
    return mfi_global_wrap(piece, p, &s, &gm, false);
}

mf_tensor *mf_global_zeros(mf_dtype dt, int nd, const int64_t *sh, const mf_placement *p, const char *sbp)
{
    return global_fill("mf_global_zeros", dt, nd, sh, p, sbp, 0);
}
mf_tensor *mf_global_ones(mf_dtype dt, int nd, const int64_t *sh, const mf_placement *p, const char *sbp)
{
    return global_fill("mf_global_ones", dt, nd, sh, p, sbp, 1);
}
mf_tensor *mf_global_rand(mf_dtype dt, int nd, const int64_t *sh, const mf_placement *p, const char *sbp)
{
    return global_fill("mf_global_rand", dt, nd, sh, p, sbp, 2);
}
mf_tensor *mf_global_randn(mf_dtype dt, int nd, const int64_t *sh, const mf_placement *p, const char *sbp)
{
    return global_fill("mf_global_randn", dt, nd, sh, p, sbp, 3);
}

/* ------------------------------------------------------------- moving */
mf_tensor *mf_to_local(mf_tensor *t)
{
    if (need_global("mf_to_local", t) != MF_OK) return NULL;
    if (!t->global->local) {
        char pl[128];
        mfi_error(MF_ERR_STATE, "mf_to_local: rank %d is outside the tensor's placement '%s'",
                  mfi_comm_rank_in(mfi_comm_world()), mf_placement_str(t->global->placement, pl, sizeof pl));
        return NULL;
    }
    return mf_tensor_retain(t->global->local);
}

static int cmp_int(const void *x, const void *y)
{
    int a = *(const int *)x, b = *(const int *)y;
    return (a > b) - (a < b);
}

/* the same set of ranks, in any mesh order */
static bool same_ranks(const mf_placement *a, const mf_placement *b)
{
    if (a == b) return true;
    if (a->n != b->n) return false;
    if (!memcmp(a->ranks, b->ranks, (size_t)a->n * sizeof *a->ranks)) return true;
    int *s = a->n > 64 ? malloc(2 * (size_t)a->n * sizeof *s) : NULL;
    if (s) {   /* sorted, for a thousand ranks */
        memcpy(s, a->ranks, (size_t)a->n * sizeof *s);
        memcpy(s + a->n, b->ranks, (size_t)a->n * sizeof *s);
        qsort(s, (size_t)a->n, sizeof *s, cmp_int);
        qsort(s + a->n, (size_t)a->n, sizeof *s, cmp_int);
        bool same = !memcmp(s, s + a->n, (size_t)a->n * sizeof *s);
        free(s);
        return same;
    }
    for (int i = 0; i < a->n; i++) {
        bool found = false;
        for (int j = 0; j < b->n && !found; j++) found = a->ranks[i] == b->ranks[j];
        if (!found) return false;
    }
    return true;
}

mf_tensor *mfi_redistribute(mf_tensor *t, const mf_placement *p, const mf_nd_sbp *s)
{
    const mfi_global *g = t->global;
    if (g->placement->dev != p->dev) {
        char a[128], b[128];
        mfi_error(MF_ERR_ARG, "mf_redistribute: no boxing path from placement '%s' to '%s' (device types differ)",
                  mf_placement_str(g->placement, a, sizeof a), mf_placement_str(p, b, sizeof b));
        return NULL;
    }
    if (t->requires_grad && mf_grad_enabled() && !same_ranks(g->placement, p)) {
        char a[128], b[128];
        mfi_error(MF_ERR_ARG, "mf_redistribute: moving a tensor that requires grad from '%s' to '%s' needs "
                  "autograd across different rank sets; run the stages with mf_pipeline (mpiflow/pipeline.h), "
                  "detach it, or use placements with the same ranks", mf_placement_str(g->placement, a, sizeof a),
                  mf_placement_str(p, b, sizeof b));
        return NULL;
    }
    mfi_meta gm;
    mfi_meta_of(t, &gm);
    mf_tensor *out = NULL;
    mfi_box_context("boxing", t, &g->sbp, s);
    mf_status st = mfi_boxing(g->local, &gm, g->placement, &g->sbp, p, s, &out);
    mfi_ledger_context("");
    if (st != MF_OK) return NULL;
    return mfi_global_wrap(out, p, s, &gm, t->requires_grad);
}

mf_tensor *mf_redistribute(mf_tensor *t, const mf_placement *p, const char *sbp)
{
    mf_nd_sbp s;
    if (need_global("mf_redistribute", t) != MF_OK) return NULL;
    if (mfi_nd_sbp_from("mf_redistribute", sbp, p, t->ndim, &s) != MF_OK) return NULL;
    return mfi_redistribute(t, p, &s);
}

mf_tensor *mf_global_gather(mf_tensor *t)
{
    if (need_global("mf_global_gather", t) != MF_OK) return NULL;
    /* to B on a world placement of the same ranks, then the local piece */
    mf_placement *w = mf_placement_world();
    if (!w) return NULL;
    mf_nd_sbp b = mfi_nd_sbp_all(1, MF_SBP_B);
    bool prev = mf_set_grad_enabled(false);
    mf_tensor *full = NULL, *g = NULL;
    mfi_meta gm;
    mfi_meta_of(t, &gm);
    mf_status st = mfi_boxing(t->global->local, &gm, t->global->placement, &t->global->sbp, w, &b, &full);
    mf_set_grad_enabled(prev);
    mf_placement_destroy(w);
    if (st != MF_OK) return NULL;
    g = mfi_tensor_alias(full);
    mf_tensor_destroy(full);
    return g;
}

/* ------------------------------------------- the local API on globals */
double mfi_global_item(const mf_tensor *t)
{
    mf_tensor *full = mf_global_gather((mf_tensor *)t);
    if (!full) return NAN;
    double v = mf_tensor_item(full);
    mf_tensor_destroy(full);
    return v;
}

mf_status mfi_global_copy_out(const mf_tensor *t, mf_dtype dt, void *dst, int64_t count)
{
    mf_tensor *full = mf_global_gather((mf_tensor *)t);
    if (!full) return mf_last_status();
    mf_status st = mf_tensor_copy_out(full, dt, dst, count);
    mf_tensor_destroy(full);
    return st;
}

void mfi_global_print(const mf_tensor *t, FILE *f, int max_elems)
{
    char d[320];
    mf_tensor *full = mf_global_gather((mf_tensor *)t);
    if (mfi_comm_rank_in(mfi_comm_world()) != 0) {
        mf_tensor_destroy(full);
        return;
    }
    fprintf(f, "global %s\n  ", mfi_global_desc(t, d, sizeof d));
    if (full) mf_tensor_print(full, f, max_elems);
    else fprintf(f, "(cannot gather: %s)\n", mf_last_error());
    mf_tensor_destroy(full);
}

/* The gradient as a global tensor: laid out as dual(sbp) until the
 * gradient sync has made it the parameter's own sbp. */
mf_tensor *mfi_global_grad(mf_tensor *t)
{
    mfi_global *g = t->global;
    mf_tensor *lg = g->local ? g->local->grad : NULL;
    mf_nd_sbp s = mfi_global_grad_synced(t) ? g->sbp : mfi_nd_sbp_dual(&g->sbp);
    bool fresh = t->grad && t->grad->global && t->grad->global->local == lg && mfi_nd_sbp_equal(&t->grad->global->sbp, &s);
    if (fresh) return t->grad;
    mf_tensor_destroy(t->grad);
    t->grad = NULL;
    if (!lg && g->local) return NULL;
    mfi_meta gm;
    mfi_meta_of(t, &gm);
    t->grad = mfi_global_wrap(mf_tensor_retain(lg), g->placement, &s, &gm, false);
    return t->grad;
}

mf_status mfi_global_set_grad(mf_tensor *t, mf_tensor *grad)
{
    mfi_global *g = t->global;
    mf_tensor_destroy(t->grad);
    t->grad = NULL;
    if (!grad) return g->local ? mf_tensor_set_grad(g->local, NULL) : MF_OK;
    if (!grad->global || !mf_placement_equal(grad->global->placement, g->placement))
        MF_FAIL(MF_ERR_ARG, "mf_tensor_set_grad: the gradient of a global tensor must be global on its placement");
    mf_nd_sbp dual = mfi_nd_sbp_dual(&g->sbp);
    bool own = mfi_nd_sbp_equal(&grad->global->sbp, &g->sbp);
    if (!own && !mfi_nd_sbp_equal(&grad->global->sbp, &dual)) {
        char a[96], b[96];
        MF_FAIL(MF_ERR_ARG, "mf_tensor_set_grad: gradient SBP %s fits neither the tensor's %s nor its dual",
                mf_nd_sbp_str(&grad->global->sbp, a, sizeof a), mf_nd_sbp_str(&g->sbp, b, sizeof b));
    }
    if (!g->local) return MF_OK;
    MF_TRY(mf_tensor_set_grad(g->local, grad->global->local));
    return mfi_global_set_grad_synced(t, own);
}

mf_status mfi_global_backward(mf_tensor *out, mf_tensor *grad, bool retain, bool sync)
{
    mfi_global *g = out->global;
    mf_nd_sbp dual = mfi_nd_sbp_dual(&g->sbp);
    mf_tensor *seed = NULL;
    if (grad) {
        if (!grad->global || !mf_placement_equal(grad->global->placement, g->placement))
            MF_FAIL(MF_ERR_ARG, "mf_backward: the gradient of a global tensor must be global on its placement");
        mf_tensor *b = mfi_redistribute(grad, g->placement, &dual);
        if (!b) return mf_last_status();
        seed = b->global->local ? mf_tensor_retain(b->global->local) : NULL;
        mf_tensor_destroy(b);
    }
    if (!g->local) {
        mf_tensor_destroy(seed);
        return MF_OK;    /* outside the placement: nothing recorded here */
    }
    if (!seed) {
        if (mf_tensor_numel(out) != 1) {
            char x[128];
            MF_FAIL(MF_ERR_SHAPE, "mf_backward: output of shape %s is not a scalar; pass its gradient to "
                    "mf_backward_ex", mf_tensor_shape_str(out, x, sizeof x));
        }
        /* d out / d out = 1 laid out as dual(sbp): on B dimensions (dual P)
         * only coordinate 0 holds it */
        bool first = true;
        for (int d = 0; d < g->sbp.ndim; d++)
            if (g->sbp.d[d].kind == MF_SBP_B && g->placement->coord[d] != 0) first = false;
        seed = first ? mf_ones(out->dtype, g->local->ndim, g->local->shape)
                     : mf_zeros(out->dtype, g->local->ndim, g->local->shape);
        if (!seed) return mf_last_status();
    }
    mf_status st = mfi_backward(g->local, seed, retain, sync);
    mf_tensor_destroy(seed);
    return st;
}

mf_tensor *mfi_global_detach(mf_tensor *t)
{
    mfi_global *g = t->global;
    mf_tensor *l = g->local ? mfi_tensor_alias(g->local) : NULL;
    if (g->local && !l) return NULL;
    mfi_meta gm;
    mfi_meta_of(t, &gm);
    return mfi_global_wrap(l, g->placement, &g->sbp, &gm, false);
}

mf_status mfi_global_set_requires_grad(mf_tensor *t, bool on)
{
    return t->global->local ? mf_tensor_set_requires_grad(t->global->local, on) : MF_OK;
}

bool mfi_global_is_leaf(const mf_tensor *t)
{
    return !t->global->local || t->global->local->grad_fn == NULL;
}

mf_tensor *mfi_local_piece(const mf_tensor *t) { return mfi_local(t); }

mf_status mf_global_piece_range(const mf_placement *p, const char *sbp, int ndim, const int64_t *gshape,
                                int64_t *start, int64_t *count)
{
    const char *fn = "mf_global_piece_range";
    mf_nd_sbp s;
    mfi_meta gm;
    MF_TRY(shape_meta(fn, MF_F32, ndim, gshape, &gm));
    MF_TRY(mfi_nd_sbp_from(fn, sbp, p, ndim, &s));
    mfi_box b;
    memset(&b, 0, sizeof b);
    if (p->index >= 0) mfi_region(&gm, &s, p, p->coord, &b);
    memcpy(start, b.start, (size_t)ndim * sizeof *start);
    memcpy(count, b.count, (size_t)ndim * sizeof *count);
    return MF_OK;
}

mf_tensor *mf_global_from_piece(mf_tensor *piece, int ndim, const int64_t *gshape, const mf_placement *p,
                                const char *sbp)
{
    const char *fn = "mf_global_from_piece";
    mf_nd_sbp s;
    mfi_meta gm;
    if (!p) {
        mfi_error(MF_ERR_ARG, "%s: placement is NULL", fn);
        return NULL;
    }
    if (p->index >= 0 && mfi_check_input(fn, "piece", piece) != MF_OK) return NULL;
    if (piece && piece->global) {
        mfi_error(MF_ERR_ARG, "%s: the piece is already global", fn);
        return NULL;
    }
    if (shape_meta(fn, piece ? piece->dtype : MF_F32, ndim, gshape, &gm) != MF_OK) return NULL;
    if (mfi_nd_sbp_from(fn, sbp, p, ndim, &s) != MF_OK) return NULL;
    if (p->index < 0) return mfi_global_wrap(NULL, p, &s, &gm, false);
    mfi_box b;
    mfi_region(&gm, &s, p, p->coord, &b);
    bool ok = piece->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = piece->shape[i] == b.count[i];
    if (!ok) {
        char a[128], w[128], c[128];
        mfi_error(MF_ERR_SHAPE, "%s: rank %d's piece is %s but %s of %s gives it %s", fn,
                  mfi_comm_rank_in(mfi_comm_world()), mf_tensor_shape_str(piece, a, sizeof a), sbp,
                  mfi_shape_str(ndim, gshape, w, sizeof w), mfi_shape_str(ndim, b.count, c, sizeof c));
        return NULL;
    }
    return mfi_global_wrap(mf_tensor_retain(piece), p, &s, &gm, false);
}
