/*
 * backends/cpu/cpu_iter.h - walking up to three strided operands of one
 * shape, split across OpenMP threads.
 *
 * Size-1 dims are dropped and adjacent dims that are contiguous in every
 * operand are merged, so that most walks become one long inner loop. The
 * work (rows x inner) is cut into equal flat ranges, one per thread, so a
 * single long row is parallel too.
 */
#ifndef MPIFLOW_CPU_ITER_H
#define MPIFLOW_CPU_ITER_H

#include <stdint.h>
#include <string.h>
#include "backends/backend.h"
#include "base/clones.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* Below this many elements a kernel runs on one thread. */
#define CPU_PAR_MIN 32768

typedef struct cpu_iter {
    int nd, nop;
    int64_t shape[MF_MAX_DIMS];
    int64_t st[3][MF_MAX_DIMS];
    int64_t rows, inner;
} cpu_iter;

static inline void cpu_iter_init(cpu_iter *it, int nop, int ndim, const int64_t *shape,
                                 const int64_t *const *strides)
{
    int nd = 0;
    it->nop = nop;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == 1) continue;
        if (nd > 0) {
            bool merge = true;
            for (int k = 0; k < nop; k++)
                if (it->st[k][nd - 1] != strides[k][d] * shape[d]) merge = false;
            if (merge) {
                it->shape[nd - 1] *= shape[d];
                for (int k = 0; k < nop; k++) it->st[k][nd - 1] = strides[k][d];
                continue;
            }
        }
        it->shape[nd] = shape[d];
        for (int k = 0; k < nop; k++) it->st[k][nd] = strides[k][d];
        nd++;
    }
    if (nd == 0) {
        it->shape[0] = 1;
        for (int k = 0; k < nop; k++) it->st[k][0] = 0;
        nd = 1;
    }
    for (int d = 0; d < ndim; d++)
        if (shape[d] == 0) {    /* empty: no work at all */
            it->shape[0] = 0;
            nd = 1;
            break;
        }
    it->nd = nd;
    it->inner = it->shape[nd - 1];
    it->rows = 1;
    for (int d = 0; d < nd - 1; d++) it->rows *= it->shape[d];
}

/* Element offsets of the start of row r, for each operand. */
static inline void cpu_iter_row(const cpu_iter *it, int64_t r, int64_t *off)
{
    for (int k = 0; k < it->nop; k++) off[k] = 0;
    for (int d = it->nd - 2; d >= 0; d--) {
        int64_t i = r % it->shape[d];
        r /= it->shape[d];
        for (int k = 0; k < it->nop; k++) off[k] += i * it->st[k][d];
    }
}

/* This thread's share [lo, hi) of n items. */
static inline void cpu_share(int64_t n, int64_t *lo, int64_t *hi)
{
#ifdef _OPENMP
    int t = omp_get_thread_num(), nt = omp_get_num_threads();
#else
    int t = 0, nt = 1;
#endif
    int64_t q = n / nt, r = n % nt;
    *lo = t * q + (t < r ? t : r);
    *hi = *lo + q + (t < r ? 1 : 0);
}

static inline int cpu_par(int64_t work)
{
    return work >= CPU_PAR_MIN;
}

/*
 * CPU_ITER_FOR(it, base0, base1, base2, esz0, esz1, esz2, BODY): runs BODY for each
 * chunk of one row, in parallel. Inside BODY: p0..p2 (char *) point at the
 * chunk's first element of each operand, `n` is its length, and s0..s2
 * are the inner strides in elements.
 */
#define CPU_ITER_FOR(it, b0, b1, b2, z0, z1, z2, ...)                                   \
    do {                                                                                 \
        const cpu_iter *it_ = (it);                                                      \
        int64_t total_ = it_->rows * it_->inner;                                         \
        const int64_t s0 = it_->st[0][it_->nd - 1];                                      \
        const int64_t s1 = it_->nop > 1 ? it_->st[1][it_->nd - 1] : 0;                   \
        const int64_t s2 = it_->nop > 2 ? it_->st[2][it_->nd - 1] : 0;                   \
        (void)s1; (void)s2;                                                              \
        _Pragma("omp parallel if (cpu_par(total_))")                                     \
        {                                                                                \
            int64_t lo_, hi_;                                                            \
            cpu_share(total_, &lo_, &hi_);                                               \
            int64_t r_ = it_->inner ? lo_ / it_->inner : 0;                              \
            int64_t i0_ = it_->inner ? lo_ % it_->inner : 0;                             \
            while (lo_ < hi_) {                                                          \
                int64_t off_[3] = {0, 0, 0};                                                       \
                cpu_iter_row(it_, r_, off_);                                             \
                int64_t n = it_->inner - i0_;                                            \
                if (n > hi_ - lo_) n = hi_ - lo_;                                        \
                char *p0 = (char *)(b0) + (off_[0] + i0_ * s0) * (int64_t)(z0);          \
                char *p1 = it_->nop > 1 ? (char *)(b1) + (off_[1] + i0_ * s1) * (int64_t)(z1) : NULL; \
                char *p2 = it_->nop > 2 ? (char *)(b2) + (off_[2] + i0_ * s2) * (int64_t)(z2) : NULL; \
                (void)p1; (void)p2;                                                      \
                __VA_ARGS__;                                                             \
                lo_ += n;                                                                \
                r_++;                                                                    \
                i0_ = 0;                                                                 \
            }                                                                            \
        }                                                                                \
    } while (0)

#endif
