/*
 * lib/op/to_device.c - mf_to_device: moving a tensor between devices,
 * differentiably (the gradient moves back).
 */
#include "lib/internal.h"

typedef struct to_attrs {
    mf_device_type dst, src;
} to_attrs;

static mf_status to_forward(mfi_call *c, mf_tensor **out)
{
    const to_attrs *a = c->attrs;
    mf_tensor *x = c->in[0];
    if (mf_tensor_device(x) == a->dst) {
        *out = mf_tensor_retain(x);
        return MF_OK;
    }
    mf_tensor *y = mfi_tensor_new_on(a->dst, x->dtype, x->ndim, x->shape);
    if (!y) return mfi_error_context("mf_to_device(%s)", mf_device_name(a->dst));
    mf_status st = mfi_copy_across(y, x);
    if (st != MF_OK) {
        mf_tensor_destroy(y);
        return mfi_error_context("mf_to_device(%s)", mf_device_name(a->dst));
    }
    *out = y;
    return MF_OK;
}

static mf_status to_backward(mfi_call *c, mf_tensor *gy, mf_tensor **gx)
{
    const to_attrs *a = c->attrs;
    gx[0] = mf_to_device(gy, a->src);
    return gx[0] ? MF_OK : mf_last_status();
}

static const mfi_op to_op = {
    .name = "mf_to_device",
    .flags = MFI_OP_OWN_OUTPUT,
    .forward = to_forward,
    .backward = to_backward,
};

mf_tensor *mf_to_device(mf_tensor *t, mf_device_type d)
{
    if (mfi_check_input("mf_to_device", "the tensor", t) != MF_OK) return NULL;
    if (d != MF_DEV_CPU && d != MF_DEV_CUDA && d != MF_DEV_META) {
        mfi_error(MF_ERR_ARG, "mf_to_device: unknown device type %d", (int)d);
        return NULL;
    }
    if (t->global) {
        mfi_error(MF_ERR_ARG, "mf_to_device: '%s' is a global tensor; its device is its placement's (make it with a "
                  "placement of device type %s)", mf_tensor_name(t), mf_device_name(d));
        return NULL;
    }
    to_attrs a = {d, mf_tensor_device(t)};
    return mfi_apply(&to_op, 1, &t, &a, sizeof a);
}
