/*
 * lib/nn/norm.c - BatchNorm2d and LayerNorm modules (PyTorch defaults:
 * eps 1e-5, momentum 0.1, affine weight 1 and bias 0; BatchNorm keeps
 * running_mean, running_var and num_batches_tracked as buffers).
 */
#include <stdio.h>
#include "lib/nn/nn_internal.h"

typedef struct bn_priv {
    int64_t c;
    double eps, momentum;
} bn_priv;

static mf_tensor *bn_forward(mf_module *m, mf_tensor *x)
{
    const bn_priv *p = m->priv;
    char s[128];
    if (mf_tensor_ndim(x) != 4) {
        mfi_error(MF_ERR_SHAPE, "BatchNorm2d: input %s must be 4-D [N, C, H, W]", mf_tensor_shape_str(x, s, sizeof s));
        return NULL;
    }
    /* a recompute's second run (mfi_recomputing) normalises as the first
     * did but leaves the running statistics as the first run left them */
    bool again = mfi_recomputing();
    mf_tensor *y = mf_batch_norm(x, mf_module_buffer(m, "running_mean"), mf_module_buffer(m, "running_var"),
                                 mf_module_param(m, "weight"), mf_module_param(m, "bias"), m->training,
                                 again ? 0.0 : p->momentum, p->eps);
    if (y && m->training && !again) {
        /* a global counter is B: each rank counts its own copy */
        mf_tensor *nbt = mfi_local_piece(mf_module_buffer(m, "num_batches_tracked"));
        int64_t zero = 0;
        if (nbt) mf_tensor_set(nbt, &zero, mf_tensor_get(nbt, &zero) + 1);
    }
    return y;
}

static mf_status ones_zeros(mf_module *m)
{
    mf_tensor *w = mf_module_param(m, "weight"), *b = mf_module_param(m, "bias");
    if (w) MF_TRY(mf_fill_(w, 1.0));
    if (b) MF_TRY(mf_fill_(b, 0.0));
    return MF_OK;
}

static mf_status bn_reset(mf_module *m, const char *prefix, uint64_t seed)
{
    (void)prefix;
    (void)seed;
    MF_TRY(ones_zeros(m));
    MF_TRY(mf_fill_(mf_module_buffer(m, "running_mean"), 0.0));
    MF_TRY(mf_fill_(mf_module_buffer(m, "running_var"), 1.0));
    return mf_fill_(mf_module_buffer(m, "num_batches_tracked"), 0.0);
}

static void bn_describe(const mf_module *m, char *buf, size_t size)
{
    const bn_priv *p = m->priv;
    snprintf(buf, size, "%lld, eps=%g, momentum=%g", (long long)p->c, p->eps, p->momentum);
}

static const mf_module_ops bn_ops = {"BatchNorm2d", bn_forward, bn_reset, NULL, bn_describe};

/* Registers name -> a new tensor of shape/dtype, then drops our ref. */
static mf_status add_new(mf_module *m, bool param, const char *name, mf_dtype dt, int nd, const int64_t *shape)
{
    mf_tensor *t = mf_zeros(dt, nd, shape);
    if (!t) return mf_last_status();
    mf_status st = param ? mf_module_register_parameter(m, name, t) : mf_module_register_buffer(m, name, t);
    mf_tensor_destroy(t);
    return st;
}

mf_module *mf_batch_norm2d_create(int64_t num_features)
{
    if (num_features < 1) {
        mfi_error(MF_ERR_ARG, "mf_batch_norm2d_create: num_features %lld must be positive", (long long)num_features);
        return NULL;
    }
    mf_module *m = mfi_module_new(&bn_ops, sizeof(bn_priv));
    if (!m) return NULL;
    bn_priv *p = m->priv;
    p->c = num_features;
    p->eps = 1e-5;
    p->momentum = 0.1;
    mf_status st = add_new(m, true, "weight", MF_F32, 1, &num_features);
    if (st == MF_OK) st = add_new(m, true, "bias", MF_F32, 1, &num_features);
    if (st == MF_OK) st = add_new(m, false, "running_mean", MF_F32, 1, &num_features);
    if (st == MF_OK) st = add_new(m, false, "running_var", MF_F32, 1, &num_features);
    if (st == MF_OK) st = add_new(m, false, "num_batches_tracked", MF_I64, 0, NULL);
    if (st == MF_OK) st = bn_reset(m, "", 0);
    if (st != MF_OK) {
        mf_module_destroy(m);
        return NULL;
    }
    return m;
}

/* -------------------------------------------------------------- layer norm */
typedef struct ln_priv {
    int nnorm;
    int64_t shape[MF_MAX_DIMS];
    double eps;
} ln_priv;

static mf_tensor *ln_forward(mf_module *m, mf_tensor *x)
{
    const ln_priv *p = m->priv;
    return mf_layer_norm(x, p->nnorm, mf_module_param(m, "weight"), mf_module_param(m, "bias"), p->eps);
}

static mf_status ln_reset(mf_module *m, const char *prefix, uint64_t seed)
{
    (void)prefix;
    (void)seed;
    return ones_zeros(m);
}

static void ln_describe(const mf_module *m, char *buf, size_t size)
{
    const ln_priv *p = m->priv;
    char s[128];
    snprintf(buf, size, "%s, eps=%g", mfi_shape_str(p->nnorm, p->shape, s, sizeof s), p->eps);
}

static const mf_module_ops ln_ops = {"LayerNorm", ln_forward, ln_reset, NULL, ln_describe};

mf_module *mf_layer_norm_create(int nnorm, const int64_t *normalized_shape)
{
    if (nnorm < 1 || nnorm > MF_MAX_DIMS || !normalized_shape) {
        mfi_error(MF_ERR_ARG, "mf_layer_norm_create: normalized shape needs 1 to %d dims", MF_MAX_DIMS);
        return NULL;
    }
    mf_module *m = mfi_module_new(&ln_ops, sizeof(ln_priv));
    if (!m) return NULL;
    ln_priv *p = m->priv;
    p->nnorm = nnorm;
    memcpy(p->shape, normalized_shape, (size_t)nnorm * sizeof(int64_t));
    p->eps = 1e-5;
    mf_status st = add_new(m, true, "weight", MF_F32, nnorm, normalized_shape);
    if (st == MF_OK) st = add_new(m, true, "bias", MF_F32, nnorm, normalized_shape);
    if (st == MF_OK) st = ones_zeros(m);
    if (st != MF_OK) {
        mf_module_destroy(m);
        return NULL;
    }
    return m;
}
