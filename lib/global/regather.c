/*
 * lib/global/regather.c - parameters gathered for one use and freed
 * right after it (ZeRO-3 as SBP, doc/parallelism.md "Transformers").
 *
 * A parameter that lives split (S(0) over the data-parallel ranks) is
 * boxed to B for each module that uses it; the boxing is differentiable,
 * so its backward reduce-scatters the gradient into the parameter's own
 * split. mfi_gather_transient gives the gathered storage a rebuild (an
 * mfi_rebuild that gathers again): an op that saves a view of it for
 * backward (a Linear its weight) keeps the view without its bytes
 * (lib/op.c), so the gathered copy is freed as soon as the forward drops
 * it, and the backward that needs it gathers it again; the node frees
 * that copy once it has run.
 */
#include "lib/global/global_internal.h"

typedef struct regather {
    mfi_rebuild base;   /* first: the storage holds a pointer to it */
    mf_tensor *param;   /* the split parameter (a reference) */
    mf_nd_sbp to;       /* what it is gathered to */
} regather;

static void regather_free(mfi_rebuild *b)
{
    regather *r = (regather *)b;
    mf_tensor_destroy(r->param);
    free(r);
}

static mf_status regather_fill(mfi_rebuild *b, mf_tensor *bare);

/* marks storage s as w gathered to `to`: rebuilt by gathering again */
static mf_status mark(mfi_storage *s, mf_tensor *w, const mf_nd_sbp *to)
{
    regather *r = malloc(sizeof *r);
    if (!r) MF_FAIL(MF_ERR_NOMEM, "gathering '%s': out of memory", mf_tensor_name(w));
    *r = (regather){{1, regather_fill, regather_free}, mf_tensor_retain(w), *to};
    s->rebuild = &r->base;
    return MF_OK;
}

/* the gathered value, with no graph */
static mf_tensor *gather(mf_tensor *w, const mf_nd_sbp *to)
{
    mf_no_grad_begin();
    mf_tensor *g = mfi_redistribute(w, w->global->placement, to);
    mf_no_grad_end();
    return g;
}

mf_tensor *mfi_gather_transient(mf_tensor *w, const mf_nd_sbp *to)
{
    if (!w || !w->global) {
        mfi_error(MF_ERR_ARG, "mfi_gather_transient: not a global tensor");
        return NULL;
    }
    mf_tensor *g = mfi_redistribute(w, w->global->placement, to);
    if (!g) return NULL;
    mf_tensor *l = g->global->local, *wl = w->global->local;
    /* a fresh storage only: nothing to free when no bytes moved */
    if (!l || !l->storage || (wl && wl->storage == l->storage) || l->storage->rebuild) return g;
    if (mark(l->storage, w, to) != MF_OK) {
        mf_tensor_destroy(g);
        return NULL;
    }
    return g;
}

static mf_status regather_fill(mfi_rebuild *b, mf_tensor *bare)
{
    regather *r = (regather *)b;
    mf_memory_use was = mf_memory_use_begin(MF_MEM_ZERO_GATHER);
    mf_tensor *g = gather(r->param, &r->to);
    mf_memory_use_begin(was);
    if (!g) return mfi_error_context("gathering '%s' again for backward", mf_tensor_name(r->param));
    mf_tensor *l = g->global->local;
    if (!l || !l->storage) {
        mf_tensor_destroy(g);
        MF_FAIL(MF_ERR_INTERNAL, "gathering '%s' again for backward: no local piece", mf_tensor_name(r->param));
    }
    bare->storage = l->storage;
    bare->storage->refcount++;
    mf_tensor_destroy(g);
    return MF_OK;
}

/* ------------------------------------------------------------ prefetch
 * A gather started early (the next module's, while this one computes):
 * a non-blocking allgather of the split pieces along one mesh
 * dimension, run by the progress thread. Finishing it lays the pieces
 * out as the whole parameter and wraps them in an op whose backward is
 * the gather's dual boxing (a reduce-scatter of the gradient). */
struct mfi_prefetch {
    mf_tensor *param;        /* a reference */
    mf_nd_sbp to;
    int dim, axis, n;        /* the mesh dimension gathered, the split axis, its ranks */
    int64_t *counts, *start; /* [n] elements and first index along axis of each rank's piece */
    mf_tensor *shard, *recv; /* this rank's piece (contiguous) and every rank's, back to back */
    mfi_request *req;
};

typedef struct gathered_attrs {
    mf_tensor *full;         /* forward only */
    const mf_placement *p;
    mf_nd_sbp from, to;
    mfi_meta gm;
} gathered_attrs;

static mf_status gathered_forward(mfi_call *c, mf_tensor **out)
{
    *out = mf_tensor_retain(((const gathered_attrs *)c->attrs)->full);
    return MF_OK;
}

static mf_status gathered_backward(mfi_call *c, mf_tensor *gy, mf_tensor **gx)
{
    const gathered_attrs *a = c->attrs;
    mf_nd_sbp dto = mfi_nd_sbp_dual(&a->to), dfrom = mfi_nd_sbp_dual(&a->from);
    return mfi_boxing(gy, &a->gm, a->p, &dto, a->p, &dfrom, &gx[0]);
}

static const mfi_op gathered_op = {"parameter gather", MFI_OP_OWN_OUTPUT, NULL, gathered_forward, gathered_backward,
                                   NULL, NULL};

void mfi_prefetch_free(mfi_prefetch *pf)
{
    if (!pf) return;
    if (pf->req) mfi_wait(pf->req);
    mf_tensor_destroy(pf->param);
    mf_tensor_destroy(pf->shard);
    mf_tensor_destroy(pf->recv);
    free(pf->counts);
    free(pf);
}

mfi_prefetch *mfi_gather_start(mf_tensor *w, const mf_nd_sbp *to)
{
    const mfi_global *g = w && w->global ? w->global : NULL;
    /* host memory (and a simulated world's meta tensors, gathered as the
     * host's would be) */
    bool host = g && g->local && (g->placement->dev == MF_DEV_CPU || g->placement->dev == MF_DEV_META) &&
                mf_tensor_device(g->local) == g->placement->dev;
    if (!host) return NULL;
    const mf_placement *p = g->placement;
    int dim = -1;
    for (int d = 0; d < p->mesh_ndim; d++) {
        bool same = g->sbp.d[d].kind == to->d[d].kind && (to->d[d].kind != MF_SBP_S || g->sbp.d[d].axis == to->d[d].axis);
        if (same) continue;
        if (dim >= 0 || g->sbp.d[d].kind != MF_SBP_S || to->d[d].kind != MF_SBP_B) return NULL;   /* one S -> B only */
        dim = d;
    }
    if (dim < 0 || p->mesh[dim] < 2) return NULL;
    mfi_prefetch *pf = calloc(1, sizeof *pf);
    const int n = p->mesh[dim];
    if (!pf || !(pf->counts = calloc(2 * (size_t)n, sizeof *pf->counts))) {
        free(pf);
        return NULL;
    }
    pf->start = pf->counts + n;
    pf->param = mf_tensor_retain(w);
    pf->to = *to;
    pf->dim = dim;
    pf->axis = g->sbp.d[dim].axis;
    pf->n = n;
    mfi_meta gm;
    mfi_meta_of(w, &gm);
    int coord[MF_MAX_MESH];
    int64_t total = 0;
    for (int q = 0; q < n; q++) {   /* each rank's piece along the gathered dimension */
        mfi_box b;
        memcpy(coord, p->coord, sizeof coord);
        coord[dim] = q;
        mfi_region(&gm, &g->sbp, p, coord, &b);
        pf->counts[q] = mfi_numel(gm.ndim, b.count);
        pf->start[q] = b.start[pf->axis];
        total += pf->counts[q];
    }
    for (int q = n - 1; q >= 0; q--) pf->start[q] -= pf->start[0];
    pf->shard = mfi_contiguous_raw(g->local);
    pf->recv = pf->shard ? mfi_tensor_new(w->dtype, 1, &total) : NULL;
    if (!pf->recv || mfi_iallgather(p->dim_comm[dim], mf_tensor_data(pf->shard), mf_tensor_data(pf->recv), pf->counts,
                                    w->dtype, &pf->req) != MF_OK) {
        pf->req = NULL;
        mfi_prefetch_free(pf);
        return NULL;
    }
    return pf;
}

mf_tensor *mfi_gather_finish(mfi_prefetch *pf, bool transient, double *wait_s, double *coll_s)
{
    double t0 = mf_time(), ts = 0, te = 0;
    mf_status st = mfi_wait_times(pf->req, &ts, &te);
    pf->req = NULL;
    if (wait_s) *wait_s += mf_time() - t0;
    if (coll_s) *coll_s += te - ts;
    mf_tensor *w = pf->param, *full = NULL, *r = NULL;
    const mfi_global *g = w->global;
    mfi_meta gm;
    mfi_meta_of(w, &gm);
    mfi_box ob;
    if (st != MF_OK) goto out;
    mfi_region(&gm, &pf->to, g->placement, g->placement->coord, &ob);
    if (!(full = mfi_tensor_new(w->dtype, gm.ndim, ob.count))) goto out;
    int64_t off = 0;
    for (int q = 0; q < pf->n && st == MF_OK; q++) {   /* piece q into its rows along the axis */
        int64_t shape[MF_MAX_DIMS], str[MF_MAX_DIMS];
        memcpy(shape, ob.count, sizeof shape);
        shape[pf->axis] = ob.count[pf->axis] ? pf->counts[q] / (mfi_numel(gm.ndim, ob.count) / ob.count[pf->axis]) : 0;
        mfi_contig_strides(gm.ndim, shape, str);
        mf_tensor *src = mfi_tensor_view(pf->recv, gm.ndim, shape, str, off);
        mf_tensor *dst = src ? mf_narrow(full, pf->axis, pf->start[q], shape[pf->axis]) : NULL;
        st = dst ? mf_copy_(dst, src) : mf_last_status();
        mf_tensor_destroy(src);
        mf_tensor_destroy(dst);
        off += pf->counts[q];
    }
    if (st != MF_OK) goto out;
    gathered_attrs a = {full, g->placement, g->sbp, pf->to, gm};
    mf_tensor *in = g->local, *ol = mfi_apply(&gathered_op, 1, &in, &a, sizeof a);
    if (!ol) goto out;
    r = mfi_global_wrap(ol, g->placement, &pf->to, &gm, w->requires_grad);
    if (r && transient && ol->storage && !ol->storage->rebuild && mark(ol->storage, w, &pf->to) != MF_OK) {
        mf_tensor_destroy(r);   /* ZeRO-3: freed after use, gathered again */
        r = NULL;
    }
out:
    if (!r && st == MF_OK) st = mf_last_status();
    if (!r) mfi_error_context("gathering '%s' (started early)", mf_tensor_name(w));
    mf_tensor_destroy(full);
    mfi_prefetch_free(pf);
    return r;
}

/* ------------------------------------------------------ deterministic
 * Under deterministic mode's fixed shard sums (lib/pipeline/shards.c) a
 * gathered parameter's gradient must not be reduce-scattered as backward
 * makes it (an order that depends on the rank count): the use's op hands
 * its whole gradient to the sink instead, which sums the shards' in
 * shard order and keeps this rank's rows. */
static mfi_use_sink sink_fn;
static void *sink_ctx;

void mfi_set_use_sink(mfi_use_sink fn, void *ctx)
{
    sink_fn = fn;
    sink_ctx = ctx;
}

bool mfi_use_sink_on(void) { return sink_fn != NULL; }

typedef struct sunk_attrs {
    mf_tensor *full;         /* forward only */
    mf_tensor *param;        /* the split parameter */
    mfi_use_sink fn;
    void *ctx;
    mf_nd_sbp gsbp;          /* the gradient's layout: the dual of the gathered one */
} sunk_attrs;

static mf_status sunk_forward(mfi_call *c, mf_tensor **out)
{
    *out = mf_tensor_retain(((const sunk_attrs *)c->attrs)->full);
    return MF_OK;
}

static mf_status sunk_backward(mfi_call *c, mf_tensor *gy, mf_tensor **gx)
{
    const sunk_attrs *a = c->attrs;
    gx[0] = NULL;
    return a->fn(a->ctx, a->param, gy, &a->gsbp);
}

static const mfi_op sunk_op = {"parameter use (deterministic)", MFI_OP_OWN_OUTPUT, NULL, sunk_forward, sunk_backward,
                               NULL, NULL};

mf_tensor *mfi_use_sunk(mf_tensor *w, mf_tensor *g)
{
    mf_tensor *in = w->global ? w->global->local : NULL, *gl = g && g->global ? g->global->local : NULL;
    if (!sink_fn || !in || !gl) return g;
    sunk_attrs a = {gl, w, sink_fn, sink_ctx, mfi_nd_sbp_dual(&g->global->sbp)};
    mfi_meta gm;
    mfi_meta_of(g, &gm);
    mf_tensor *ol = mfi_apply(&sunk_op, 1, &in, &a, sizeof a);
    mf_tensor *r = ol ? mfi_global_wrap(ol, g->global->placement, &g->global->sbp, &gm, w->requires_grad) : NULL;
    mf_tensor_destroy(g);
    return r;
}
