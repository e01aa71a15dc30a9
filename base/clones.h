/*
 * base/clones.h - CPU_CLONES: a hot contiguous loop compiled also for
 * AVX2+FMA and AVX-512, the version picked at load time by the CPU (GCC's
 * target_clones; doc/cpu.md). C11 mode keeps a*b+c unfused in every
 * version, so all of them give the same bits.
 */
#ifndef MF_BASE_CLONES_H
#define MF_BASE_CLONES_H

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CPU_CLONES
#endif

#endif
