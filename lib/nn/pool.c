/*
 * lib/nn/pool.c - MaxPool2d, AvgPool2d and AdaptiveAvgPool2d modules.
 */
#include <stdio.h>
#include "lib/nn/nn_internal.h"

typedef struct pool_priv {
    bool is_max, adaptive;
    mf_pool2d_params p;
    int oh, ow;
} pool_priv;

static mf_tensor *pool_forward(mf_module *m, mf_tensor *x)
{
    const pool_priv *p = m->priv;
    if (p->adaptive) return mf_adaptive_avg_pool2d(x, p->oh, p->ow);
    return p->is_max ? mf_max_pool2d(x, &p->p) : mf_avg_pool2d(x, &p->p);
}

static void pool_describe(const mf_module *m, char *buf, size_t size)
{
    const pool_priv *p = m->priv;
    if (p->adaptive) snprintf(buf, size, "output_size=(%d, %d)", p->oh, p->ow);
    else snprintf(buf, size, "kernel_size=%d, stride=%d, padding=%d", p->p.kernel[0],
                  p->p.stride[0] ? p->p.stride[0] : p->p.kernel[0], p->p.padding[0]);
}

static const mf_module_ops max_ops = {"MaxPool2d", pool_forward, NULL, NULL, pool_describe};
static const mf_module_ops avg_ops = {"AvgPool2d", pool_forward, NULL, NULL, pool_describe};
static const mf_module_ops adaptive_ops = {"AdaptiveAvgPool2d", pool_forward, NULL, NULL, pool_describe};

mf_module *mf_pool2d_create_ex(bool is_max, const mf_pool2d_params *params)
{
    if (!params || params->kernel[0] < 1 || params->kernel[1] < 1) {
        mfi_error(MF_ERR_ARG, "mf_pool2d_create: kernel must be at least 1x1");
        return NULL;
    }
    mf_module *m = mfi_module_new(is_max ? &max_ops : &avg_ops, sizeof(pool_priv));
    if (!m) return NULL;
    pool_priv *p = m->priv;
    p->is_max = is_max;
    p->p = *params;
    return m;
}

mf_module *mf_max_pool2d_create(int kernel, int stride)
{
    mf_pool2d_params p = mf_pool2d_defaults(kernel);
    p.stride[0] = p.stride[1] = stride;
    return mf_pool2d_create_ex(true, &p);
}

mf_module *mf_avg_pool2d_create(int kernel, int stride)
{
    mf_pool2d_params p = mf_pool2d_defaults(kernel);
    p.stride[0] = p.stride[1] = stride;
    return mf_pool2d_create_ex(false, &p);
}

mf_module *mf_adaptive_avg_pool2d_create(int out_h, int out_w)
{
    if (out_h < 1 || out_w < 1) {
        mfi_error(MF_ERR_ARG, "mf_adaptive_avg_pool2d_create: output %dx%d must be at least 1x1", out_h, out_w);
        return NULL;
    }
    mf_module *m = mfi_module_new(&adaptive_ops, sizeof(pool_priv));
    if (!m) return NULL;
    pool_priv *p = m->priv;
    p->adaptive = true;
    p->oh = out_h;
    p->ow = out_w;
    return m;
}
