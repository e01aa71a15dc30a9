/*
 * backends/cpu/cpu_math.h - float exp and sums in plain arithmetic that
 * the compiler vectorises, with the same bits in every CPU_CLONES version
 * (doc/cpu.md): libm's expf is a call per element.
 */
#ifndef MPIFLOW_CPU_MATH_H
#define MPIFLOW_CPU_MATH_H

#include <stdint.h>
#include <string.h>

/* e^x: x = n ln2 + r with |r| <= ln2/2, e^r by its Taylor series to r^6,
 * 2^n put in the exponent bits; relative error below 3e-7 over [-87, 88].
 * Below -87 (e^x under 1.7e-38, -inf included) it is 0; above 88 it is
 * e^88; NaN stays NaN. */
static inline float exp_f32(float x)
{
    float xc = x < -87.0f ? -87.0f : x > 88.0f ? 88.0f : x;
    const float big = 12582912.0f;   /* 1.5 * 2^23: adding it rounds to an integer */
    float xn = xc == xc ? xc : 0.0f; /* a NaN stays in r, not in the integer n */
    float n = (xn * 1.44269504088896341f + big) - big;
    float r = xc - n * 0.693145751953125f - n * 1.42860682030941723e-6f;   /* ln2 in two parts */
    float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720))))));
    int32_t bits = ((int32_t)n + 127) * (1 << 23);
    float s;
    memcpy(&s, &bits, 4);
    return x < -87.0f ? 0.0f : p * s;
}

/* x[0] + ... + x[n-1] in 16 partial sums (element i into sum i mod 16),
 * added pairwise at the end: one fixed order whatever the vector width. */
static inline float sum16_f32(const float *x, int64_t n)
{
    float acc[16] = {0};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++) acc[j] += x[i + j];
    for (int j = 0; i < n; i++, j++) acc[j] += x[i];
    for (int w = 8; w > 0; w /= 2)
        for (int j = 0; j < w; j++) acc[j] += acc[j + w];
    return acc[0];
}

/* res = the sum of EXPR over VAR = 0..n-1 in double, in 8 partial sums
 * (term j into sum j mod 8) added pairwise at the end: vectorised, and
 * one fixed order whatever the vector width. */
#define CPU_SUM8(res, n, VAR, EXPR)                                                  \
    do {                                                                             \
        double acc_[8] = {0};                                                        \
        int64_t i0_ = 0;                                                             \
        for (; i0_ + 8 <= (n); i0_ += 8)                                             \
            for (int k_ = 0; k_ < 8; k_++) {                                         \
                int64_t VAR = i0_ + k_;                                              \
                acc_[k_] += (EXPR);                                                  \
            }                                                                        \
        for (int k_ = 0; i0_ + k_ < (n); k_++) {                                     \
            int64_t VAR = i0_ + k_;                                                  \
            acc_[k_] += (EXPR);                                                      \
        }                                                                            \
        (res) = ((acc_[0] + acc_[4]) + (acc_[2] + acc_[6])) + ((acc_[1] + acc_[5]) + (acc_[3] + acc_[7])); \
    } while (0)

#endif
