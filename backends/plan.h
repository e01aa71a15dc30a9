/*
 * backends/plan.h - planning that every backend shares (not installed):
 * how a reduction walks its input, and how softmax splits a tensor
 * around its axis. Host code; offset_of runs on a GPU too.
 */
#ifndef MPIFLOW_BACKENDS_PLAN_H
#define MPIFLOW_BACKENDS_PLAN_H

#include <string.h>
#include "backends/backend.h"

#ifndef MFI_HD
#ifdef __CUDACC__
#define MFI_HD __host__ __device__
#else
#define MFI_HD
#endif
#endif

/* A reduction of in to out (out has in's ndim, size 1 on reduced dims):
 * the kept dims in order (the output index runs over them row-major) and
 * the reduced dims, each merged with its neighbour where the strides
 * allow. An empty reduced dim makes nred 0: the outputs get the identity
 * (0, or -inf for max). rinner is the innermost reduced extent and rrows
 * the number of such rows. */
typedef struct mfi_red_plan {
    int nk, nr;
    int64_t kshape[MF_MAX_DIMS], kstride[MF_MAX_DIMS];
    int64_t rshape[MF_MAX_DIMS], rstride[MF_MAX_DIMS];
    int64_t nout, nred, rinner, rrows;
} mfi_red_plan;

/* Kept dims may merge only if no reduced dim sits between them, since
 * the output index runs over kept dims in order. */
static inline bool mfi_kept_gap(mfi_cv *out, mfi_cv *in, int d)
{
    for (int e = d - 1; e >= 0; e--) {
        if (in->shape[e] == 1) continue;
        return out->shape[e] == 1;   /* the previous non-trivial dim was reduced */
    }
    return false;
}

static inline void mfi_plan_reduce(mfi_red_plan *p, mfi_cv *out, mfi_cv *in)
{
    memset(p, 0, sizeof *p);
    p->nout = p->nred = 1;
    for (int d = 0; d < in->ndim; d++) {
        int64_t n = in->shape[d];
        if (n == 1) continue;
        if (out->shape[d] == 1) {
            if (p->nr > 0 && p->rstride[p->nr - 1] == in->stride[d] * n) {
                p->rshape[p->nr - 1] *= n;
                p->rstride[p->nr - 1] = in->stride[d];
            } else {
                p->rshape[p->nr] = n;
                p->rstride[p->nr++] = in->stride[d];
            }
            p->nred *= n;
        } else {
            if (p->nk > 0 && p->kstride[p->nk - 1] == in->stride[d] * n && !mfi_kept_gap(out, in, d)) {
                p->kshape[p->nk - 1] *= n;
                p->kstride[p->nk - 1] = in->stride[d];
            } else {
                p->kshape[p->nk] = n;
                p->kstride[p->nk++] = in->stride[d];
            }
            p->nout *= n;
        }
    }
    if (p->nr == 0) {
        p->rshape[0] = 1;
        p->rstride[0] = 0;
        p->nr = 1;
    }
    p->rinner = p->rshape[p->nr - 1];
    p->rrows = p->rinner ? p->nred / p->rinner : 0;
}

/* Element offset of flat index i over nd dims of (shape, stride). */
static inline MFI_HD int64_t mfi_offset_of(int64_t i, int nd, const int64_t *shape, const int64_t *stride)
{
    int64_t off = 0;
    for (int d = nd - 1; d >= 0; d--) {
        off += (i % shape[d]) * stride[d];
        i /= shape[d];
    }
    return off;
}

/* x as [outer, dim, inner] around axis. */
static inline void mfi_split_axis(mfi_cv *x, int axis, int64_t *outer, int64_t *dim, int64_t *inner)
{
    *outer = *inner = 1;
    for (int d = 0; d < axis; d++) *outer *= x->shape[d];
    *dim = x->shape[axis];
    for (int d = axis + 1; d < x->ndim; d++) *inner *= x->shape[d];
}

#endif
