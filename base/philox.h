/*
 * base/philox.h - the counter-based random numbers of doc/design.md section 5.
 *
 * Philox4x32-10 (Random123). A value is a pure function of
 * (seed, key, index): the 64-bit seed is the Philox key, the counter is
 * (index / 4, key), and the value takes word index % 4. So element i of
 * a tensor is the same whichever rank computes it and in whatever order.
 * Header-only so that every backend can use the same mapping: nvcc
 * compiles these functions for the GPU too (MFI_HD).
 */
#ifndef MPIFLOW_BASE_PHILOX_H
#define MPIFLOW_BASE_PHILOX_H

#include <math.h>
#include <stdint.h>
#include <Random123/philox.h>

#ifdef __CUDACC__
#define MFI_HD __host__ __device__
#else
#define MFI_HD
#endif

static inline MFI_HD void mfi_philox4(uint64_t seed, uint64_t key, uint64_t block, uint32_t out[4])
{
    philox4x32_ctr_t c = {{(uint32_t)block, (uint32_t)(block >> 32), (uint32_t)key, (uint32_t)(key >> 32)}};
    philox4x32_key_t k = {{(uint32_t)seed, (uint32_t)(seed >> 32)}};
    philox4x32_ctr_t r = philox4x32(c, k);
    out[0] = r.v[0];
    out[1] = r.v[1];
    out[2] = r.v[2];
    out[3] = r.v[3];
}

/* 32 random bits for element `index`. */
static inline MFI_HD uint32_t mfi_philox_u32(uint64_t seed, uint64_t key, uint64_t index)
{
    uint32_t w[4];
    mfi_philox4(seed, key, index >> 2, w);
    return w[index & 3];
}

/* [0, 1) with 24 bits, exact in float and double alike. */
static inline MFI_HD double mfi_u01(uint32_t u) { return (double)(u >> 8) * (1.0 / 16777216.0); }

/* Standard normal for element `index` by Box-Muller on the word pair
 * (2*(index%2), 2*(index%2)+1) of block index/2. */
static inline MFI_HD double mfi_philox_normal(uint64_t seed, uint64_t key, uint64_t index)
{
    uint32_t w[4];
    mfi_philox4(seed, key, index >> 1, w);
    int j = (int)(index & 1) * 2;
    double u1 = ((double)(w[j] >> 8) + 1.0) * (1.0 / 16777216.0);   /* (0, 1] */
    double u2 = mfi_u01(w[j + 1]);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif
