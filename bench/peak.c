/*
 * bench/peak.c - the FMA peak probe (bench/peak.h).
 *
 * Each thread keeps 12 accumulators in registers and updates each once
 * per iteration, enough independent chains to cover the FMA latency on
 * two pipes. Functions for wider ISAs are compiled with target
 * attributes and only called where the CPU reports the ISA.
 */
#include <immintrin.h>
#include <string.h>
#include "bench/peak.h"
#include "mpiflow.h"
#ifdef _OPENMP
#include <omp.h>
#endif

#define CHAINS 12

const char *peak_isa_name(peak_isa isa)
{
    static const char *const names[] = {"avx2-fma", "avx512-fma", "avx512-bf16"};
    return (unsigned)isa < PEAK_ISA_COUNT ? names[isa] : "?";
}

bool peak_isa_supported(peak_isa isa)
{
    __builtin_cpu_init();
    switch (isa) {
    case PEAK_AVX2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case PEAK_AVX512: return __builtin_cpu_supports("avx512f");
    case PEAK_AVX512_BF16: return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
    default: return false;
    }
}

/* Each returns a value that depends on every chain, so nothing is
 * optimised away; FLOPs per call: iters * CHAINS * lanes * 2. */
__attribute__((target("avx2,fma"))) static float run_avx2(long iters)
{
    __m256 acc[CHAINS], a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-3f);
    for (int i = 0; i < CHAINS; i++) acc[i] = _mm256_set1_ps((float)i);
    for (long it = 0; it < iters; it++)
        for (int i = 0; i < CHAINS; i++) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
    __m256 s = acc[0];
    for (int i = 1; i < CHAINS; i++) s = _mm256_add_ps(s, acc[i]);
    float out[8];
    _mm256_storeu_ps(out, s);
    return out[0];
}

__attribute__((target("avx512f"))) static float run_avx512(long iters)
{
    __m512 acc[CHAINS], a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-3f);
    for (int i = 0; i < CHAINS; i++) acc[i] = _mm512_set1_ps((float)i);
    for (long it = 0; it < iters; it++)
        for (int i = 0; i < CHAINS; i++) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
    __m512 s = acc[0];
    for (int i = 1; i < CHAINS; i++) s = _mm512_add_ps(s, acc[i]);
    return _mm512_reduce_add_ps(s);
}

/* vdpbf16ps: 32 bfloat16 products summed pairwise into 16 f32 lanes */
__attribute__((target("avx512f,avx512bf16"))) static float run_bf16(long iters)
{
    __m512 acc[CHAINS];
    __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(1e-3f));
    __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.5f), _mm512_set1_ps(0.5f));
    for (int i = 0; i < CHAINS; i++) acc[i] = _mm512_set1_ps((float)i);
    for (long it = 0; it < iters; it++)
        for (int i = 0; i < CHAINS; i++) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
    __m512 s = acc[0];
    for (int i = 1; i < CHAINS; i++) s = _mm512_add_ps(s, acc[i]);
    return _mm512_reduce_add_ps(s);
}

static const int lanes[PEAK_ISA_COUNT] = {8, 16, 32};

static volatile float sink;

static void run(peak_isa isa, long iters)
{
    float v = isa == PEAK_AVX2 ? run_avx2(iters) : isa == PEAK_AVX512 ? run_avx512(iters) : run_bf16(iters);
    sink = v;
}

double peak_gflops(peak_isa isa, int threads, int repeat)
{
    if (!peak_isa_supported(isa) || threads < 1) return 0.0;
    long iters = 1 << 20;   /* about 50 ms at 200 GFLOP/s per core for avx512 */
    double flops = 2.0 * (double)iters * CHAINS * lanes[isa] * threads, best = 0;
    for (int r = 0; r <= repeat; r++) {   /* the first try warms the clocks up */
        double t0 = mf_time();
#pragma omp parallel num_threads(threads)
        run(isa, iters);
        double t = mf_time() - t0, g = flops / t / 1e9;
        if (r > 0 && g > best) best = g;
    }
    return best;
}

peak_isa peak_isa_of(const char *desc, bool bf16)
{
    bool wide = desc && (strstr(desc, "avx512") || strstr(desc, "SkylakeX") || strstr(desc, "Cooperlake") ||
                         strstr(desc, "SapphireRapids") || strstr(desc, "Zen4") || strstr(desc, "amx"));
    if (bf16 && wide && peak_isa_supported(PEAK_AVX512_BF16)) return PEAK_AVX512_BF16;
    return wide && peak_isa_supported(PEAK_AVX512) ? PEAK_AVX512 : PEAK_AVX2;
}
