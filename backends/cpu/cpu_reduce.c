/*
 * backends/cpu/cpu_reduce.c - sum/max/sum-of-squares over axes, argmax,
 * softmax and log-softmax, and the loss kernels on [N, C] rows.
 *
 * Reductions accumulate in double (a contiguous run in eight partial
 * sums). Outputs are split across threads; when there are fewer outputs
 * than threads (a sum over everything), each output's range is split
 * instead and the partial results are combined in thread order, so a
 * fixed thread count gives fixed bits.
 */
#include <math.h>
#include <stdlib.h>
#include "backends/cpu/cpu_iter.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/plan.h"

/* The input offset of output o, and of reduced row r (all reduced dims
 * but the innermost). */
#define kept_offset(p, o) mfi_offset_of((o), (p)->nk, (p)->kshape, (p)->kstride)
#define red_row_offset(p, r) mfi_offset_of((r), (p)->nr - 1, (p)->rshape, (p)->rstride)

/* The sum of a contiguous run: eight partial sums (element i into sum
 * i mod 8), added pairwise at the end. One chain of dependent additions
 * would wait on each one; eight keep the adder busy. The order depends
 * on the run alone, so the bits do not depend on the threads or ranks. */
#define RED_RUN_FN(NAME, T)                                                          \
    static double NAME##_run(const T *a, int64_t n)                                  \
    {                                                                                \
        double t[8] = {0};                                                           \
        int64_t i = 0;                                                               \
        for (; i + 8 <= n; i += 8)                                                   \
            for (int k = 0; k < 8; k++) t[k] += (double)a[i + k];                    \
        for (int k = 0; i < n; i++, k++) t[k] += (double)a[i];                       \
        return ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));    \
    }

/* Reduces reduced-rows [lo, hi) starting at base. */
#define RED_RANGE_FN(NAME, T)                                                        \
    RED_RUN_FN(NAME, T)                                                              \
    static double NAME(mfi_redop op, const mfi_red_plan *p, const T *base, int64_t lo, int64_t hi) \
    {                                                                                \
        double acc = op == MFI_RED_MAX ? -INFINITY : 0.0;                            \
        const int64_t s = p->rstride[p->nr - 1], n = p->rinner;                      \
        for (int64_t r = lo; r < hi; r++) {                                          \
            const T *a = base + red_row_offset(p, r);                                \
            if (op == MFI_RED_SUM) {                                                 \
                double t = 0;                                                        \
                if (s == 1) t = NAME##_run(a, n);                                    \
                else for (int64_t i = 0; i < n; i++) t += (double)a[i * s];          \
                acc += t;                                                            \
            } else if (op == MFI_RED_SUMSQ) {                                        \
                double t = 0;                                                        \
                for (int64_t i = 0; i < n; i++) { double v = (double)a[i * s]; t += v * v; } \
                acc += t;                                                            \
            } else {                                                                 \
                for (int64_t i = 0; i < n; i++) {                                    \
                    double v = (double)a[i * s];                                     \
                    if (v > acc || v != v) acc = v;                                  \
                    if (acc != acc) break;                                           \
                }                                                                    \
            }                                                                        \
        }                                                                            \
        return acc;                                                                  \
    }

static double combine(mfi_redop op, double a, double b)
{
    if (op != MFI_RED_MAX) return a + b;
    return (b > a || b != b) ? b : a;
}

/* Every reduced dim lies outside one contiguous kept block (the bias
 * gradient: sum over the batch of [N, C]): add whole rows, vectorised,
 * each thread over its own columns. */
static bool rows_case(const mfi_red_plan *p)
{
    if (p->nk != 1 || p->kstride[0] != 1) return false;
    for (int d = 0; d < p->nr; d++)
        if (p->rshape[d] > 1 && p->rstride[d] < p->kshape[0]) return false;
    return true;
}

#define flat_offset(p, q) mfi_offset_of((q), (p)->nr, (p)->rshape, (p)->rstride)

enum { ROWS_BLOCK = 2048 };   /* columns summed at once: 16 KiB of double sums */
#define ROWS_FN(NAME, T)                                                             \
    static void NAME(mfi_redop op, const mfi_red_plan *p, T *out, const T *in)           \
    {                                                                                \
        const int64_t cols = p->kshape[0];                                           \
        _Pragma("omp parallel if (cpu_par(p->nout * p->nred))")                      \
        {                                                                            \
            int64_t lo, hi;                                                          \
            cpu_share((cols + 7) / 8, &lo, &hi);                                     \
            lo *= 8;                                                                 \
            hi = hi * 8 < cols ? hi * 8 : cols;                                      \
            double acc[ROWS_BLOCK];                                                  \
            for (int64_t c0 = lo; c0 < hi; c0 += ROWS_BLOCK) {                       \
                int64_t w = hi - c0 < ROWS_BLOCK ? hi - c0 : ROWS_BLOCK;             \
                for (int64_t j = 0; j < w; j++) acc[j] = op == MFI_RED_MAX ? -INFINITY : 0.0; \
                for (int64_t q = 0; q < p->nred; q++) {                              \
                    const T *a = in + flat_offset(p, q) + c0;                        \
                    if (op == MFI_RED_SUM)                                           \
                        for (int64_t j = 0; j < w; j++) acc[j] += (double)a[j];      \
                    else if (op == MFI_RED_SUMSQ)                                    \
                        for (int64_t j = 0; j < w; j++) acc[j] += (double)a[j] * (double)a[j]; \
                    else                                                             \
                        for (int64_t j = 0; j < w; j++)                              \
                            if ((double)a[j] > acc[j] || a[j] != a[j]) acc[j] = (double)a[j]; \
                }                                                                    \
                for (int64_t j = 0; j < w; j++) out[c0 + j] = (T)acc[j];             \
            }                                                                        \
        }                                                                            \
    }

/* A sum whose one kept dim lies inside the reduced rows (a convolution's
 * bias gradient: [N, C, H, W] over N, H and W): row after row, the runs
 * of every kept index in turn, so the input is read in memory order
 * instead of one kept index at a time, a jump of a row between runs.
 * Each output adds its runs' sums in the same order as RANGE does, so
 * the bits are the same, whatever the threads. */
enum { RUNS_MAX = 1024 };   /* kept indices per thread: 8 KiB of double sums */
static bool runs_case(mfi_redop op, const mfi_red_plan *p)
{
    if (op != MFI_RED_SUM || p->nk != 1 || p->nr < 2 || p->rstride[p->nr - 1] != 1 || p->nout > RUNS_MAX ||
        p->kstride[0] < p->rinner)
        return false;
    for (int d = 0; d < p->nr - 1; d++)
        if (p->rshape[d] > 1 && p->rstride[d] < p->kstride[0] * p->kshape[0]) return false;
    return true;
}

#define RUNS_FN(NAME, RUN, T)                                                        \
    static void NAME(const mfi_red_plan *p, T *out, const T *in)                     \
    {                                                                                \
        _Pragma("omp parallel if (cpu_par(p->nout * p->nred))")                      \
        {                                                                            \
            int64_t lo, hi;                                                          \
            cpu_share(p->nout, &lo, &hi);                                            \
            double acc[RUNS_MAX];                                                    \
            for (int64_t o = lo; o < hi; o++) acc[o - lo] = 0.0;                     \
            for (int64_t r = 0; r < p->rrows; r++) {                                 \
                const T *row = in + red_row_offset(p, r);                            \
                for (int64_t o = lo; o < hi; o++) acc[o - lo] += RUN(row + o * p->kstride[0], p->rinner); \
            }                                                                        \
            for (int64_t o = lo; o < hi; o++) out[o] = (T)acc[o - lo];               \
        }                                                                            \
    }

#define REDUCE_FN(NAME, RANGE, T)                                                    \
    static void NAME(mfi_redop op, const mfi_red_plan *p, T *out, const T *in)           \
    {                                                                                \
        int64_t work = p->nout * p->nred;                                            \
        int nt = omp_get_max_threads();                                              \
        if (p->nout >= nt || !cpu_par(work)) {                                       \
            _Pragma("omp parallel for if (cpu_par(work)) schedule(static)")          \
            for (int64_t o = 0; o < p->nout; o++)                                    \
                out[o] = (T)RANGE(op, p, in + kept_offset(p, o), 0, p->rrows);       \
            return;                                                                  \
        }                                                                            \
        double part[256];                                                            \
        for (int64_t o = 0; o < p->nout; o++) {                                      \
            const T *base = in + kept_offset(p, o);                                  \
            int used = 0;                                                            \
            _Pragma("omp parallel")                                                  \
            {                                                                        \
                int64_t lo, hi;                                                      \
                cpu_share(p->rrows, &lo, &hi);                                       \
                int t = omp_get_thread_num();                                        \
                if (t < 256) part[t] = RANGE(op, p, base, lo, hi);                   \
                _Pragma("omp single") used = omp_get_num_threads();                  \
            }                                                                        \
            double acc = part[0];                                                    \
            for (int t = 1; t < used && t < 256; t++) acc = combine(op, acc, part[t]); \
            out[o] = (T)acc;                                                         \
        }                                                                            \
    }

#ifndef _OPENMP
static int omp_get_num_threads(void) { return 1; }
static int omp_get_max_threads(void) { return 1; }
static int omp_get_thread_num(void) { return 0; }
#endif

RED_RANGE_FN(range_f32, float)
RED_RANGE_FN(range_f64, double)
RED_RANGE_FN(range_i32, int32_t)
RED_RANGE_FN(range_i64, int64_t)
ROWS_FN(rows_f32, float)
ROWS_FN(rows_f64, double)
RUNS_FN(runs_f32, range_f32_run, float)
RUNS_FN(runs_f64, range_f64_run, double)
REDUCE_FN(reduce_f32, range_f32, float)
REDUCE_FN(reduce_f64, range_f64, double)
REDUCE_FN(reduce_i32, range_i32, int32_t)
REDUCE_FN(reduce_i64, range_i64, int64_t)

mf_status mfi_cpu_reduce(mfi_redop op, mfi_cv *out, mfi_cv *in)
{
    if (out->dtype != in->dtype) MF_FAIL(MF_ERR_DTYPE, "reduce: dtypes differ");
    mfi_red_plan p;
    mfi_plan_reduce(&p, out, in);
    if (rows_case(&p) && p.nred > 1 && in->dtype == MF_F32) {
        rows_f32(op, &p, out->data, in->data);
        return MF_OK;
    }
    if (rows_case(&p) && p.nred > 1 && in->dtype == MF_F64) {
        rows_f64(op, &p, out->data, in->data);
        return MF_OK;
    }
    if (runs_case(op, &p) && in->dtype == MF_F32) {
        runs_f32(&p, out->data, in->data);
        return MF_OK;
    }
    if (runs_case(op, &p) && in->dtype == MF_F64) {
        runs_f64(&p, out->data, in->data);
        return MF_OK;
    }
    switch (in->dtype) {
    case MF_F32: reduce_f32(op, &p, out->data, in->data); break;
    case MF_F64: reduce_f64(op, &p, out->data, in->data); break;
    case MF_I32: reduce_i32(op, &p, out->data, in->data); break;
    case MF_I64: reduce_i64(op, &p, out->data, in->data); break;
    default: MF_FAIL(MF_ERR_DTYPE, "reduce: unknown dtype");
    }
    return MF_OK;
}

/* ------------------------------------------------------------------ argmax */
#define ARGMAX_FN(NAME, T)                                                           \
    static void NAME(int64_t *out, const T *in, const mfi_red_plan *p, int64_t len, int64_t s) \
    {                                                                                \
        _Pragma("omp parallel for if (cpu_par(p->nout * len)) schedule(static)")     \
        for (int64_t o = 0; o < p->nout; o++) {                                      \
            const T *a = in + kept_offset(p, o);                                     \
            int64_t best = 0;                                                        \
            for (int64_t k = 1; k < len; k++)                                        \
                if (a[k * s] > a[best * s]) best = k;                                \
            out[o] = best;                                                           \
        }                                                                            \
    }

ARGMAX_FN(argmax_f32, float)
ARGMAX_FN(argmax_f64, double)
ARGMAX_FN(argmax_i32, int32_t)
ARGMAX_FN(argmax_i64, int64_t)

mf_status mfi_cpu_argmax(mfi_cv *out, mfi_cv *in, int axis)
{
    if (out->dtype != MF_I64) MF_FAIL(MF_ERR_DTYPE, "argmax: output must be i64");
    mfi_red_plan p;
    memset(&p, 0, sizeof p);
    int64_t len = in->shape[axis], s = in->stride[axis];
    if (len == 0) MF_FAIL(MF_ERR_SHAPE, "argmax: the axis is empty");
    /* the kept dims: every dim except axis */
    p.nout = 1;
    for (int d = 0; d < in->ndim; d++) {
        if (d == axis || in->shape[d] == 1) continue;
        p.kshape[p.nk] = in->shape[d];
        p.kstride[p.nk++] = in->stride[d];
        p.nout *= in->shape[d];
    }
    switch (in->dtype) {
    case MF_F32: argmax_f32(out->data, in->data, &p, len, s); break;
    case MF_F64: argmax_f64(out->data, in->data, &p, len, s); break;
    case MF_I32: argmax_i32(out->data, in->data, &p, len, s); break;
    case MF_I64: argmax_i64(out->data, in->data, &p, len, s); break;
    default: MF_FAIL(MF_ERR_DTYPE, "argmax: unknown dtype");
    }
    return MF_OK;
}

/* ----------------------------------------------------------------- softmax */
#define SOFTMAX_FWD_FN(NAME, T)                                                      \
    static void NAME(bool lg, T *y, const T *x, int64_t outer, int64_t D, int64_t inner) \
    {                                                                                \
        _Pragma("omp parallel for if (cpu_par(outer * D * inner)) schedule(static)") \
        for (int64_t oi = 0; oi < outer * inner; oi++) {                             \
            int64_t o = oi / inner, i = oi % inner;                                  \
            const T *a = x + o * D * inner + i;                                      \
            T *b = y + o * D * inner + i;                                            \
            T mx = -INFINITY;                                                        \
            for (int64_t k = 0; k < D; k++) if (a[k * inner] > mx) mx = a[k * inner]; \
            double sum = 0;                                                          \
            for (int64_t k = 0; k < D; k++) {                                        \
                T e = (T)exp(a[k * inner] - mx);                                     \
                sum += e;                                                            \
                if (!lg) b[k * inner] = e;                                           \
            }                                                                        \
            if (lg) {                                                                \
                T lse = mx + (T)log(sum);                                            \
                for (int64_t k = 0; k < D; k++) b[k * inner] = a[k * inner] - lse;   \
            } else {                                                                 \
                T inv = (T)(1.0 / sum);                                              \
                for (int64_t k = 0; k < D; k++) b[k * inner] *= inv;                 \
            }                                                                        \
        }                                                                            \
    }

#define SOFTMAX_BWD_FN(NAME, T)                                                      \
    static void NAME(bool lg, T *gx, const T *gy, const T *y, int64_t outer, int64_t D, \
                     int64_t inner)                                                  \
    {                                                                                \
        _Pragma("omp parallel for if (cpu_par(outer * D * inner)) schedule(static)") \
        for (int64_t oi = 0; oi < outer * inner; oi++) {                             \
            int64_t o = oi / inner, i = oi % inner, base = o * D * inner + i;        \
            double dot = 0;                                                          \
            for (int64_t k = 0; k < D; k++)                                          \
                dot += lg ? (double)gy[base + k * inner]                             \
                          : (double)gy[base + k * inner] * y[base + k * inner];      \
            for (int64_t k = 0; k < D; k++) {                                        \
                int64_t j = base + k * inner;                                        \
                gx[j] = lg ? gy[j] - (T)exp(y[j]) * (T)dot : y[j] * (gy[j] - (T)dot); \
            }                                                                        \
        }                                                                            \
    }

SOFTMAX_FWD_FN(softmax_fwd_f32, float)
SOFTMAX_FWD_FN(softmax_fwd_f64, double)
SOFTMAX_BWD_FN(softmax_bwd_f32, float)
SOFTMAX_BWD_FN(softmax_bwd_f64, double)

mf_status mfi_cpu_softmax_fwd(bool log, mfi_cv *out, mfi_cv *x, int axis)
{
    int64_t outer, D, inner;
    mfi_split_axis(x, axis, &outer, &D, &inner);
    if (x->dtype == MF_F32) softmax_fwd_f32(log, out->data, x->data, outer, D, inner);
    else if (x->dtype == MF_F64) softmax_fwd_f64(log, out->data, x->data, outer, D, inner);
    else MF_FAIL(MF_ERR_DTYPE, "softmax: not a float dtype");
    return MF_OK;
}

mf_status mfi_cpu_softmax_bwd(bool log, mfi_cv *gx, mfi_cv *gy, mfi_cv *y, int axis)
{
    int64_t outer, D, inner;
    mfi_split_axis(y, axis, &outer, &D, &inner);
    if (y->dtype == MF_F32) softmax_bwd_f32(log, gx->data, gy->data, y->data, outer, D, inner);
    else if (y->dtype == MF_F64) softmax_bwd_f64(log, gx->data, gy->data, y->data, outer, D, inner);
    else MF_FAIL(MF_ERR_DTYPE, "softmax backward: not a float dtype");
    return MF_OK;
}

/* ------------------------------------------------------------------ losses */
static mf_status load_targets(mfi_cv *target, int64_t n, int64_t classes, int64_t *t)
{
    for (int64_t i = 0; i < n; i++) {
        int64_t v = target->dtype == MF_I64 ? ((const int64_t *)target->data)[i * target->stride[0]]
                                            : ((const int32_t *)target->data)[i * target->stride[0]];
        if (v < 0 || v >= classes)
            MF_FAIL(MF_ERR_ARG, "target %lld of sample %lld is out of range for %lld classes", (long long)v,
                    (long long)i, (long long)classes);
        t[i] = v;
    }
    return MF_OK;
}

#define WITH_TARGETS(target, n, classes, t)                                        \
    int64_t tbuf_[256];                                                            \
    int64_t *t = (n) <= 256 ? tbuf_ : malloc((size_t)(n) * sizeof(int64_t));      \
    if (!t) MF_FAIL(MF_ERR_NOMEM, "loss: out of memory");                          \
    mf_status tst_ = load_targets(target, n, classes, t);                          \
    if (tst_ != MF_OK) {                                                           \
        if (t != tbuf_) free(t);                                                   \
        return tst_;                                                               \
    }

#define FREE_TARGETS(t) if (t != tbuf_) free(t)

mf_status mfi_cpu_nll_fwd(mfi_cv *loss, mfi_cv *logp, mfi_cv *target)
{
    int64_t n = logp->shape[0], c = logp->shape[1];
    WITH_TARGETS(target, n, c, t);
    for (int64_t i = 0; i < n; i++) {
        if (logp->dtype == MF_F32) ((float *)loss->data)[i] = -((const float *)logp->data)[i * c + t[i]];
        else ((double *)loss->data)[i] = -((const double *)logp->data)[i * c + t[i]];
    }
    FREE_TARGETS(t);
    return MF_OK;
}

#define GLOSS(T, gloss, i) ((const T *)(gloss)->data)[(i) * (gloss)->stride[0]]

mf_status mfi_cpu_nll_bwd(mfi_cv *gx, mfi_cv *gloss, mfi_cv *target)
{
    int64_t n = gx->shape[0], c = gx->shape[1];
    WITH_TARGETS(target, n, c, t);
    memset(gx->data, 0, (size_t)(n * c) * (gx->dtype == MF_F32 ? 4 : 8));
    for (int64_t i = 0; i < n; i++) {
        if (gx->dtype == MF_F32) ((float *)gx->data)[i * c + t[i]] = -GLOSS(float, gloss, i);
        else ((double *)gx->data)[i * c + t[i]] = -GLOSS(double, gloss, i);
    }
    FREE_TARGETS(t);
    return MF_OK;
}

#define XENT_BWD(T)                                                            \
    do {                                                                       \
        T *g = gx->data;                                                       \
        const T *lp = logp->data;                                              \
        _Pragma("omp parallel for if (cpu_par(n * c)) schedule(static)")       \
        for (int64_t i = 0; i < n; i++) {                                      \
            T s = GLOSS(T, gloss, i);                                          \
            for (int64_t j = 0; j < c; j++) g[i * c + j] = s * (T)exp(lp[i * c + j]); \
            g[i * c + t[i]] -= s;                                              \
        }                                                                      \
    } while (0)

mf_status mfi_cpu_xent_bwd(mfi_cv *gx, mfi_cv *gloss, mfi_cv *logp, mfi_cv *target)
{
    int64_t n = gx->shape[0], c = gx->shape[1];
    WITH_TARGETS(target, n, c, t);
    if (gx->dtype == MF_F32) XENT_BWD(float);
    else XENT_BWD(double);
    FREE_TARGETS(t);
    return MF_OK;
}

/* --------------------------------------------------------------- embedding */
mf_status mfi_cpu_embedding_fwd(mfi_cv *out, mfi_cv *weight, mfi_cv *index)
{
    int64_t v = weight->shape[0], d = weight->shape[1], n = cpu_numel(index);
    size_t es = weight->dtype == MF_F32 ? 4 : 8;
    mfi_view flat = *index;
    flat.ndim = 1;
    flat.shape[0] = n;
    flat.stride[0] = 1;
    WITH_TARGETS(&flat, n, v, t);
    for (int64_t i = 0; i < n; i++)
        memcpy((char *)out->data + (size_t)(i * d) * es, (const char *)weight->data + (size_t)(t[i] * d) * es,
               (size_t)d * es);
    FREE_TARGETS(t);
    return MF_OK;
}

mf_status mfi_cpu_embedding_bwd(mfi_cv *gweight, mfi_cv *gy, mfi_cv *index)
{
    int64_t v = gweight->shape[0], d = gweight->shape[1], n = cpu_numel(index);
    mfi_view flat = *index;
    flat.ndim = 1;
    flat.shape[0] = n;
    flat.stride[0] = 1;
    WITH_TARGETS(&flat, n, v, t);
    for (int64_t i = 0; i < n; i++) {
        if (gweight->dtype == MF_F32) {
            float *g = (float *)gweight->data + t[i] * d;
            const float *s = (const float *)gy->data + i * d;
            for (int64_t j = 0; j < d; j++) g[j] += s[j];
        } else {
            double *g = (double *)gweight->data + t[i] * d;
            const double *s = (const double *)gy->data + i * d;
            for (int64_t j = 0; j < d; j++) g[j] += s[j];
        }
    }
    FREE_TARGETS(t);
    return MF_OK;
}
