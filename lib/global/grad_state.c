/*
 * lib/global/grad_state.c - whether a global tensor's gradient already
 * has the tensor's own SBP (doc/design.md section 6).
 *
 * The backward leaves a parameter's gradient laid out as the dual of its
 * SBP (partial sums where the parameter is broadcast); the gradient sync,
 * the pipeline's shard sum, or a user's mf_tensor_set_grad with the own
 * SBP turns it into the parameter's own layout. The global layer records
 * which local pieces hold such a gradient, keyed by the piece, so the
 * core tensor carries no field for it. A new contribution from the
 * backward, a local mf_tensor_set_grad, or freeing the piece drops the
 * record. Deterministic mode also records the sum of squares of a
 * gradient it summed whole before keeping this rank's rows (ZeRO), so
 * that the clipping norm does not depend on how the rows are split.
 */
#include <stdlib.h>
#include "base/ptrmap.h"
#include "lib/global/global_internal.h"

static mfi_ptr_map synced;   /* local piece -> 1 */
static mfi_ptr_map sq_at;    /* local piece -> 1 + its index in sq */
static double *sq;           /* sums of squares, in the order recorded */
static size_t nsq, capsq;

void mfi_global_grad_changed(const mf_tensor *local)
{
    if (sq_at.n && mfi_ptr_map_remove(&sq_at, local) && !sq_at.n) {
        mfi_ptr_map_free(&sq_at);
        free(sq);
        sq = NULL;
        nsq = capsq = 0;
    }
    if (!synced.n) return;
    if (mfi_ptr_map_remove(&synced, local) && !synced.n) mfi_ptr_map_free(&synced);
}

mf_status mfi_global_set_grad_sumsq(const mf_tensor *t, double v)
{
    const mf_tensor *l = t->global ? t->global->local : NULL;
    if (!l) return MF_OK;
    int *slot = mfi_ptr_map_at(&sq_at, l, true);
    if (!slot) return mfi_error_context("gradient of '%s'", mf_tensor_name(t));
    if (!*slot) {
        if (nsq == capsq) {
            size_t cap = capsq ? 2 * capsq : 64;
            double *m = realloc(sq, cap * sizeof *m);
            if (!m) {
                mfi_ptr_map_remove(&sq_at, l);
                MF_FAIL(MF_ERR_NOMEM, "gradient of '%s': out of memory", mf_tensor_name(t));
            }
            sq = m;
            capsq = cap;
        }
        *slot = (int)++nsq;
    }
    sq[*slot - 1] = v;
    return MF_OK;
}

bool mfi_global_grad_sumsq(const mf_tensor *t, double *v)
{
    const mf_tensor *l = t->global ? t->global->local : NULL;
    int *slot = l && sq_at.n ? mfi_ptr_map_at(&sq_at, l, false) : NULL;
    if (slot) *v = sq[*slot - 1];
    return slot != NULL;
}

bool mfi_global_grad_synced(const mf_tensor *t)
{
    const mf_tensor *l = t->global ? t->global->local : NULL;
    return l && synced.n && mfi_ptr_map_at(&synced, l, false) != NULL;
}

mf_status mfi_global_set_grad_synced(const mf_tensor *t, bool on)
{
    const mf_tensor *l = t->global ? t->global->local : NULL;
    if (!l) return MF_OK;
    if (!on) {
        mfi_global_grad_changed(l);
        return MF_OK;
    }
    if (!mfi_ptr_map_at(&synced, l, true)) return mfi_error_context("gradient of '%s'", mf_tensor_name(t));
    return MF_OK;
}
