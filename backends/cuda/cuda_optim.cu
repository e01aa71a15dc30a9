/*
 * backends/cuda/cuda_optim.cu - fused optimizer updates on the GPU, one
 * thread per element, with the CPU backend's update rules
 * (backends/cpu/cpu_optim.c, after PyTorch's single-tensor path).
 */
#include <math.h>
#include "backends/cuda/cuda_common.cuh"

template <typename T>
__global__ void k_sgd(int64_t n, T *pv, const T *gv, T *bv, T lr, T wd, T mom, T damp, bool first, bool nesterov)
{
    MFC_FOR(i, n) {
        T g = gv[i] + wd * pv[i];
        if (bv) {
            T b = first ? g : mom * bv[i] + damp * g;
            bv[i] = b;
            g = nesterov ? g + mom * b : b;
        }
        pv[i] -= lr * g;
    }
}

extern "C" mf_status mfc_sgd_step(const mfi_sgd_hp *h, mfi_cv *param, mfi_cv *grad, mfi_cv *buf)
{
    int64_t n = mfc_numel(param);
    if (n == 0) return MF_OK;
    MFC_FLOAT_CASES(param->dtype, "sgd",
                    k_sgd<T><<<mfc_blocks(n), MFC_THREADS, 0, mfc_stream>>>(
                        n, (T *)param->data, (const T *)grad->data, buf ? (T *)buf->data : (T *)NULL, (T)h->lr,
                        (T)h->weight_decay, (T)h->momentum, (T)(1 - h->dampening), h->first, h->nesterov));
    MFC_LAUNCHED("sgd");
    return MF_OK;
}

template <typename T>
__global__ void k_adam(int64_t n, T *pv, const T *gv, T *mv, T *vv, T *xv, T b1, T b2, T eps, T wd, T step,
                       T decay, T bc2s, bool decoupled)
{
    MFC_FOR(i, n) {
        T g = gv[i], p = pv[i];
        if (decoupled) p *= decay;
        else g += wd * p;
        T mi = b1 * mv[i] + ((T)1 - b1) * g;
        T vi = b2 * vv[i] + ((T)1 - b2) * g * g;
        mv[i] = mi;
        vv[i] = vi;
        if (xv) {
            if (vi > xv[i]) xv[i] = vi;
            vi = xv[i];
        }
        pv[i] = p - step * mi / (sqrt(vi) / bc2s + eps);
    }
}

extern "C" mf_status mfc_adam_step(const mfi_adam_hp *h, mfi_cv *param, mfi_cv *grad, mfi_cv *m, mfi_cv *v,
                                   mfi_cv *vmax)
{
    int64_t n = mfc_numel(param);
    if (n == 0) return MF_OK;
    MFC_FLOAT_CASES(param->dtype, "adam",
        const T lr = (T)h->lr, wd = (T)h->weight_decay;
        const T bc1 = (T)(1 - pow(h->beta1, (double)h->step));
        const T bc2s = (T)sqrt(1 - pow(h->beta2, (double)h->step));
        k_adam<T><<<mfc_blocks(n), MFC_THREADS, 0, mfc_stream>>>(
            n, (T *)param->data, (const T *)grad->data, (T *)m->data, (T *)v->data,
            vmax ? (T *)vmax->data : (T *)NULL, (T)h->beta1, (T)h->beta2, (T)h->eps, wd, lr / bc1, (T)1 - lr * wd,
            bc2s, h->decoupled));
    MFC_LAUNCHED("adam");
    return MF_OK;
}

template <typename T>
__global__ void k_rmsprop(int64_t n, T *pv, const T *gv, T *sq, T *bv, T *ga, T a, T eps, T wd, T lr, T mom)
{
    MFC_FOR(i, n) {
        T g = gv[i] + wd * pv[i];
        T s = a * sq[i] + ((T)1 - a) * g * g;
        sq[i] = s;
        T avg;
        if (ga) {
            T gm = a * ga[i] + ((T)1 - a) * g;
            ga[i] = gm;
            avg = sqrt(s - gm * gm) + eps;
        } else {
            avg = sqrt(s) + eps;
        }
        if (bv) {
            T b = mom * bv[i] + g / avg;
            bv[i] = b;
            pv[i] -= lr * b;
        } else {
            pv[i] -= lr * g / avg;
        }
    }
}

extern "C" mf_status mfc_rmsprop_step(const mfi_rmsprop_hp *h, mfi_cv *param, mfi_cv *grad, mfi_cv *square_avg,
                                      mfi_cv *momentum_buf, mfi_cv *grad_avg)
{
    int64_t n = mfc_numel(param);
    if (n == 0) return MF_OK;
    MFC_FLOAT_CASES(param->dtype, "rmsprop",
                    k_rmsprop<T><<<mfc_blocks(n), MFC_THREADS, 0, mfc_stream>>>(
                        n, (T *)param->data, (const T *)grad->data, (T *)square_avg->data,
                        momentum_buf ? (T *)momentum_buf->data : (T *)NULL,
                        grad_avg ? (T *)grad_avg->data : (T *)NULL, (T)h->alpha, (T)h->eps, (T)h->weight_decay,
                        (T)h->lr, (T)h->momentum));
    MFC_LAUNCHED("rmsprop");
    return MF_OK;
}
