/*
 * backends/cpu/cpu_attention.c - fused causal attention kernels (the
 * tiles and formulas are in cpu_attention_tmpl.h).
 */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include "backends/cpu/cpu_engine.h"
#include "backends/cpu/cpu_iter.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_math.h"
#include "base/clones.h"

enum { QR = 64, KC = 256 };   /* query rows and keys per tile */
/* every key tile starts at or before its query tile, so no row of a tile
 * is masked whole (its softmax would be 0/0) */
_Static_assert(KC % QR == 0, "a key tile must cover whole query tiles");

/* The f32 tiles' GEMMs on oneDNN's sgemm when it is the engine (its
 * AVX-512 kernels whatever OPENBLAS_CORETYPE says), on one thread either
 * way: the tiles' own loop is the parallel one. */
static void attn_sgemm(CBLAS_ORDER order, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha,
                       const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
    (void)order;   /* always row-major */
    mfi_gemm g = {.dtype = MF_F32, .trans_a = ta == CblasTrans, .trans_b = tb == CblasTrans, .m = m, .n = n, .k = k,
                  .alpha = alpha, .beta = beta, .a = a, .lda = lda, .b = b, .ldb = ldb, .c = c, .ldc = ldc, .batch = 1};
    if (mfi_cpu_engine() == MF_CPU_ONEDNN && mfi_dnnl_sgemm_serial(&g) == MF_OK) return;
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* a row of a double tile summed left to right */
static inline double sum_seq_f64(const double *x, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += x[i];
    return s;
}

/* f32 tiles: the vectorised exp and 16 partial sums (cpu_math.h), the
 * softmax loops compiled also for AVX2 and AVX-512 */
#define T float
#define SFX f32
#define EXP exp_f32
#define LOG logf
#define SUM sum16_f32
#define TILE_FN CPU_CLONES
#define GEMM attn_sgemm
#include "backends/cpu/cpu_attention_tmpl.h"
#undef T
#undef SFX
#undef EXP
#undef LOG
#undef SUM
#undef TILE_FN
#undef GEMM
#define T double
#define SFX f64
#define EXP exp
#define LOG log
#define SUM sum_seq_f64
#define TILE_FN
#define GEMM cblas_dgemm
#include "backends/cpu/cpu_attention_tmpl.h"
#undef T
#undef SFX
#undef EXP
#undef LOG
#undef SUM
#undef TILE_FN
#undef GEMM

static mf_status check(const char *what, mfi_cv *q, mfi_cv *k, mfi_cv *v)
{
    if (q->dtype != k->dtype || q->dtype != v->dtype) MF_FAIL(MF_ERR_DTYPE, "%s: q, k and v dtypes differ", what);
    if (q->stride[3] != 1 || k->stride[3] != 1 || v->stride[3] != 1)
        MF_FAIL(MF_ERR_INTERNAL, "%s: the last dim of q, k and v must be contiguous", what);
    if (q->dtype != MF_F32 && q->dtype != MF_F64) MF_FAIL(MF_ERR_DTYPE, "%s: not a float dtype", what);
    return MF_OK;
}

mf_status mfi_cpu_attention_fwd(const mfi_attn *p, mfi_cv *out, mfi_cv *lse, mfi_cv *q, mfi_cv *k, mfi_cv *v)
{
    MF_TRY(check("attention", q, k, v));
    if (p->b * p->h * p->t == 0) return MF_OK;
    if (q->dtype == MF_F32) attn_fwd_f32(p, out, lse, q, k, v);
    else attn_fwd_f64(p, out, lse, q, k, v);
    return MF_OK;
}

mf_status mfi_cpu_attention_bwd(const mfi_attn *p, mfi_cv *gq, mfi_cv *gk, mfi_cv *gv, mfi_cv *gout, mfi_cv *q,
                                mfi_cv *k, mfi_cv *v, mfi_cv *out, mfi_cv *lse)
{
    MF_TRY(check("attention backward", q, k, v));
    int64_t rows = p->b * p->h * p->t;
    if (rows == 0) return MF_OK;
    void *delta = malloc((size_t)rows * mf_dtype_size(q->dtype));
    if (!delta) MF_FAIL(MF_ERR_NOMEM, "attention backward: out of memory");
    if (q->dtype == MF_F32) attn_bwd_f32(p, gq, gk, gv, gout, q, k, v, out, lse, delta);
    else attn_bwd_f64(p, gq, gk, gv, gout, q, k, v, out, lse, delta);
    free(delta);
    return MF_OK;
}
