/*
 * backends/cpu/cpu_optim.c - fused optimizer updates, one pass over each
 * parameter, with PyTorch's update rules (torch/optim/{sgd,adam,
 * rmsprop}.py, single-tensor path):
 *
 * SGD:     g += wd*p; buf = first ? g : mom*buf + (1-damp)*g;
 *          g = nesterov ? g + mom*buf : buf; p -= lr*g
 * Adam:    AdamW first p *= 1 - lr*wd (Adam adds wd*p to g instead);
 *          m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2;
 *          p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
 * RMSprop: g += wd*p; sq = a*sq + (1-a)*g^2; (centered: ga = a*ga+(1-a)*g,
 *          avg = sqrt(sq - ga^2) + eps, else sqrt(sq) + eps);
 *          buf = mom*buf + g/avg, p -= lr*buf   (or p -= lr*g/avg)
 */
#include <tgmath.h>
#include "backends/cpu/cpu_iter.h"
#include "backends/cpu/cpu_kernels.h"

/* one contiguous run of the SGD update; the loops without momentum and
 * with it apart, so that each vectorises */
#define SGD_RUN(T)                                                                      \
    CPU_CLONES static void sgd_run_##T(T *restrict pv, const T *restrict gv, T *restrict bv, int64_t n, \
                                       const mfi_sgd_hp *h)                             \
    {                                                                                   \
        const T lr = (T)h->lr, wd = (T)h->weight_decay, mom = (T)h->momentum;           \
        const T damp = (T)(1 - h->dampening);                                           \
        const bool first = h->first, nesterov = h->nesterov;                            \
        if (!bv) {                                                                      \
            for (int64_t i = 0; i < n; i++) pv[i] -= lr * (gv[i] + wd * pv[i]);         \
            return;                                                                     \
        }                                                                               \
        for (int64_t i = 0; i < n; i++) {                                               \
            T g = gv[i] + wd * pv[i];                                                   \
            T b = first ? g : mom * bv[i] + damp * g;                                   \
            bv[i] = b;                                                                  \
            pv[i] -= lr * (nesterov ? g + mom * b : b);                                 \
        }                                                                               \
    }
SGD_RUN(float)
SGD_RUN(double)

/* the runs in chunks, spread over the threads */
#define OPT_CHUNK 16384   /* elements per run, for every optimizer */
#define SGD_LOOP(T)                                                                     \
    do {                                                                                \
        T *pv = param->data, *bv = buf ? (T *)buf->data : NULL;                         \
        const T *gv = grad->data;                                                       \
        int64_t chunks = (n + OPT_CHUNK - 1) / OPT_CHUNK;                               \
        _Pragma("omp parallel for if (cpu_par(n)) schedule(static)")                    \
        for (int64_t c = 0; c < chunks; c++) {                                          \
            int64_t i0 = c * OPT_CHUNK, len = n - i0 < OPT_CHUNK ? n - i0 : OPT_CHUNK;  \
            sgd_run_##T(pv + i0, gv + i0, bv ? bv + i0 : NULL, len, h);                 \
        }                                                                               \
    } while (0)

mf_status mfi_cpu_sgd_step(const mfi_sgd_hp *h, mfi_cv *param, mfi_cv *grad, mfi_cv *buf)
{
    int64_t n = cpu_numel(param);
    if (param->dtype == MF_F32) SGD_LOOP(float);
    else if (param->dtype == MF_F64) SGD_LOOP(double);
    else MF_FAIL(MF_ERR_DTYPE, "sgd: not a float dtype");
    return MF_OK;
}

/* one contiguous run of the Adam update (cs: b1, b2, eps, wd, step,
 * decay, bc2s as T) */
#define ADAM_RUN(T)                                                                     \
    CPU_CLONES static void adam_run_##T(T *restrict pv, T *restrict mv, T *restrict vv, T *restrict xv, \
                                        const T *restrict gv, int64_t n, const T *cs, bool decoupled) \
    {                                                                                   \
        const T b1 = cs[0], b2 = cs[1], eps = cs[2], wd = cs[3], step = cs[4], decay = cs[5], bc2s = cs[6]; \
        for (int64_t i = 0; i < n; i++) {                                               \
            T g = gv[i], p = pv[i];                                                     \
            if (decoupled) p *= decay;                                                  \
            else g += wd * p;                                                           \
            T mi = b1 * mv[i] + ((T)1 - b1) * g;                                        \
            T vi = b2 * vv[i] + ((T)1 - b2) * g * g;                                    \
            mv[i] = mi;                                                                 \
            vv[i] = vi;                                                                 \
            if (xv) {                                                                   \
                T x = vi > xv[i] ? vi : xv[i];                                          \
                xv[i] = x;                                                              \
                vi = x;                                                                 \
            }                                                                           \
            pv[i] = p - step * mi / (sqrt(vi) / bc2s + eps);                            \
        }                                                                               \
    }
ADAM_RUN(float)
ADAM_RUN(double)

#define ADAM_LOOP(T)                                                                    \
    do {                                                                                \
        T *pv = param->data, *mv = m->data, *vv = v->data;                              \
        T *xv = vmax ? (T *)vmax->data : NULL;                                          \
        const T *gv = grad->data;                                                       \
        const T lr = (T)h->lr, bc1 = (T)(1 - pow(h->beta1, (double)h->step));           \
        const T cs[7] = {(T)h->beta1, (T)h->beta2, (T)h->eps, (T)h->weight_decay, lr / bc1, \
                         (T)1 - lr * (T)h->weight_decay, (T)sqrt(1 - pow(h->beta2, (double)h->step))}; \
        int64_t chunks = (n + OPT_CHUNK - 1) / OPT_CHUNK;                               \
        _Pragma("omp parallel for if (cpu_par(n)) schedule(static)")                    \
        for (int64_t c = 0; c < chunks; c++) {                                          \
            int64_t i0 = c * OPT_CHUNK, len = n - i0 < OPT_CHUNK ? n - i0 : OPT_CHUNK;  \
            adam_run_##T(pv + i0, mv + i0, vv + i0, xv ? xv + i0 : NULL, gv + i0, len, cs, h->decoupled); \
        }                                                                               \
    } while (0)

mf_status mfi_cpu_adam_step(const mfi_adam_hp *h, mfi_cv *param, mfi_cv *grad, mfi_cv *m, mfi_cv *v,
                           mfi_cv *vmax)
{
    int64_t n = cpu_numel(param);
    if (param->dtype == MF_F32) ADAM_LOOP(float);
    else if (param->dtype == MF_F64) ADAM_LOOP(double);
    else MF_FAIL(MF_ERR_DTYPE, "adam: not a float dtype");
    return MF_OK;
}

#define RMSPROP_LOOP(T)                                                                 \
    do {                                                                                \
        T *pv = param->data, *sq = square_avg->data;                                    \
        T *bv = momentum_buf ? (T *)momentum_buf->data : NULL;                          \
        T *ga = grad_avg ? (T *)grad_avg->data : NULL;                                  \
        const T *gv = grad->data;                                                       \
        const T a = (T)h->alpha, eps = (T)h->eps, wd = (T)h->weight_decay;              \
        const T lr = (T)h->lr, mom = (T)h->momentum;                                    \
        _Pragma("omp parallel for if (cpu_par(n)) schedule(static)")                    \
        for (int64_t i = 0; i < n; i++) {                                               \
            T g = gv[i] + wd * pv[i];                                                   \
            T s = a * sq[i] + ((T)1 - a) * g * g;                                       \
            sq[i] = s;                                                                  \
            T avg;                                                                      \
            if (ga) {                                                                   \
                T gm = a * ga[i] + ((T)1 - a) * g;                                      \
                ga[i] = gm;                                                             \
                avg = sqrt(s - gm * gm) + eps;                                          \
            } else {                                                                    \
                avg = sqrt(s) + eps;                                                    \
            }                                                                           \
            if (bv) {                                                                   \
                T b = mom * bv[i] + g / avg;                                            \
                bv[i] = b;                                                              \
                pv[i] -= lr * b;                                                        \
            } else {                                                                    \
                pv[i] -= lr * g / avg;                                                  \
            }                                                                           \
        }                                                                               \
    } while (0)

mf_status mfi_cpu_rmsprop_step(const mfi_rmsprop_hp *h, mfi_cv *param, mfi_cv *grad, mfi_cv *square_avg,
                              mfi_cv *momentum_buf, mfi_cv *grad_avg)
{
    int64_t n = cpu_numel(param);
    if (param->dtype == MF_F32) RMSPROP_LOOP(float);
    else if (param->dtype == MF_F64) RMSPROP_LOOP(double);
    else MF_FAIL(MF_ERR_DTYPE, "rmsprop: not a float dtype");
    return MF_OK;
}
