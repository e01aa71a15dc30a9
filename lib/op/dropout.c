/*
 * lib/op/dropout.c - inverted dropout with a Philox mask.
 *
 * Each call takes the next draw key of its module's scope, and an element
 * picks its value by (sample, place within the sample) when the rows are
 * samples (lib/rng.c): the mask depends on (seed, step, layer, sample),
 * the same on any rank that computes the element and however the batch
 * is cut into micro-batches. The gradient is gy times the mask (0 or
 * 1/(1-p)).
 */
#include <string.h>
#include "lib/internal.h"

typedef struct drop_attrs {
    double p;
    uint64_t key;
    int64_t index0;      /* the value index of the first element */
    mfi_rng_rows rows;   /* which samples the rows are */
} drop_attrs;

/* a piece holds whole rows of consecutive samples (S(0) blocks) */
static int64_t value_index(const drop_attrs *a, const mfi_meta *m, int64_t first)
{
    int64_t numel = 1;   /* of the global tensor */
    for (int d = 0; d < m->ndim; d++) numel *= m->shape[d];
    return mfi_rng_sample_index(&a->rows, numel, first);
}

static mf_status drop_infer(mfi_call *c, mfi_meta *out)
{
    if (!mf_dtype_is_float(c->in_meta[0].dtype)) MF_FAIL(MF_ERR_DTYPE, "mf_dropout: input is not a float tensor");
    *out = c->in_meta[0];
    return MF_OK;
}

static mf_status drop_forward(mfi_call *c, mf_tensor **out)
{
    const drop_attrs *a = c->attrs;
    mf_tensor *x = mfi_contiguous_raw(c->in[0]);
    if (!x) return mf_last_status();
    mf_tensor *mask = mfi_tensor_new(x->dtype, x->ndim, x->shape);
    mf_status st = MF_OK;
    if (!mask) MF_TRY_OUT(mf_last_status());
    mfi_view vo = mfi_view_of(*out), vm = mfi_view_of(mask), vx = mfi_view_of(x);
    MFI_KERNEL(st, MF_PROF_ELEMENTWISE, mfi_backend_of(x), dropout_fwd, &vo, &vm, &vx, a->p, mf_seed(), a->key,
               (uint64_t)a->index0);
    MF_TRY_OUT(st);
    MF_TRY_OUT(mfi_save(c, mask));
out:
    mf_tensor_destroy(x);
    mf_tensor_destroy(mask);
    return st;
}

static mf_status drop_backward(mfi_call *c, mf_tensor *gy, mf_tensor **gx)
{
    mf_tensor *mask = mfi_saved(c, 0);
    if (!mask) return mf_last_status();
    gx[0] = mf_mul(gy, mask);
    return gx[0] ? MF_OK : mf_last_status();
}

/* row blocks only: the mask follows the global element index, which
 * is the local index plus the block's first index for S(0) */
static int drop_sbp(const mfi_call *c, mfi_sig *sigs, int cap)
{
    mf_sbp in = mfi_S(0);
    return c->in_meta[0].ndim ? mfi_sig_add(sigs, 0, cap, 1, &in, mfi_S(0)) : 0;
}

static void drop_localize(const mfi_call *c, void *attrs, const mfi_box *ob)
{
    drop_attrs *a = attrs;
    a->index0 = value_index(a, &c->out_meta, mfi_box_first_index(&c->out_meta, ob));
}

static const mfi_op drop_op = {"mf_dropout", 0, drop_infer, drop_forward, drop_backward, drop_sbp, drop_localize};

mf_tensor *mf_dropout(mf_tensor *x, double p, bool training)
{
    if (mfi_check_input("mf_dropout", "x", x) != MF_OK) return NULL;
    if (!(p >= 0 && p <= 1)) {
        mfi_error(MF_ERR_ARG, "mf_dropout: p=%g is not a probability in [0, 1]", p);
        return NULL;
    }
    if (!training || p == 0) return mf_tensor_retain(x);
    if (p == 1) {
        mf_tensor *z = mf_zeros_like(x);
        mf_tensor *y = z ? mf_mul(x, z) : NULL;   /* keeps the graph: gradient 0 */
        mf_tensor_destroy(z);
        return y;
    }
    drop_attrs a = {p, mfi_rng_next_key(), 0, mfi_rng_get_rows()};
    mfi_meta m = {x->dtype, x->ndim, {0}};   /* a local tensor: all of it (global ones: drop_localize) */
    memcpy(m.shape, x->shape, sizeof m.shape);
    a.index0 = value_index(&a, &m, 0);
    return mfi_apply(&drop_op, 1, &x, &a, sizeof a);
}
