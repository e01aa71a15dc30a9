/*
 * lib/recompute.c - activation recompute (doc/gpt.md, "Recompute"):
 * y = fn(inputs) runs with nothing recorded, and one node stands for it
 * in the graph, keeping only the inputs. Its backward runs fn again from
 * them, this time recorded, with the random state and autocast mode of
 * the first run (so dropout draws the same masks), back-propagates the
 * output's gradient through that graph, and hands the inputs' gradients
 * on. fn's parameters get their gradients inside that inner backward,
 * as leaves, so gradient buckets start from there as usual.
 *
 * Works on global tensors: the node sits between the local pieces, as
 * every global op's does, and fn's boxing runs again in backward (as in
 * Megatron-LM's full recompute).
 */
#include "lib/global/global_internal.h"

typedef struct rc_attrs {
    mf_recompute_fn fn;
    void *user;
    mfi_rng_state rng;
    bool bf16;
    mf_tensor *result;                     /* forward only: the local result */
    int global;                            /* the inputs are global */
    const mf_placement *pl[MFI_MAX_SAVED];
    mf_nd_sbp sbp[MFI_MAX_SAVED];
    mfi_meta gm[MFI_MAX_SAVED];
} rc_attrs;

static _Thread_local int again;   /* depth of recompute backwards running fn */

bool mfi_recomputing(void) { return again > 0; }

static mf_status rc_forward(mfi_call *c, mf_tensor **out)
{
    const rc_attrs *a = c->attrs;
    for (int i = 0; i < c->n_in; i++) MF_TRY(mfi_save(c, c->in[i]));
    *out = mf_tensor_retain(a->result);
    return MF_OK;
}

static mf_status rc_backward(mfi_call *c, mf_tensor *gy, mf_tensor **gx)
{
    const rc_attrs *a = c->attrs;
    mf_tensor *leaf[MFI_MAX_SAVED] = {NULL}, *in[MFI_MAX_SAVED] = {NULL}, *y = NULL;
    mf_status st = MF_OK;
    for (int i = 0; i < c->n_in; i++) {
        mf_tensor *s = mfi_saved(c, i);
        leaf[i] = s ? mfi_tensor_alias(s) : NULL;
        if (!leaf[i]) MF_TRY_OUT(mf_last_status());
        if (c->needs_grad[i]) MF_TRY_OUT(mf_tensor_set_requires_grad(leaf[i], true));
        in[i] = a->global ? mfi_global_wrap(mf_tensor_retain(leaf[i]), a->pl[i], &a->sbp[i], &a->gm[i], c->needs_grad[i])
                          : mf_tensor_retain(leaf[i]);
        if (!in[i]) MF_TRY_OUT(mf_last_status());
    }
    mfi_rng_state now = mfi_rng_save();
    mfi_rng_restore(&a->rng);
    int ac = mfi_autocast_push(a->bf16);
    bool prev = mf_set_grad_enabled(true);
    again++;
    y = a->fn(a->user, c->n_in, in);
    again--;
    mf_set_grad_enabled(prev);
    mfi_autocast_pop(ac);
    mfi_rng_restore(&now);
    if (!y) MF_TRY_OUT(mfi_error_context("activation recompute: running the forward again"));
    mf_tensor *yl = y->global ? y->global->local : y;
    if (!yl || !yl->requires_grad)
        MF_FAIL_OUT(MF_ERR_STATE, "activation recompute: the function's output does not depend on anything that "
                    "requires grad");
    MF_TRY_OUT(mfi_backward(yl, gy, false, true));
    for (int i = 0; i < c->n_in; i++)
        if (c->needs_grad[i])
            gx[i] = leaf[i]->grad ? mf_tensor_retain(leaf[i]->grad) : mf_zeros_like(leaf[i]);
out:
    for (int i = 0; i < c->n_in; i++) {
        mf_tensor_destroy(leaf[i]);
        mf_tensor_destroy(in[i]);
    }
    mf_tensor_destroy(y);
    return st;
}

static const mfi_op rc_op = {"mf_recompute", MFI_OP_OWN_OUTPUT, NULL, rc_forward, rc_backward, NULL, NULL};

mf_tensor *mf_recompute(mf_recompute_fn fn, void *user, int n, mf_tensor *const *in)
{
    if (!fn || n < 1 || n > MFI_MAX_SAVED) {
        mfi_error(MF_ERR_ARG, "mf_recompute: no function, or %d inputs (1 to %d)", n, MFI_MAX_SAVED);
        return NULL;
    }
    rc_attrs a;
    memset(&a, 0, sizeof a);
    a.fn = fn;
    a.user = user;
    a.global = in[0] && in[0]->global;
    bool req = false;
    for (int i = 0; i < n; i++) {
        if (mfi_check_input("mf_recompute", "an input", in[i]) != MF_OK) return NULL;
        if ((in[i]->global != NULL) != a.global) {
            mfi_error(MF_ERR_ARG, "mf_recompute: the inputs mix local and global tensors");
            return NULL;
        }
        req |= in[i]->requires_grad;
    }
    a.rng = mfi_rng_save();
    a.bf16 = mfi_autocast_bf16(MF_F32);
    mf_no_grad_begin();
    mf_tensor *y = fn(user, n, in);
    mf_no_grad_end();
    if (!y) return NULL;
    if (!req || !mf_grad_enabled()) return y;   /* nothing to differentiate: y as it is */
    if ((y->global != NULL) != a.global) {
        mf_tensor_destroy(y);
        mfi_error(MF_ERR_ARG, "mf_recompute: the function's output is %s but its inputs are %s",
                  y->global ? "global" : "local", a.global ? "global" : "local");
        return NULL;
    }
    if (!a.global) {
        a.result = y;
        mf_tensor *r = mfi_apply(&rc_op, n, in, &a, sizeof a);
        mf_tensor_destroy(y);
        return r;
    }
    mf_tensor *local[MFI_MAX_SAVED];
    bool inside = y->global->local != NULL;
    for (int i = 0; i < n; i++) {
        a.pl[i] = in[i]->global->placement;
        a.sbp[i] = in[i]->global->sbp;
        mfi_meta_of(in[i], &a.gm[i]);
        local[i] = in[i]->global->local;
        inside &= local[i] != NULL;
    }
    mf_tensor *ol = NULL;
    if (inside) {   /* the node between the local pieces */
        a.result = y->global->local;
        ol = mfi_apply(&rc_op, n, local, &a, sizeof a);
        if (!ol) {
            mf_tensor_destroy(y);
            return NULL;
        }
    }
    mfi_meta gm;
    mfi_meta_of(y, &gm);
    mf_tensor *r = mfi_global_wrap(ol, y->global->placement, &y->global->sbp, &gm, true);
    mf_tensor_destroy(y);
    return r;
}
