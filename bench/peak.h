/*
 * bench/peak.h - the machine's floating-point peak, measured: a loop of
 * independent fused multiply-adds (or bfloat16 dot products) in
 * registers, which nothing a GEMM does can beat. The benchmarks print
 * their GEMM and convolution rates as a share of it (doc/performance.md).
 */
#ifndef MPIFLOW_BENCH_PEAK_H
#define MPIFLOW_BENCH_PEAK_H

#include <stdbool.h>

typedef enum peak_isa { PEAK_AVX2, PEAK_AVX512, PEAK_AVX512_BF16, PEAK_AMX_BF16, PEAK_ISA_COUNT } peak_isa;

/* "avx2-fma", "avx512-fma", "avx512-bf16", "amx-bf16" */
const char *peak_isa_name(peak_isa isa);
/* Whether this CPU runs the ISA. */
bool peak_isa_supported(peak_isa isa);
/* GFLOP/s of the probe on `threads` threads (OpenMP; each thread its own
 * registers), best of `repeat` tries of about 50 ms; 0 when the CPU does
 * not have the ISA (or, for AMX, the kernel refuses the tiles). bf16
 * counts 2 FLOPs per multiply-add, as f32. */
double peak_gflops(peak_isa isa, int threads, int repeat);
/* The ISA whose peak applies to an engine description: the text of
 * mf_cpu_engine_describe (oneDNN's ISA) or OpenBLAS's core name. */
peak_isa peak_isa_of(const char *desc, bool bf16);

#endif
