/*
 * lib/nn/sequential.c - Sequential: children run in the order added.
 */
#include <stdio.h>
#include "lib/nn/nn_internal.h"

static mf_tensor *seq_forward(mf_module *m, mf_tensor *x)
{
    mf_tensor *y = mf_tensor_retain(x);
    for (int i = 0; i < m->nchildren && y; i++) {
        mf_tensor *next = mf_module_forward(m->children[i].m, y);
        if (!next)
            mfi_error_context("Sequential: layer '%s' (%s)", m->children[i].name, mf_module_type(m->children[i].m));
        mf_tensor_destroy(y);
        y = next;
    }
    return y;
}

static const mf_module_ops seq_ops = {"Sequential", seq_forward, NULL, NULL, NULL};

mf_module *mf_sequential_create(void) { return mf_module_create(&seq_ops, NULL); }

mf_status mf_sequential_add(mf_module *seq, const char *name, mf_module *child)
{
    if (!seq || seq->ops != &seq_ops) {
        mf_module_destroy(child);
        MF_FAIL(MF_ERR_ARG, "mf_sequential_add: not a Sequential module");
    }
    char idx[32];
    if (!name) {
        snprintf(idx, sizeof idx, "%d", seq->nchildren);
        name = idx;
    }
    return mf_module_add_child(seq, name, child);
}
