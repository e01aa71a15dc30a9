/*
 * backends/cpu/cpu_engine.c - the CPU engine switch: OpenBLAS or oneDNN
 * for matrix products and convolutions (doc/cpu.md). Everything else the
 * CPU backend runs is mpiflow's own OpenMP loops, whichever is chosen.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cblas.h>
#include "backends/cpu/cpu_engine.h"
#include "base/error.h"

/* oneDNN where it is built in (cpu_onednn.c or cpu_onednn_none.c) */
static mf_cpu_engine engine;
static bool chosen;

mf_cpu_engine mfi_cpu_engine(void) { return chosen ? engine : mfi_dnnl_built ? MF_CPU_ONEDNN : MF_CPU_OPENBLAS; }

bool mf_cpu_engine_available(mf_cpu_engine e) { return e == MF_CPU_OPENBLAS || (e == MF_CPU_ONEDNN && mfi_dnnl_built); }

const char *mf_cpu_engine_name(mf_cpu_engine e)
{
    return e == MF_CPU_OPENBLAS ? "openblas" : e == MF_CPU_ONEDNN ? "onednn" : "unknown";
}

mf_status mf_cpu_engine_set(mf_cpu_engine e)
{
    if (e != MF_CPU_OPENBLAS && e != MF_CPU_ONEDNN) MF_FAIL(MF_ERR_ARG, "mf_cpu_engine_set: unknown engine %d", (int)e);
    if (!mf_cpu_engine_available(e))
        MF_FAIL(MF_ERR_ARG, "the %s CPU engine is not in this build: install libdnnl-dev and configure again "
                            "(configure --with-onednn)", mf_cpu_engine_name(e));
    engine = e;
    chosen = true;
    return MF_OK;
}

mf_cpu_engine mf_cpu_engine_get(void) { return mfi_cpu_engine(); }

mf_status mfi_cpu_engine_from_env(void)
{
    const char *s = getenv("MF_CPU_ENGINE");
    if (!s || !*s) return MF_OK;
    if (!strcmp(s, "openblas")) return mf_cpu_engine_set(MF_CPU_OPENBLAS);
    if (!strcmp(s, "onednn")) {
        if (mf_cpu_engine_set(MF_CPU_ONEDNN) != MF_OK)
            MF_FAIL(MF_ERR_ARG, "MF_CPU_ENGINE=onednn: oneDNN is not in this build (install libdnnl-dev and run "
                                "configure again)");
        return MF_OK;
    }
    MF_FAIL(MF_ERR_ARG, "MF_CPU_ENGINE='%s': expected openblas or onednn", s);
}

bool mf_cpu_bf16_native(void) { return mfi_cpu_engine() == MF_CPU_ONEDNN && mfi_dnnl_bf16_native(); }

const char *mf_cpu_engine_describe(char *buf, size_t size)
{
    if (mfi_cpu_engine() == MF_CPU_ONEDNN) {
        char impls[160];
        mfi_dnnl_impls(impls, sizeof impls);
        snprintf(buf, size, "gemm/linear/matmul and conv2d: onednn, isa %s (%s); bf16 %s; attention: mpiflow "
                 "OpenMP tiles on dnnl_sgemm; pooling, norms: mpiflow OpenMP", mfi_dnnl_isa(), impls, mfi_dnnl_bf16_native() ? "native" : "emulated (rounded, f32 multiply)");
    } else {
        /* the kernels OpenBLAS chose for this CPU (or OPENBLAS_CORETYPE) */
        const char *ct = getenv("OPENBLAS_CORETYPE"), *core = openblas_get_corename();
        snprintf(buf, size, "gemm/linear/matmul: openblas, core %s%s%s%s; conv2d: im2col + openblas; bf16 emulated "
                 "(rounded, f32 multiply); attention: mpiflow OpenMP tiles on openblas; pooling, norms: mpiflow OpenMP",
                 core ? core : "unknown", ct ? " (OPENBLAS_CORETYPE=" : "", ct ? ct : "", ct ? ")" : "");
    }
    return buf;
}
