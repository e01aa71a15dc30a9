/*
 * lib/nn/linear.c - Linear: y = x W^T + b, weight [out, in].
 * Initialisation (PyTorch): kaiming_uniform(a=sqrt(5)) for the weight,
 * which is U(-1/sqrt(in), 1/sqrt(in)), and the same bound for the bias.
 */
#include <math.h>
#include <stdio.h>
#include "lib/nn/nn_internal.h"

typedef struct linear_priv { int64_t in, out; } linear_priv;

static mf_tensor *linear_forward(mf_module *m, mf_tensor *x)
{
    return mf_linear(x, mf_module_param(m, "weight"), mf_module_param(m, "bias"));
}

static mf_status linear_reset(mf_module *m, const char *prefix, uint64_t seed)
{
    const linear_priv *p = m->priv;
    double bound = p->in > 0 ? 1.0 / sqrt((double)p->in) : 0.0;
    MF_TRY(mfi_init_uniform(mf_module_param(m, "weight"), bound, seed, prefix, "weight"));
    mf_tensor *b = mf_module_param(m, "bias");
    return b ? mfi_init_uniform(b, bound, seed, prefix, "bias") : MF_OK;
}

static void linear_describe(const mf_module *m, char *buf, size_t size)
{
    const linear_priv *p = m->priv;
    snprintf(buf, size, "in_features=%lld, out_features=%lld, bias=%s", (long long)p->in, (long long)p->out,
             mf_module_param(m, "bias") ? "true" : "false");
}

static const mf_module_ops linear_ops = {"Linear", linear_forward, linear_reset, NULL, linear_describe};

mf_module *mf_linear_create(int64_t in_features, int64_t out_features, bool bias)
{
    if (in_features < 0 || out_features < 0) {
        mfi_error(MF_ERR_ARG, "mf_linear_create: sizes %lld -> %lld must not be negative", (long long)in_features,
                  (long long)out_features);
        return NULL;
    }
    mf_module *m = mfi_module_new(&linear_ops, sizeof(linear_priv));
    if (!m) return NULL;
    linear_priv *p = m->priv;
    p->in = in_features;
    p->out = out_features;
    mf_tensor *w = mf_empty(MF_F32, MF_DIMS(out_features, in_features));
    mf_tensor *b = bias ? mf_empty(MF_F32, MF_DIMS(out_features)) : NULL;
    mf_status st = w && (!bias || b) ? MF_OK : mf_last_status();
    if (st == MF_OK) st = mf_module_register_parameter(m, "weight", w);
    if (st == MF_OK && b) st = mf_module_register_parameter(m, "bias", b);
    mf_tensor_destroy(w);
    mf_tensor_destroy(b);
    if (st == MF_OK) st = mfi_module_init_fresh(m);
    if (st != MF_OK) {
        mf_module_destroy(m);
        return NULL;
    }
    return m;
}
