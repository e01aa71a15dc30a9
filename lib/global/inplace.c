/*
 * lib/global/inplace.c - the in-place ops (fill, copy, add, scale) on
 * global tensors: they act on the local pieces, after boxing the source
 * to the destination's SBP. Never recorded, like their local versions.
 */
#include "lib/global/global_internal.h"

mf_status mfi_global_inplace(mfi_inplace kind, mf_tensor *a, mf_tensor *b, double v)
{
    static const char *names[] = {"mf_fill_", "mf_copy_", "mf_add_", "mf_scale_", "mf_*_keyed_"};
    const char *fn = names[kind];
    if (kind == MFI_IP_KEYED)
        MF_FAIL(MF_ERR_ARG, "%s: keyed initialisation of a global tensor is not supported; initialise the "
                "full tensor and use mf_global_from_full", fn);
    if (!a->global) MF_FAIL(MF_ERR_ARG, "%s: the destination is local but the source is global", fn);
    mfi_global *g = a->global;
    mf_tensor *src = NULL;
    mf_status st = MF_OK;
    if (b) {
        if (!b->global) MF_FAIL(MF_ERR_ARG, "%s: the destination is global but the source is local", fn);
        if (b->ndim != a->ndim || memcmp(b->shape, a->shape, (size_t)a->ndim * sizeof *a->shape)) {
            char x[128], y[128];
            MF_FAIL(MF_ERR_SHAPE, "%s: global source %s and destination %s differ in shape", fn,
                    mf_tensor_shape_str(b, x, sizeof x), mf_tensor_shape_str(a, y, sizeof y));
        }
        bool prev = mf_set_grad_enabled(false);
        src = mfi_redistribute(b, g->placement, &g->sbp);
        mf_set_grad_enabled(prev);
        if (!src) return mfi_error_context("%s", fn);
    }
    if (g->local) {
        switch (kind) {
        case MFI_IP_FILL: {
            bool zero = false;    /* P: the value lives on coordinate 0 */
            for (int d = 0; d < g->sbp.ndim; d++)
                if (g->sbp.d[d].kind == MF_SBP_P && g->placement->coord[d] != 0) zero = true;
            st = mf_fill_(g->local, zero ? 0.0 : v);
            break;
        }
        case MFI_IP_COPY: st = mf_copy_(g->local, src->global->local); break;
        case MFI_IP_ADD: st = mf_add_(g->local, src->global->local, v); break;
        case MFI_IP_SCALE: st = mf_scale_(g->local, v); break;
        default: st = mfi_error(MF_ERR_INTERNAL, "%s: unknown in-place op", fn);
        }
    }
    mf_tensor_destroy(src);
    return st;
}
