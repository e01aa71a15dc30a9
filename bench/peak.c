/*
 * bench/peak.c - the FMA peak probe (bench/peak.h).
 *
 * Each thread keeps 12 accumulators in registers and updates each once
 * per iteration, enough independent chains to cover the FMA latency on
 * two pipes. Functions for wider ISAs are compiled with target
 * attributes and only called where the CPU reports the ISA. AMX has
 * its own probe: tile products, which need the kernel's leave to use
 * the tile registers (Linux's ARCH_REQ_XCOMP_PERM, as oneDNN asks too).
 */
#include <immintrin.h>
#include <string.h>
#ifdef __linux__
#include <sys/syscall.h>
#include <unistd.h>
#endif
#include "bench/peak.h"
#include "mpiflow.h"
#ifdef _OPENMP
#include <omp.h>
#endif

#define CHAINS 12

const char *peak_isa_name(peak_isa isa)
{
    static const char *const names[] = {"avx2-fma", "avx512-fma", "avx512-bf16", "amx-bf16"};
    return (unsigned)isa < PEAK_ISA_COUNT ? names[isa] : "?";
}

/* AMX: the CPU has AMX-BF16 and the kernel lets this process use the
 * tile data (XFEATURE_XTILEDATA, 18) */
static bool amx_permitted(void)
{
#if defined(__linux__) && defined(SYS_arch_prctl)
    if (!__builtin_cpu_supports("amx-tile") || !__builtin_cpu_supports("amx-bf16")) return false;
    return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18) == 0;
#else
    return false;
#endif
}

bool peak_isa_supported(peak_isa isa)
{
    __builtin_cpu_init();
    switch (isa) {
    case PEAK_AVX2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case PEAK_AVX512: return __builtin_cpu_supports("avx512f");
    case PEAK_AVX512_BF16: return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
    case PEAK_AMX_BF16: return amx_permitted();
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

/* tdpbf16ps on full tiles: C (16 x 16 f32) += A (16 x 32 bf16) B (32 x
 * 16 bf16, stored as 16 rows of pairs), 16 * 16 * 32 multiply-adds; six
 * accumulator tiles (0-5) share one A (6) and one B (7) */
struct amx_config {
    unsigned char palette, start_row, reserved[14];
    unsigned short colsb[16];
    unsigned char rows[16];
};

__attribute__((target("amx-tile,amx-bf16"))) static float run_amx(long iters)
{
    struct amx_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = 16;
    }
    _Alignas(64) unsigned short ab[16 * 32];
    _Alignas(64) float c[16 * 16];
    for (int i = 0; i < 16 * 32; i++) ab[i] = 0x3a83;   /* about 1e-3 in bfloat16 */
    _tile_loadconfig(&cfg);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_zero(4);
    _tile_zero(5);
    _tile_loadd(6, ab, 64);
    _tile_loadd(7, ab, 64);
    for (long it = 0; it < iters; it++) {
        _tile_dpbf16ps(0, 6, 7);
        _tile_dpbf16ps(1, 6, 7);
        _tile_dpbf16ps(2, 6, 7);
        _tile_dpbf16ps(3, 6, 7);
        _tile_dpbf16ps(4, 6, 7);
        _tile_dpbf16ps(5, 6, 7);
    }
    float s = 0;
    _tile_stored(0, c, 64);
    s += c[0];
    _tile_stored(5, c, 64);
    s += c[255];
    _tile_release();
    return s;
}

/* multiply-adds per chain per iteration, chains, and how many fewer
 * iterations than the vector loops (a tile product is 512 vector ones) */
static const int lanes[PEAK_ISA_COUNT] = {8, 16, 32, 16 * 16 * 32};
static const int chains[PEAK_ISA_COUNT] = {CHAINS, CHAINS, CHAINS, 6};
static const int fewer[PEAK_ISA_COUNT] = {1, 1, 1, 4};

static volatile float sink;

static void run(peak_isa isa, long iters)
{
    float v = isa == PEAK_AVX2     ? run_avx2(iters)
              : isa == PEAK_AVX512 ? run_avx512(iters)
              : isa == PEAK_AMX_BF16 ? run_amx(iters)
                                   : run_bf16(iters);
    sink = v;
}

double peak_gflops(peak_isa isa, int threads, int repeat)
{
    if (!peak_isa_supported(isa) || threads < 1) return 0.0;
    long iters = 1 << 20;   /* about 50 ms at 200 GFLOP/s per core for avx512 */
    iters /= fewer[isa];
    double flops = 2.0 * (double)iters * chains[isa] * lanes[isa] * threads, best = 0;
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
    /* oneDNN on AMX runs its bfloat16 products as tile products */
    if (bf16 && desc && strstr(desc, "amx") && peak_isa_supported(PEAK_AMX_BF16)) return PEAK_AMX_BF16;
    if (bf16 && wide && peak_isa_supported(PEAK_AVX512_BF16)) return PEAK_AVX512_BF16;
    return wide && peak_isa_supported(PEAK_AVX512) ? PEAK_AVX512 : PEAK_AVX2;
}
