/*
 * lib/op.c - applying an op: inference, allocation, forward, recording.
 *
 * Every public op is an mfi_op descriptor (shape rule, forward, backward)
 * and a one-line wrapper that calls mfi_apply. Keeping ops in this one
 * shape is what lets the global-tensor layer add SBP signatures and
 * boxing around the same forward and backward functions.
 */
#include "lib/internal.h"

void mfi_meta_of(const mf_tensor *t, mfi_meta *m)
{
    memset(m, 0, sizeof *m);
    if (!t) {
        m->ndim = -1;
        return;
    }
    m->dtype = t->dtype;
    m->ndim = t->ndim;
    memcpy(m->shape, t->shape, sizeof m->shape);
}

bool mfi_meta_same_shape(const mfi_meta *a, const mfi_meta *b)
{
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

mf_status mfi_check_input(const char *op, const char *what, const mf_tensor *t)
{
    if (t) return MF_OK;
    if (mf_last_status() != MF_OK)
        return mfi_error_context("%s: %s is NULL, after an earlier error", op, what);
    MF_FAIL(MF_ERR_ARG, "%s: %s is NULL", op, what);
}

mf_status mfi_save(mfi_call *c, mf_tensor *t)
{
    if (!c->recording) return MF_OK;
    if (c->n_saved >= MFI_MAX_SAVED) MF_FAIL(MF_ERR_INTERNAL, "%s: too many saved tensors", c->op->name);
    mf_tensor *a = mfi_tensor_alias(t);
    if (!a) return mf_last_status();
    c->saved_version[c->n_saved] = t->storage ? t->storage->version : 0;
    c->saved_rebuild[c->n_saved] = NULL;
    if (mfi_rebuilds(t)) {   /* keep the view, not the bytes */
        c->saved_rebuild[c->n_saved] = t->storage->rebuild;
        mfi_rebuild_retain(t->storage->rebuild);
        a->storage->refcount--;   /* t holds it still: never the last reference */
        a->storage = NULL;
    }
    c->saved[c->n_saved++] = a;
    return MF_OK;
}

mf_tensor *mfi_saved(mfi_call *c, int i)
{
    if (i < 0 || i >= c->n_saved || !c->saved[i]) {
        mfi_error(MF_ERR_STATE, "%s: saved tensor %d is gone (backward already ran; use retain_graph "
                  "to run it twice)", c->op->name, i);
        return NULL;
    }
    mf_tensor *t = c->saved[i];
    if (c->saved_rebuild[i]) {   /* its bytes made again, for this backward */
        mfi_rebuild *r = c->saved_rebuild[i];
        if (r->rebuild(r, t) != MF_OK) return NULL;
        mfi_rebuild_release(r);
        c->saved_rebuild[i] = NULL;
        c->saved_version[i] = t->storage->version;
    }
    if (t->storage && t->storage->version != c->saved_version[i]) {
        mfi_error(MF_ERR_STATE, "%s: a tensor it saved for backward was modified in place since the "
                  "forward pass", c->op->name);
        return NULL;
    }
    return t;
}

void mfi_rebuild_retain(mfi_rebuild *r) { r->refcount++; }

void mfi_rebuild_release(mfi_rebuild *r)
{
    if (r && --r->refcount == 0) r->free(r);
}

void mfi_call_free_saved(mfi_call *c)
{
    for (int i = 0; i < c->n_saved; i++) {
        mf_tensor_destroy(c->saved[i]);
        c->saved[i] = NULL;
        mfi_rebuild_release(c->saved_rebuild[i]);
        c->saved_rebuild[i] = NULL;
    }
    c->n_saved = 0;
}

static mf_tensor *apply_local(const mfi_op *op, int n_in, mf_tensor *const *in, const void *attrs,
                              size_t attrs_size);

mf_tensor *mfi_apply(const mfi_op *op, int n_in, mf_tensor *const *in, const void *attrs,
                     size_t attrs_size)
{
    for (int i = 0; i < n_in; i++)
        if (in[i] && in[i]->global) return mfi_global_apply(op, n_in, in, attrs, attrs_size);
    /* every input on one device; the op's outputs and temporaries go there */
    int dev = -1, first = -1;
    for (int i = 0; i < n_in; i++) {
        if (!in[i] || !in[i]->storage) continue;
        if (dev < 0) {
            dev = (int)in[i]->storage->device;
            first = i;
        } else if ((int)in[i]->storage->device != dev) {
            mfi_error(MF_ERR_ARG, "%s: expected every input on one device, but input %d is on %s and input %d on "
                      "%s (move one with mf_to_device)", op->name, first, mf_device_name((mf_device_type)dev), i,
                      mf_device_name(in[i]->storage->device));
            return NULL;
        }
    }
    int prev_dev = mfi_device_push(dev < 0 ? mfi_current_device() : (mf_device_type)dev);
    mf_tensor *r = apply_local(op, n_in, in, attrs, attrs_size);
    mfi_device_pop(prev_dev);
    return r;
}

static mf_tensor *apply_local(const mfi_op *op, int n_in, mf_tensor *const *in, const void *attrs,
                              size_t attrs_size)
{
    mfi_call c;
    memset(&c, 0, sizeof c);
    c.op = op;
    c.n_in = n_in;
    c.in = (mf_tensor **)in;
    c.attrs = (void *)attrs;
    /* in_meta and needs_grad in one block */
    char *block = malloc((size_t)(n_in > 0 ? n_in : 1) * (sizeof(mfi_meta) + sizeof(bool)));
    if (!block) {
        mfi_error(MF_ERR_NOMEM, "%s: out of memory", op->name);
        return NULL;
    }
    c.in_meta = (mfi_meta *)block;
    c.needs_grad = (bool *)(block + (size_t)n_in * sizeof(mfi_meta));
    bool any_grad = false;
    for (int i = 0; i < n_in; i++) {
        mfi_meta_of(in[i], &c.in_meta[i]);
        c.needs_grad[i] = in[i] && in[i]->requires_grad && mf_dtype_is_float(in[i]->dtype);
        any_grad |= c.needs_grad[i];
    }
    c.recording = any_grad && op->backward && !(op->flags & MFI_OP_NO_GRAD) && mf_grad_enabled();
    if (!c.recording)
        for (int i = 0; i < n_in; i++) c.needs_grad[i] = false;

    mf_tensor *out = NULL;
    mf_status st = MF_OK;
    if (mfi_graph_rec) c.graph_op = mfi_graph_op_begin(op, n_in, in, attrs, attrs_size);
    if (op->infer) MF_TRY_OUT(op->infer(&c, &c.out_meta));
    if (!(op->flags & MFI_OP_OWN_OUTPUT)) {
        out = mfi_tensor_new(c.out_meta.dtype, c.out_meta.ndim, c.out_meta.shape);
        if (!out) MF_TRY_OUT(mf_last_status());
    }
    MF_TRY_OUT(op->forward(&c, &out));
    if (!out) MF_FAIL_OUT(MF_ERR_INTERNAL, "%s: forward produced no output", op->name);
    for (int i = 0; i < n_in; i++)
        if (out == in[i]) {
            /* An op that hands back its input: give the caller a new tensor
             * so that recording never rewires the input's grad_fn. */
            mf_tensor *alias = mfi_tensor_alias(out);
            mf_tensor_destroy(out);
            out = alias;
            if (!out) MF_TRY_OUT(mf_last_status());
            break;
        }
    if (c.graph_op) mfi_graph_op_end(c.graph_op, out, &c);
    if (c.recording) {
        if (!mf_dtype_is_float(out->dtype)) {
            c.recording = false;
        } else {
            MF_TRY_OUT(mfi_node_attach(&c, attrs, attrs_size, out));
            return out;   /* the node owns the block now */
        }
    }
out:
    if (st != MF_OK && c.graph_op) mfi_graph_op_end(c.graph_op, NULL, NULL);
    mfi_call_free_saved(&c);
    free(block);
    if (st != MF_OK) {
        mf_tensor_destroy(out);
        return NULL;
    }
    return out;
}

mf_tensor *mfi_sum_to(mf_tensor *g, const mfi_meta *m)
{
    if (g->ndim == m->ndim && !memcmp(g->shape, m->shape, (size_t)m->ndim * sizeof(int64_t)))
        return mf_tensor_retain(g);
    int axes[MF_MAX_DIMS], na = 0, lead = g->ndim - m->ndim;
    for (int i = 0; i < g->ndim; i++) {
        if (i < lead || (m->shape[i - lead] == 1 && g->shape[i] != 1)) axes[na++] = i;
    }
    mf_tensor *s = na ? mfi_reduce(MFI_RED_SUM, g, na, axes, true) : mf_tensor_retain(g);
    if (!s) return NULL;
    mf_tensor *r = mf_reshape(s, m->ndim, m->shape);
    mf_tensor_destroy(s);
    return r;
}

/* ------------------------------------------------------------ custom ops */
typedef struct custom_attrs {
    const mf_custom_op *op;
    void *user;
} custom_attrs;

static mf_status custom_forward(mfi_call *c, mf_tensor **out)
{
    const custom_attrs *a = c->attrs;
    bool prev = mf_set_grad_enabled(false);
    mf_tensor *y = a->op->forward(c, c->n_in, c->in);
    mf_set_grad_enabled(prev);
    if (!y) return mfi_error_context("custom op '%s' forward", a->op->name ? a->op->name : "?");
    *out = y;
    return MF_OK;
}

static mf_status custom_backward(mfi_call *c, mf_tensor *gy, mf_tensor **gx)
{
    const custom_attrs *a = c->attrs;
    if (!a->op->backward)
        MF_FAIL(MF_ERR_STATE, "custom op '%s' has no backward", a->op->name ? a->op->name : "?");
    mf_status st = a->op->backward(c, gy, gx);
    if (st != MF_OK) return mfi_error_context("custom op '%s' backward", a->op->name ? a->op->name : "?");
    return MF_OK;
}

static const mfi_op custom_op = {
    .name = "mf_custom_apply",
    .flags = MFI_OP_OWN_OUTPUT,
    .forward = custom_forward,
    .backward = custom_backward,
};

mf_tensor *mf_custom_apply(const mf_custom_op *op, int n, mf_tensor *const *in, void *user)
{
    if (!op || !op->forward) {
        mfi_error(MF_ERR_ARG, "mf_custom_apply: op or its forward is NULL");
        return NULL;
    }
    for (int i = 0; i < n; i++)
        if (mfi_check_input(op->name ? op->name : "custom op", "an input", in[i]) != MF_OK) return NULL;
    custom_attrs a = {op, user};
    return mfi_apply(&custom_op, n, in, &a, sizeof a);
}

mf_status mf_custom_save(mf_custom_ctx *ctx, mf_tensor *t) { return mfi_save(ctx, t); }
mf_tensor *mf_custom_saved(mf_custom_ctx *ctx, int i) { return mfi_saved(ctx, i); }
void *mf_custom_user(mf_custom_ctx *ctx) { return ((const custom_attrs *)ctx->attrs)->user; }
bool mf_custom_needs_grad(mf_custom_ctx *ctx, int i) { return i >= 0 && i < ctx->n_in && ctx->needs_grad[i]; }
