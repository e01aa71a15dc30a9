/*
 * lib/global/apply.c - running an op on global tensors: one mechanism
 * for every op (doc/design.md section 4).
 *
 *   1. the op's shape rule on the global shapes gives the global output;
 *   2. for each mesh dimension, the op's signature that moves the fewest
 *      bytes from the inputs' current SBPs is chosen (all-B always fits);
 *   3. the inputs are boxed to it (differentiable);
 *   4. the op runs on the local pieces, with shape-dependent attributes
 *      rewritten for this rank's block; ranks outside the placement skip
 *      it;
 *   5. the local result is wrapped with the output's nd-SBP.
 */
#include <stdio.h>
#include "lib/global/global_internal.h"

#define MAX_SIGS 48

/* MF_LOG_BOXING=1 logs every boxing the planner inserts (debug level). */
static bool trace_boxing(void)
{
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("MF_LOG_BOXING");
        on = e && *e && strcmp(e, "0");
        if (on) mf_log_set_level(MF_LOG_DEBUG);
    }
    return on;
}

/* "op: input 0 f32 [64,784] S(0) on 0-3; input 1 ..." after the error */
static void input_context(const char *op, int n_in, mf_tensor *const *in)
{
    char msg[1024];
    size_t len = (size_t)snprintf(msg, sizeof msg, "%s with", op);
    for (int i = 0; i < n_in && len < sizeof msg; i++) {
        char d[320];
        len += (size_t)snprintf(msg + len, sizeof msg - len, "%s input %d %s", i ? ";" : "", i,
                                mfi_global_desc(in[i], d, sizeof d));
    }
    mfi_error_context("%s", msg);
}

static bool sbp_eq(mf_sbp a, mf_sbp b) { return a.kind == b.kind && (a.kind != MF_SBP_S || a.axis == b.axis); }

/* the inputs' common placement, checked */
static mf_status common_placement(int n_in, mf_tensor *const *in, const mf_placement **out)
{
    const mf_placement *p = NULL;
    for (int i = 0; i < n_in; i++) {
        if (!in[i]) continue;
        if (!in[i]->global)
            MF_FAIL(MF_ERR_ARG, "input %d is a local tensor among global ones; make it global with "
                    "mf_to_global or mf_global_from_full", i);
        const mf_placement *q = in[i]->global->placement;
        MF_TRY(mf_nd_sbp_check(&in[i]->global->sbp, q, in[i]->ndim));
        if (!p) {
            p = q;
            continue;
        }
        if (!mf_placement_equal(p, q)) {
            char a[128], b[128];
            if (p->n != q->n || p->mesh_ndim != q->mesh_ndim)
                MF_FAIL(MF_ERR_ARG, "the inputs' meshes differ ('%s' and '%s'); move them to one placement "
                        "with mf_redistribute", mf_placement_str(p, a, sizeof a), mf_placement_str(q, b, sizeof b));
            MF_FAIL(MF_ERR_ARG, "the inputs are on different placements ('%s' and '%s'); move them to one "
                    "with mf_redistribute", mf_placement_str(p, a, sizeof a), mf_placement_str(q, b, sizeof b));
        }
    }
    *out = p;
    return MF_OK;
}

/* The cheapest signature along mesh dimension d for the inputs' SBPs. */
static const mfi_sig *choose(const mfi_op *op, const mfi_sig *sigs, int n, int n_in, mf_tensor *const *in, int d,
                             int mesh_n)
{
    const mfi_sig *best = NULL;
    double best_cost = 0;
    for (int k = 0; k < n; k++) {
        double cost = 0;
        bool ok = true;
        for (int i = 0; i < n_in && ok; i++) {
            if (!in[i]) continue;
            mf_sbp from = in[i]->global->sbp.d[d], to = sigs[k].in[i];
            if (to.kind == MF_SBP_S && (to.axis >= in[i]->ndim)) ok = false;
            if ((op->flags & MFI_OP_WRITES(i)) && !sbp_eq(from, to)) ok = false;   /* written in place */
            cost += mfi_box_cost(from, to, mesh_n, (double)mf_tensor_nbytes(in[i]));
        }
        if (ok && (!best || cost < best_cost)) {
            best = &sigs[k];
            best_cost = cost;
        }
    }
    return best;
}

mf_tensor *mfi_global_apply(const mfi_op *op, int n_in, mf_tensor *const *in, const void *attrs, size_t attrs_size)
{
    const mf_placement *p = NULL;
    mf_tensor *local[MFI_SIG_MAX_IN] = {NULL}, *out_local = NULL, *result = NULL;
    mfi_sig sigs[MAX_SIGS];
    void *lattrs = NULL;
    mfi_call gc;
    memset(&gc, 0, sizeof gc);
    mfi_meta metas[MFI_SIG_MAX_IN];
    mf_status st = MF_OK;
    if (n_in > MFI_SIG_MAX_IN) MF_FAIL_OUT(MF_ERR_INTERNAL, "%d inputs are more than global ops take", n_in);
    MF_TRY_OUT(common_placement(n_in, in, &p));

    /* 1. global shapes */
    gc.op = op;
    gc.placement = p;
    gc.n_in = n_in;
    gc.in = (mf_tensor **)in;
    gc.attrs = (void *)attrs;
    gc.in_meta = metas;
    bool req = false;
    for (int i = 0; i < n_in; i++) {
        mfi_meta_of(in[i], &metas[i]);
        req |= in[i] && in[i]->requires_grad && mf_dtype_is_float(in[i]->dtype);
    }
    req = req && op->backward && !(op->flags & MFI_OP_NO_GRAD) && mf_grad_enabled();
    if (!op->infer) MF_FAIL_OUT(MF_ERR_INTERNAL, "op has no shape rule for global tensors");
    MF_TRY_OUT(op->infer(&gc, &gc.out_meta));

    /* 2. signatures, per mesh dimension */
    int ns = op->sbp ? op->sbp(&gc, sigs, MAX_SIGS - 1) : 0;
    mf_sbp allb[MFI_SIG_MAX_IN];
    for (int i = 0; i < MFI_SIG_MAX_IN; i++) allb[i] = mfi_B();
    ns = mfi_sig_add(sigs, ns, MAX_SIGS, n_in, allb, mfi_B());
    mf_nd_sbp want[MFI_SIG_MAX_IN], osbp;
    memset(want, 0, sizeof want);
    memset(&osbp, 0, sizeof osbp);
    osbp.ndim = p->mesh_ndim;
    for (int d = 0; d < p->mesh_ndim; d++) {
        const mfi_sig *s = choose(op, sigs, ns, n_in, in, d, p->mesh[d]);
        if (!s)
            MF_FAIL_OUT(MF_ERR_ARG, "no SBP signature fits the inputs on mesh dimension %d (an input the op writes "
                        "in place cannot be boxed)", d);
        for (int i = 0; i < n_in; i++) {
            want[i].ndim = p->mesh_ndim;
            want[i].d[d] = s->in[i];
        }
        osbp.d[d] = s->out;
    }

    /* 3. boxing */
    for (int i = 0; i < n_in; i++) {
        if (!in[i]) continue;
        mfi_global *g = in[i]->global;
        bool same = true;
        for (int d = 0; d < p->mesh_ndim; d++) same &= sbp_eq(g->sbp.d[d], want[i].d[d]);
        if (same) {
            local[i] = g->local ? mf_tensor_retain(g->local) : NULL;
            continue;
        }
        char what[64];
        snprintf(what, sizeof what, "%s input %d", op->name, i);
        mfi_box_context(what, in[i], &g->sbp, &want[i]);
        st = mfi_boxing(g->local, &metas[i], p, &g->sbp, p, &want[i], &local[i]);
        mfi_ledger_context("");
        MF_TRY_OUT(st);
        if (trace_boxing()) {
            char a[96], b[96], sh[128];
            mf_log_at(MF_LOG_DEBUG, "boxing %s input %d %s: %s -> %s", op->name, i,
                      mf_tensor_shape_str(in[i], sh, sizeof sh), mf_nd_sbp_str(&g->sbp, a, sizeof a),
                      mf_nd_sbp_str(&want[i], b, sizeof b));
        }
    }

    /* 4. the local op */
    gc.placement = p;
    gc.in_sbp = want;
    if (p->index >= 0) {
        mfi_box ob;
        mfi_region(&gc.out_meta, &osbp, p, p->coord, &ob);
        if (attrs_size) {
            lattrs = malloc(attrs_size);
            if (!lattrs) MF_FAIL_OUT(MF_ERR_NOMEM, "out of memory");
            memcpy(lattrs, attrs, attrs_size);
            if (op->localize) op->localize(&gc, lattrs, &ob);
        }
        if (mfi_graph_rec) mfi_graph_signature(op, n_in, want, &osbp);
        out_local = mfi_apply(op, n_in, local, lattrs, attrs_size);
        if (!out_local) MF_TRY_OUT(mf_last_status());
        for (int i = 0; i < gc.out_meta.ndim; i++)
            if (out_local->shape[i] != ob.count[i] || out_local->ndim != gc.out_meta.ndim)
                MF_FAIL_OUT(MF_ERR_INTERNAL, "the local result does not match its block");
    }
    result = mfi_global_wrap(out_local, p, &osbp, &gc.out_meta, req);
    out_local = NULL;
out:
    if (st != MF_OK) input_context(op->name, n_in, in);
    for (int i = 0; i < n_in; i++) mf_tensor_destroy(local[i]);
    mf_tensor_destroy(out_local);
    free(lattrs);
    return result;
}
