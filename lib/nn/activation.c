/*
 * lib/nn/activation.c - parameter-free modules: ReLU, GELU, Sigmoid,
 * Tanh, Dropout and Flatten.
 */
#include <stdio.h>
#include "lib/nn/nn_internal.h"

typedef struct act_priv { mf_tensor *(*fn)(mf_tensor *); } act_priv;

static mf_tensor *act_forward(mf_module *m, mf_tensor *x)
{
    const act_priv *p = m->priv;
    return p->fn(x);
}

static const mf_module_ops relu_ops = {"ReLU", act_forward, NULL, NULL, NULL};
static const mf_module_ops gelu_ops = {"GELU", act_forward, NULL, NULL, NULL};
static const mf_module_ops sigmoid_ops = {"Sigmoid", act_forward, NULL, NULL, NULL};
static const mf_module_ops tanh_ops = {"Tanh", act_forward, NULL, NULL, NULL};

static mf_module *act_create(const mf_module_ops *ops, mf_tensor *(*fn)(mf_tensor *))
{
    mf_module *m = mfi_module_new(ops, sizeof(act_priv));
    if (m) ((act_priv *)m->priv)->fn = fn;
    return m;
}

mf_module *mf_relu_create(void) { return act_create(&relu_ops, mf_relu); }
mf_module *mf_gelu_create(void) { return act_create(&gelu_ops, mf_gelu); }
mf_module *mf_sigmoid_create(void) { return act_create(&sigmoid_ops, mf_sigmoid); }
mf_module *mf_tanh_create(void) { return act_create(&tanh_ops, mf_tanh); }

/* ---------------------------------------------------------------- dropout */
typedef struct dropout_priv { double p; } dropout_priv;

static mf_tensor *dropout_forward(mf_module *m, mf_tensor *x)
{
    const dropout_priv *p = m->priv;
    return mf_dropout(x, p->p, m->training);
}

static void dropout_describe(const mf_module *m, char *buf, size_t size)
{
    snprintf(buf, size, "p=%g", ((const dropout_priv *)m->priv)->p);
}

static const mf_module_ops dropout_ops = {"Dropout", dropout_forward, NULL, NULL, dropout_describe};

mf_module *mf_dropout_create(double p)
{
    if (!(p >= 0 && p <= 1)) {
        mfi_error(MF_ERR_ARG, "mf_dropout_create: p=%g is not a probability in [0, 1]", p);
        return NULL;
    }
    mf_module *m = mfi_module_new(&dropout_ops, sizeof(dropout_priv));
    if (m) ((dropout_priv *)m->priv)->p = p;
    return m;
}

/* ---------------------------------------------------------------- flatten */
typedef struct flatten_priv { int start, end; } flatten_priv;

static mf_tensor *flatten_forward(mf_module *m, mf_tensor *x)
{
    const flatten_priv *p = m->priv;
    return mf_flatten(x, p->start, p->end);
}

static void flatten_describe(const mf_module *m, char *buf, size_t size)
{
    const flatten_priv *p = m->priv;
    snprintf(buf, size, "start_dim=%d, end_dim=%d", p->start, p->end);
}

static const mf_module_ops flatten_ops = {"Flatten", flatten_forward, NULL, NULL, flatten_describe};

mf_module *mf_flatten_create(int start_dim, int end_dim)
{
    mf_module *m = mfi_module_new(&flatten_ops, sizeof(flatten_priv));
    if (m) {
        ((flatten_priv *)m->priv)->start = start_dim;
        ((flatten_priv *)m->priv)->end = end_dim;
    }
    return m;
}
