/*
 * lib/nn/conv2d.c - Conv2d, weight [out, in/groups, kh, kw], bias [out].
 * Initialisation as PyTorch: U(-b, b) with b = 1/sqrt(in/groups*kh*kw)
 * for weight and bias (kaiming_uniform with a = sqrt(5)).
 */
#include <math.h>
#include <stdio.h>
#include "lib/nn/nn_internal.h"

typedef struct conv_priv {
    int64_t in, out;
    int kh, kw;
    mf_conv2d_params p;
} conv_priv;

static mf_tensor *conv_forward(mf_module *m, mf_tensor *x)
{
    const conv_priv *p = m->priv;
    return mf_conv2d(x, mf_module_param(m, "weight"), mf_module_param(m, "bias"), &p->p);
}

static mf_status conv_reset(mf_module *m, const char *prefix, uint64_t seed)
{
    const conv_priv *p = m->priv;
    double fan_in = (double)(p->in / p->p.groups) * p->kh * p->kw;
    double bound = fan_in > 0 ? 1.0 / sqrt(fan_in) : 0.0;
    MF_TRY(mfi_init_uniform(mf_module_param(m, "weight"), bound, seed, prefix, "weight"));
    mf_tensor *b = mf_module_param(m, "bias");
    return b ? mfi_init_uniform(b, bound, seed, prefix, "bias") : MF_OK;
}

static void conv_describe(const mf_module *m, char *buf, size_t size)
{
    const conv_priv *p = m->priv;
    snprintf(buf, size, "%lld, %lld, kernel_size=(%d, %d), stride=(%d, %d), padding=(%d, %d)%s", (long long)p->in,
             (long long)p->out, p->kh, p->kw, p->p.stride[0], p->p.stride[1], p->p.padding[0], p->p.padding[1],
             p->p.groups > 1 ? ", grouped" : "");
}

static const mf_module_ops conv_ops = {"Conv2d", conv_forward, conv_reset, NULL, conv_describe};

mf_module *mf_conv2d_create_ex(int64_t in_ch, int64_t out_ch, int kh, int kw, const mf_conv2d_params *params,
                               bool bias)
{
    mf_conv2d_params p = params ? *params : mf_conv2d_defaults();
    if (in_ch < 1 || out_ch < 1 || kh < 1 || kw < 1 || p.groups < 1 || in_ch % p.groups || out_ch % p.groups) {
        mfi_error(MF_ERR_ARG, "mf_conv2d_create: in=%lld out=%lld kernel=%dx%d groups=%d: sizes must be positive "
                  "and channels divisible by groups", (long long)in_ch, (long long)out_ch, kh, kw, p.groups);
        return NULL;
    }
    mf_module *m = mfi_module_new(&conv_ops, sizeof(conv_priv));
    if (!m) return NULL;
    conv_priv *cp = m->priv;
    cp->in = in_ch;
    cp->out = out_ch;
    cp->kh = kh;
    cp->kw = kw;
    cp->p = p;
    mf_tensor *w = mf_empty(MF_F32, MF_DIMS(out_ch, in_ch / p.groups, kh, kw));
    mf_tensor *b = bias ? mf_empty(MF_F32, MF_DIMS(out_ch)) : NULL;
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

mf_module *mf_conv2d_create(int64_t in_ch, int64_t out_ch, int kernel, int stride, int padding)
{
    mf_conv2d_params p = mf_conv2d_defaults();
    p.stride[0] = p.stride[1] = stride;
    p.padding[0] = p.padding[1] = padding;
    return mf_conv2d_create_ex(in_ch, out_ch, kernel, kernel, &p, true);
}
