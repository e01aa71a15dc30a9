/*
 * backends/cpu/cpu_onednn.c - matrix products and convolutions on oneDNN
 * (doc/cpu.md).
 *
 * f32 GEMMs are dnnl_sgemm on one thread and matmul primitives on the
 * operands' row-major strides on more (faster there: doc/performance.md).
 * Under bf16 autocast a GEMM is a matmul primitive with bfloat16
 * operands and f32 accumulation;
 * the f32 operands are converted to bfloat16 (ties to even, as the ops'
 * rounding) while they are packed, so no rounded f32 copy is made. Without
 * native bfloat16 products the bf16 cases are declined and the OpenBLAS
 * path rounds and multiplies in f32.
 * Convolutions are primitives on mpiflow's NCHW/OIHW tensors: oneDNN
 * chooses its own layout ("any") and reorders in and out when that is
 * faster than running on the plain one.
 *
 * Primitives are created once per shape and kept in a small cache; their
 * scratchpads and reorder buffers come from mpiflow's host allocator
 * (base/alloc.c), so the memory statistics and MF_MEMORY_LIMIT see them.
 * A case oneDNN has no implementation for is declined, and the caller
 * runs its own kernel.
 */
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>
#include <immintrin.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include "backends/cpu/cpu_engine.h"
#include "base/alloc.h"
#include "base/error.h"

const bool mfi_dnnl_built = true;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static dnnl_engine_t eng;
static dnnl_stream_t strm;

/* The engine and stream, created on first use (under lock). */
static mf_status dnnl_start(void)
{
    if (strm) return MF_OK;
    dnnl_status_t s = dnnl_engine_create(&eng, dnnl_cpu, 0);
    if (s == dnnl_success) s = dnnl_stream_create(&strm, eng, dnnl_stream_default_flags);
    if (s != dnnl_success) MF_FAIL(MF_ERR_BACKEND, "oneDNN: cannot create the CPU engine: %s", dnnl_status2str(s));
    return MF_OK;
}

/* ---------------------------------------------------------------- cache */
enum { K_MATMUL, K_CONV_FWD, K_CONV_FWD_BIAS, K_CONV_BWD_DATA, K_CONV_BWD_FILTER, K_CONV_IMAGE };
enum { A_SRC, A_WEI, A_BIAS, A_DST, A_NARGS };   /* a primitive's slots, whatever their role */

typedef struct prim_key {
    int kind;
    int bf16;
    int64_t v[20];
} prim_key;

/* One slot: the user's plain layout, and when the primitive wants
 * another, a reorder into or out of a buffer of that layout. */
typedef struct slot {
    int arg;                       /* DNNL_ARG_*; 0: unused */
    bool out;                      /* written by the primitive */
    dnnl_memory_t user, inner;     /* inner: NULL when the user layout is used */
    dnnl_primitive_t reorder;
    size_t inner_bytes;
} slot;

typedef struct prim {
    prim_key key;
    dnnl_primitive_t p;
    size_t scratch_bytes;
    dnnl_memory_t scratch;
    slot s[A_NARGS];
    uint64_t used;
    bool declined;                 /* oneDNN has no implementation: not again */
    char impl[48];
} prim;

#define CACHE_SLOTS 64
static prim cache[CACHE_SLOTS];
static uint64_t clock_;
static char conv_impl[48] = "", gemm_impl[48] = "", gemm_impl_f32[48] = "";

static void prim_clear(prim *e)
{
    if (e->p) dnnl_primitive_destroy(e->p);
    if (e->scratch) dnnl_memory_destroy(e->scratch);
    for (int i = 0; i < A_NARGS; i++) {
        if (e->s[i].user) dnnl_memory_destroy(e->s[i].user);
        if (e->s[i].inner) dnnl_memory_destroy(e->s[i].inner);
        if (e->s[i].reorder) dnnl_primitive_destroy(e->s[i].reorder);
    }
    memset(e, 0, sizeof *e);
}

/* The cached entry of key, or a cleared one to fill (the least recently
 * used). *found says which. */
static prim *cache_get(const prim_key *key, bool *found)
{
    prim *lru = &cache[0];
    for (int i = 0; i < CACHE_SLOTS; i++) {
        prim *e = &cache[i];
        if ((e->p || e->declined) && !memcmp(&e->key, key, sizeof *key)) {
            e->used = ++clock_;
            *found = true;
            return e;
        }
        if (e->used < lru->used) lru = e;
    }
    prim_clear(lru);
    lru->key = *key;
    lru->used = ++clock_;
    *found = false;
    return lru;
}

void mfi_dnnl_shutdown(void)
{
    pthread_mutex_lock(&lock);
    for (int i = 0; i < CACHE_SLOTS; i++) prim_clear(&cache[i]);
    if (strm) dnnl_stream_destroy(strm);
    if (eng) dnnl_engine_destroy(eng);
    strm = NULL;
    eng = NULL;
    pthread_mutex_unlock(&lock);
}

/* Fills e from a primitive descriptor whose slots were asked for in
 * "any" layouts where allowed: user memories in the given plain layouts,
 * reorders where the primitive chose another. Takes pd. */
static mf_status prim_finish(prim *e, dnnl_primitive_desc_t pd, const dnnl_memory_desc_t *user_md[A_NARGS],
                             const int arg[A_NARGS], const bool out[A_NARGS])
{
    dnnl_status_t s = dnnl_success;
    const char *impl = NULL;
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    snprintf(e->impl, sizeof e->impl, "%s", impl ? impl : "?");
    const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    e->scratch_bytes = smd ? dnnl_memory_desc_get_size(smd) : 0;
    if (e->scratch_bytes) s = dnnl_memory_create(&e->scratch, smd, eng, DNNL_MEMORY_NONE);
    for (int i = 0; i < A_NARGS && s == dnnl_success; i++) {
        if (!user_md[i]) continue;
        slot *sl = &e->s[i];
        sl->arg = arg[i];
        sl->out = out[i];
        s = dnnl_memory_create(&sl->user, user_md[i], eng, DNNL_MEMORY_NONE);
        const dnnl_memory_desc_t *want = dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, arg[i]);
        if (s != dnnl_success || !want || dnnl_memory_desc_equal(want, user_md[i])) continue;
        sl->inner_bytes = dnnl_memory_desc_get_size(want);
        s = dnnl_memory_create(&sl->inner, want, eng, DNNL_MEMORY_NONE);
        dnnl_primitive_desc_t rpd = NULL;
        if (s == dnnl_success)
            s = sl->out ? dnnl_reorder_primitive_desc_create(&rpd, want, eng, user_md[i], eng, NULL)
                        : dnnl_reorder_primitive_desc_create(&rpd, user_md[i], eng, want, eng, NULL);
        if (s == dnnl_success) s = dnnl_primitive_create(&sl->reorder, rpd);
        if (rpd) dnnl_primitive_desc_destroy(rpd);
    }
    if (s == dnnl_success) s = dnnl_primitive_create(&e->p, pd);
    dnnl_primitive_desc_destroy(pd);
    if (s != dnnl_success) {
        prim_clear(e);
        MF_FAIL(MF_ERR_BACKEND, "oneDNN: cannot create a primitive: %s", dnnl_status2str(s));
    }
    return MF_OK;
}

static mf_status reorder(dnnl_primitive_t r, dnnl_memory_t from, dnnl_memory_t to)
{
    dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
    dnnl_status_t s = dnnl_primitive_execute(r, strm, 2, a);
    if (s != dnnl_success) MF_FAIL(MF_ERR_BACKEND, "oneDNN reorder: %s", dnnl_status2str(s));
    return MF_OK;
}

/* Runs e on the user buffers ptr[slot] (NULL: slot unused): reorders in,
 * the primitive, reorders out; scratch from the host allocator. */
static mf_status prim_run(prim *e, void *const ptr[A_NARGS])
{
    void *bufs[A_NARGS + 1] = {0};
    size_t sizes[A_NARGS + 1] = {0};
    dnnl_exec_arg_t args[A_NARGS + 1];
    int nargs = 0;
    mf_status st = MF_OK;
    sigset_t old;
    mfi_signals_block(&old);   /* cpu_signals.c: no handler on top of oneDNN's code */
    if (e->scratch_bytes) {
        sizes[A_NARGS] = e->scratch_bytes;
        if (!(bufs[A_NARGS] = mfi_alloc(e->scratch_bytes))) MF_FAIL_OUT(MF_ERR_NOMEM, "oneDNN: out of memory for a scratchpad");
        dnnl_memory_set_data_handle(e->scratch, bufs[A_NARGS]);
        args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, e->scratch};
    }
    for (int i = 0; i < A_NARGS; i++) {
        slot *sl = &e->s[i];
        if (!sl->arg) continue;
        dnnl_memory_set_data_handle(sl->user, ptr[i]);
        if (sl->inner) {
            sizes[i] = sl->inner_bytes;
            if (!(bufs[i] = mfi_alloc(sl->inner_bytes))) MF_FAIL_OUT(MF_ERR_NOMEM, "oneDNN: out of memory for a reorder");
            dnnl_memory_set_data_handle(sl->inner, bufs[i]);
            if (!sl->out) MF_TRY_OUT(reorder(sl->reorder, sl->user, sl->inner));
        }
        args[nargs++] = (dnnl_exec_arg_t){sl->arg, sl->inner ? sl->inner : sl->user};
    }
    dnnl_status_t s = dnnl_primitive_execute(e->p, strm, nargs, args);
    if (s != dnnl_success) MF_FAIL_OUT(MF_ERR_BACKEND, "oneDNN %s: %s", e->impl, dnnl_status2str(s));
    for (int i = 0; i < A_NARGS; i++)
        if (e->s[i].arg && e->s[i].inner && e->s[i].out) MF_TRY_OUT(reorder(e->s[i].reorder, e->s[i].inner, e->s[i].user));
    dnnl_stream_wait(strm);
out:
    mfi_signals_restore(&old);
    for (int i = 0; i <= A_NARGS; i++)
        if (bufs[i]) mfi_free(bufs[i], sizes[i]);
    return st;
}

/* ---------------------------------------------------------------- GEMM */

/* f32 to bfloat16, ties to even, a NaN staying a (quiet) NaN, with the
 * CPU's own conversion (VCVTNE2PS2BF16, 32 floats an instruction; only
 * called where oneDNN found native bfloat16, which implies it). Like the products that read them (VDPBF16PS), it takes
 * f32 subnormals as zero, which changes nothing those products return. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) static void bf16_row_native(uint16_t *d,
                                                                                           const float *s,
                                                                                           int64_t n)
{
    int64_t j = 0;
    for (; j + 32 <= n; j += 32) {
        __m512bh r = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(s + j + 16), _mm512_loadu_ps(s + j));
        _mm512_storeu_si512(d + j, (__m512i)r);
    }
    for (; j < n; j += 16) {
        __mmask16 m = n - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - j)) - 1);
        __m256bh r = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, s + j));
        _mm256_mask_storeu_epi16(d + j, m, (__m256i)r);
    }
}

/* rows of n floats (leading dimension ld) to contiguous bfloat16 rows,
 * spread over the threads when there is enough of it */
static void bf16_rows(uint16_t *d, const float *s, int64_t ld, int64_t rows, int64_t n)
{
    if (rows == 1 && n > 65536) {   /* one long row: in chunks */
        int64_t chunks = (n + 16383) / 16384;
#pragma omp parallel for schedule(static)
        for (int64_t c = 0; c < chunks; c++) {
            int64_t j0 = c * 16384, len = n - j0 < 16384 ? n - j0 : 16384;
            bf16_row_native(d + j0, s + j0, len);
        }
        return;
    }
#pragma omp parallel for schedule(static) if (rows * n > 65536)
    for (int64_t i = 0; i < rows; i++) bf16_row_native(d + i * n, s + i * ld, n);
}

/* op(X) [rows, cols] of a row-major X with leading dimension ld, packed
 * as contiguous bfloat16 in X's stored orientation (for a transposed op,
 * X's cols rows of length rows: a transposed view of it). */
static void pack_bf16(uint16_t *dst, const float *x, int64_t ld, bool trans, int64_t rows, int64_t cols)
{
    if (!trans) bf16_rows(dst, x, ld, rows, cols);
    else bf16_rows(dst, x, ld, cols, rows);
}

mf_status mfi_dnnl_bf16_image(void *dst, const float *src, int64_t n)
{
    bf16_rows(dst, src, n, 1, n);
    return MF_OK;
}

/* An operand's image when it has the layout the primitive reads (its
 * stored rows contiguous, batches back to back or shared), else NULL:
 * packed here. */
static const uint16_t *image_of(const void *img, int64_t ld, int64_t stride, bool trans, int64_t rows,
                                int64_t cols, int64_t batch)
{
    int64_t len = trans ? rows : cols;
    if (!img || ld != len || (batch > 1 && stride && stride != rows * cols)) return NULL;
    return img;
}

/* C = alpha op(A) op(B) + beta C as a matmul primitive: f32 on the
 * operands as they lie (their leading dimensions), or bfloat16 on their
 * images or on copies packed here, contiguous in their stored
 * orientation; f32 accumulation and output either way. */
static mf_status matmul(const mfi_gemm *g)
{
    bool bf16 = g->bf16;
    const uint16_t *ia = bf16 ? image_of(g->a16, g->lda, g->stride_a, g->trans_a, g->m, g->k, g->batch) : NULL;
    const uint16_t *ib = bf16 ? image_of(g->b16, g->ldb, g->stride_b, g->trans_b, g->k, g->n, g->batch) : NULL;
    int64_t lda = bf16 ? (g->trans_a ? g->m : g->k) : g->lda, ldb = bf16 ? (g->trans_b ? g->k : g->n) : g->ldb;
    prim_key key;
    memset(&key, 0, sizeof key);
    key.kind = K_MATMUL;
    key.bf16 = bf16;
    float alpha = (float)g->alpha, beta = (float)g->beta;
    int64_t v[] = {g->m, g->n, g->k, g->trans_a, g->trans_b, g->ldc, lda, ldb, g->bias != NULL};
    memcpy(key.v, v, sizeof v);
    memcpy(&key.v[9], &alpha, sizeof alpha);
    memcpy(&key.v[10], &beta, sizeof beta);
    mf_status st = MF_OK;
    pthread_mutex_lock(&lock);
    bool found;
    prim *e = NULL;
    MF_TRY_OUT(dnnl_start());
    e = cache_get(&key, &found);
    if (!found) {
        /* op(A) [m, k] and op(B) [k, n] as strided views of their storage */
        dnnl_data_type_t it = bf16 ? dnnl_bf16 : dnnl_f32;
        dnnl_memory_desc_t a, b, c, bias;
        dnnl_dims_t da = {g->m, g->k}, db = {g->k, g->n}, dc = {g->m, g->n}, dbias = {1, g->n};
        dnnl_dims_t sa = {g->trans_a ? 1 : lda, g->trans_a ? lda : 1};
        dnnl_dims_t sb = {g->trans_b ? 1 : ldb, g->trans_b ? ldb : 1};
        dnnl_dims_t sc = {g->ldc, 1};
        dnnl_memory_desc_init_by_strides(&a, 2, da, it, sa);
        dnnl_memory_desc_init_by_strides(&b, 2, db, it, sb);
        dnnl_memory_desc_init_by_strides(&c, 2, dc, dnnl_f32, sc);
        dnnl_memory_desc_init_by_tag(&bias, 2, dbias, dnnl_f32, dnnl_ab);
        dnnl_matmul_desc_t md;
        dnnl_primitive_attr_t attr = NULL;
        dnnl_post_ops_t po = NULL;
        dnnl_primitive_desc_t pd = NULL;
        dnnl_status_t s = dnnl_matmul_desc_init(&md, &a, &b, g->bias ? &bias : NULL, &c);
        if (s == dnnl_success) s = dnnl_primitive_attr_create(&attr);
        if (s == dnnl_success) s = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
        if (s == dnnl_success && alpha != 1.0f) s = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha);
        if (s == dnnl_success && beta != 0.0f) {
            s = dnnl_post_ops_create(&po);
            if (s == dnnl_success) s = dnnl_post_ops_append_sum(po, beta);
            if (s == dnnl_success) s = dnnl_primitive_attr_set_post_ops(attr, po);
        }
        if (s == dnnl_success) s = dnnl_primitive_desc_create(&pd, &md, attr, eng, NULL);
        if (po) dnnl_post_ops_destroy(po);
        if (attr) dnnl_primitive_attr_destroy(attr);
        if (s != dnnl_success) {
            e->declined = true;
            st = MFI_DNNL_DECLINED;
            goto out;
        }
        const dnnl_memory_desc_t *um[A_NARGS] = {&a, &b, g->bias ? &bias : NULL, &c};
        const int arg[A_NARGS] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_BIAS, DNNL_ARG_DST};
        const bool outp[A_NARGS] = {false, false, false, true};
        MF_TRY_OUT(prim_finish(e, pd, um, arg, outp));
        snprintf(bf16 ? gemm_impl : gemm_impl_f32, sizeof gemm_impl, "%s", e->impl);
    }
    if (e->declined) {
        st = MFI_DNNL_DECLINED;
        goto out;
    }
    /* bfloat16 without an image: packed here, per batch */
    size_t abytes = bf16 && !ia ? (size_t)(g->m * g->k) * 2 : 0, bbytes = bf16 && !ib ? (size_t)(g->k * g->n) * 2 : 0;
    uint16_t *pa = abytes ? mfi_alloc(abytes) : NULL, *pb = bbytes ? mfi_alloc(bbytes) : NULL;
    if ((abytes && !pa) || (bbytes && !pb)) {
        mfi_free(pa, abytes);
        mfi_free(pb, bbytes);
        MF_FAIL_OUT(MF_ERR_NOMEM, "gemm: out of memory packing bfloat16 operands");
    }
    for (int64_t i = 0; i < g->batch && st == MF_OK; i++) {
        const void *a = (const float *)g->a + i * g->stride_a, *b = (const float *)g->b + i * g->stride_b;
        if (ia) a = ia + i * g->stride_a;
        if (ib) b = ib + i * g->stride_b;
        if (pa && (i == 0 || g->stride_a)) pack_bf16(pa, a, g->lda, g->trans_a, g->m, g->k);
        if (pb && (i == 0 || g->stride_b)) pack_bf16(pb, b, g->ldb, g->trans_b, g->k, g->n);
        void *ptr[A_NARGS] = {pa ? pa : (void *)a, pb ? pb : (void *)b, (void *)g->bias,
                              (float *)g->c + i * g->stride_c};
        st = prim_run(e, ptr);
    }
    mfi_free(pa, abytes);
    mfi_free(pb, bbytes);
out:
    pthread_mutex_unlock(&lock);
    return st;
}

/* g (f32, no bias) as dnnl_sgemm calls, one per batch entry */
static mf_status sgemm(const mfi_gemm *g)
{
    char ta = g->trans_a ? 'T' : 'N', tb = g->trans_b ? 'T' : 'N';
    sigset_t old;
    mfi_signals_block(&old);   /* cpu_signals.c: its kernels move the stack pointer into the heap */
    dnnl_status_t s = dnnl_success;
    for (int64_t i = 0; i < g->batch && s == dnnl_success; i++)
        s = dnnl_sgemm(ta, tb, g->m, g->n, g->k, (float)g->alpha, (const float *)g->a + i * g->stride_a, g->lda,
                       (const float *)g->b + i * g->stride_b, g->ldb, (float)g->beta, (float *)g->c + i * g->stride_c,
                       g->ldc);
    mfi_signals_restore(&old);
    if (s != dnnl_success) MF_FAIL(MF_ERR_BACKEND, "oneDNN sgemm [%lld,%lld]x[%lld,%lld]: %s", (long long)g->m,
                                   (long long)g->k, (long long)g->k, (long long)g->n, dnnl_status2str(s));
    return MF_OK;
}

mf_status mfi_dnnl_gemm(const mfi_gemm *g)
{
    if (g->dtype != MF_F32 || (g->bf16 && !mfi_dnnl_bf16_native())) return MFI_DNNL_DECLINED;
    if (g->bf16 || omp_get_max_threads() > 1) return matmul(g);
    /* one thread: dnnl_sgemm, as fast or faster there (doc/performance.md) */
    if (!g->bias) return sgemm(g);
    mfi_gemm r = mfi_cpu_bias_rows(g);
    return sgemm(&r);
}

mf_status mfi_dnnl_sgemm_serial(const mfi_gemm *g)
{
    if (g->dtype != MF_F32 || g->bf16 || g->bias) return MFI_DNNL_DECLINED;
    /* inside a parallel region oneDNN runs on the calling thread; outside
     * one, it is told to */
    int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
    if (nt > 1) omp_set_num_threads(1);
    mf_status st = sgemm(g);
    if (nt > 1) omp_set_num_threads(nt);
    return st;
}

/* ---------------------------------------------------------------- conv2d */

/* oneDNN's right padding for our output size; false when it would be
 * negative (an output that drops input rows: declined). */
static bool pad_right(const mfi_conv2d *p, dnnl_dims_t pr)
{
    int64_t in[2] = {p->h, p->w}, o[2] = {p->oh, p->ow}, k[2] = {p->kh, p->kw};
    for (int i = 0; i < 2; i++) {
        pr[i] = (o[i] - 1) * p->stride[i] + (k[i] - 1) * p->dilation[i] + 1 - in[i] - p->padding[i];
        if (pr[i] < 0) return false;
    }
    return true;
}

/* The plain descriptors of a convolution: x [n,c,h,w], w [oc,c/g,kh,kw]
 * (or [g,oc/g,c/g,kh,kw]), bias [oc], y [n,oc,oh,ow]; x, w (and y when
 * it is read) bfloat16 under autocast. */
static void conv_mds(const mfi_conv2d *p, dnnl_data_type_t in_t, dnnl_memory_desc_t *x, dnnl_memory_desc_t *w,
                     dnnl_memory_desc_t *b, dnnl_memory_desc_t *y, dnnl_data_type_t y_t, dnnl_data_type_t w_t)
{
    dnnl_dims_t dx = {p->n, p->c, p->h, p->w}, dy = {p->n, p->oc, p->oh, p->ow}, db = {p->oc};
    dnnl_memory_desc_init_by_tag(x, 4, dx, in_t, dnnl_nchw);
    dnnl_memory_desc_init_by_tag(y, 4, dy, y_t, dnnl_nchw);
    dnnl_memory_desc_init_by_tag(b, 1, db, dnnl_f32, dnnl_a);
    if (p->groups == 1) {
        dnnl_dims_t dw = {p->oc, p->c, p->kh, p->kw};
        dnnl_memory_desc_init_by_tag(w, 4, dw, w_t, dnnl_oihw);
    } else {
        dnnl_dims_t dw = {p->groups, p->oc / p->groups, p->c / p->groups, p->kh, p->kw};
        dnnl_memory_desc_init_by_tag(w, 5, dw, w_t, dnnl_goihw);
    }
}

/* "any" versions of the same shapes, for oneDNN to choose a layout */
static void any_of(dnnl_memory_desc_t *any, const dnnl_memory_desc_t *plain)
{
    dnnl_memory_desc_init_by_tag(any, plain->ndims, plain->dims, plain->data_type, dnnl_format_tag_any);
}

/* The forward descriptor (bias or not) of p: the hint backward needs too. */
static dnnl_status_t conv_fwd_pd(const mfi_conv2d *p, bool bf16, bool bias, dnnl_primitive_desc_t *pd,
                                 dnnl_memory_desc_t md[A_NARGS], dnnl_primitive_attr_t attr)
{
    dnnl_dims_t st = {p->stride[0], p->stride[1]}, dil = {p->dilation[0] - 1, p->dilation[1] - 1};
    dnnl_dims_t pl = {p->padding[0], p->padding[1]}, pr;
    pad_right(p, pr);
    dnnl_data_type_t it = bf16 ? dnnl_bf16 : dnnl_f32;
    conv_mds(p, it, &md[A_SRC], &md[A_WEI], &md[A_BIAS], &md[A_DST], dnnl_f32, it);
    dnnl_memory_desc_t ax, aw, ay;
    any_of(&ax, &md[A_SRC]);
    any_of(&aw, &md[A_WEI]);
    any_of(&ay, &md[A_DST]);
    dnnl_convolution_desc_t d;
    dnnl_status_t s = dnnl_dilated_convolution_forward_desc_init(&d, dnnl_forward_training, dnnl_convolution_direct, &ax,
                                                                 &aw, bias ? &md[A_BIAS] : NULL, &ay, st, dil, pl, pr);
    if (s == dnnl_success) s = dnnl_primitive_desc_create(pd, &d, attr, eng, NULL);
    return s;
}

static dnnl_primitive_attr_t user_scratch_attr(void)
{
    dnnl_primitive_attr_t attr = NULL;
    if (dnnl_primitive_attr_create(&attr) != dnnl_success) return NULL;
    dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
    return attr;
}

/* The key of p's convolution pass `kind` (geometry in v[0..15]). */
static prim_key conv_key(const mfi_conv2d *p, int kind)
{
    prim_key key;
    memset(&key, 0, sizeof key);
    key.kind = kind;
    key.bf16 = p->bf16;   /* conv_run declined it without native bfloat16 */
    int64_t v[] = {p->n, p->c, p->h, p->w, p->oc, p->oh, p->ow, p->kh, p->kw, p->stride[0], p->stride[1],
                   p->padding[0], p->padding[1], p->dilation[0], p->dilation[1], p->groups};
    memcpy(key.v, v, sizeof v);
    return key;
}

/* The primitive descriptor of one convolution pass, its operands asked
 * for in "any" layouts, and their plain descriptors in md (slot A_SRC
 * holds x or gx, A_WEI w or gw, A_DST y or gy). In a backward pass the
 * gradient flowing in is bfloat16 under autocast, the one computed f32. */
static dnnl_status_t conv_pd(const mfi_conv2d *p, int kind, bool bf16, dnnl_primitive_desc_t *pd,
                             dnnl_memory_desc_t md[A_NARGS])
{
    dnnl_dims_t pr;
    pad_right(p, pr);
    dnnl_primitive_attr_t attr = user_scratch_attr();
    dnnl_primitive_desc_t fwd = NULL;
    *pd = NULL;
    dnnl_status_t s = attr ? conv_fwd_pd(p, bf16, kind == K_CONV_FWD_BIAS, &fwd, md, attr) : dnnl_out_of_memory;
    if (s == dnnl_success && (kind == K_CONV_FWD || kind == K_CONV_FWD_BIAS)) {
        *pd = fwd;
        fwd = NULL;
    } else if (s == dnnl_success) {
        dnnl_dims_t st = {p->stride[0], p->stride[1]}, dil = {p->dilation[0] - 1, p->dilation[1] - 1};
        dnnl_dims_t pl = {p->padding[0], p->padding[1]};
        dnnl_data_type_t it = bf16 ? dnnl_bf16 : dnnl_f32;
        bool data = kind == K_CONV_BWD_DATA;
        conv_mds(p, data ? dnnl_f32 : it, &md[A_SRC], &md[A_WEI], &md[A_BIAS], &md[A_DST], it, data ? it : dnnl_f32);
        dnnl_memory_desc_t ax, aw, ay;
        any_of(&ax, &md[A_SRC]);
        any_of(&aw, &md[A_WEI]);
        any_of(&ay, &md[A_DST]);
        dnnl_convolution_desc_t d;
        if (data)
            s = dnnl_dilated_convolution_backward_data_desc_init(&d, dnnl_convolution_direct, &ax, &aw, &ay, st, dil, pl, pr);
        else
            s = dnnl_dilated_convolution_backward_weights_desc_init(&d, dnnl_convolution_direct, &ax, &aw, NULL, &ay, st,
                                                                    dil, pl, pr);
        if (s == dnnl_success) s = dnnl_primitive_desc_create(pd, &d, attr, eng, fwd);
    }
    if (fwd) dnnl_primitive_desc_destroy(fwd);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return s;
}

/* Operand `which`'s slot in a pass, and whether the pass reads it. */
static const int image_slot[3] = {A_SRC, A_WEI, A_DST};
static bool pass_reads(int kind, int which)
{
    if (which == MFI_CONV_X) return kind != K_CONV_BWD_DATA;
    if (which == MFI_CONV_W) return kind != K_CONV_BWD_FILTER;
    return kind == K_CONV_BWD_DATA || kind == K_CONV_BWD_FILTER;
}

/* The entry of operand `which`'s bfloat16 image (bf16 p): a reorder from
 * its plain f32 layout into the one the first pass to read it wants (x
 * and w: the forward; gy: the backward-filter, which every training step
 * runs), created on first use. Its A_DST memory describes the image. */
static mf_status image_entry(const mfi_conv2d *p, int which, prim **ep)
{
    dnnl_dims_t pr;
    if (!p->bf16 || p->c % p->groups || p->oc % p->groups || !pad_right(p, pr)) return MFI_DNNL_DECLINED;
    prim_key key = conv_key(p, K_CONV_IMAGE);
    key.v[16] = which;
    MF_TRY(dnnl_start());
    bool found;
    prim *e = cache_get(&key, &found);
    *ep = e;
    if (found) return e->declined ? MFI_DNNL_DECLINED : MF_OK;
    dnnl_memory_desc_t md[A_NARGS], f32[A_NARGS];
    dnnl_primitive_desc_t pd = NULL, rpd = NULL;
    dnnl_status_t s = conv_pd(p, which == MFI_CONV_GY ? K_CONV_BWD_FILTER : K_CONV_FWD, true, &pd, md);
    const dnnl_memory_desc_t *want = NULL;
    if (s == dnnl_success) {
        static const int arg[3] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_DST};
        want = dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, arg[which]);
        conv_mds(p, dnnl_f32, &f32[A_SRC], &f32[A_WEI], &f32[A_BIAS], &f32[A_DST], dnnl_f32, dnnl_f32);
        s = want ? dnnl_reorder_primitive_desc_create(&rpd, &f32[image_slot[which]], eng, want, eng, NULL)
                 : dnnl_unimplemented;
    }
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (s != dnnl_success) {
        e->declined = true;
        return MFI_DNNL_DECLINED;
    }
    dnnl_memory_desc_t image;
    image = *dnnl_primitive_desc_query_md(rpd, dnnl_query_dst_md, 0);
    const dnnl_memory_desc_t *um[A_NARGS] = {&f32[image_slot[which]], NULL, NULL, &image};
    const int rarg[A_NARGS] = {DNNL_ARG_FROM, 0, 0, DNNL_ARG_TO};
    const bool outp[A_NARGS] = {false, false, false, true};
    return prim_finish(e, rpd, um, rarg, outp);
}

/* The layout of operand `which`'s image (a copy), or MFI_DNNL_DECLINED. */
static mf_status image_md(const mfi_conv2d *p, int which, dnnl_memory_desc_t *md)
{
    prim *e;
    mf_status st = image_entry(p, which, &e);
    if (st != MF_OK) return st;
    const dnnl_memory_desc_t *m = NULL;
    dnnl_memory_get_memory_desc(e->s[A_DST].user, &m);
    *md = *m;
    return MF_OK;
}

int64_t mfi_dnnl_conv_image_bytes(const mfi_conv2d *p, int which)
{
    if (!p->bf16 || !mfi_dnnl_bf16_native() || which < MFI_CONV_X || which > MFI_CONV_GY) return 0;
    pthread_mutex_lock(&lock);
    dnnl_memory_desc_t md;
    int64_t bytes = image_md(p, which, &md) == MF_OK ? (int64_t)dnnl_memory_desc_get_size(&md) : 0;
    pthread_mutex_unlock(&lock);
    return bytes;
}

mf_status mfi_dnnl_conv_image(const mfi_conv2d *p, int which, void *dst, const float *src)
{
    pthread_mutex_lock(&lock);
    prim *e;
    mf_status st = image_entry(p, which, &e);
    if (st == MF_OK) {
        void *ptr[A_NARGS] = {(void *)src, NULL, NULL, dst};
        st = prim_run(e, ptr);
    } else if (st == MFI_DNNL_DECLINED) {
        st = mfi_error(MF_ERR_BACKEND, "oneDNN: no bfloat16 image of this convolution's operand");
    }
    pthread_mutex_unlock(&lock);
    return st;
}

/* The operands of pass `kind` given as images in oneDNN's layout (bit
 * MFI_CONV_*), read from p. */
static int own_images(const mfi_conv2d *p, int kind)
{
    const void *img[3] = {p->x16, p->w16, p->gy16};
    const bool own[3] = {p->x16_own, p->w16_own, p->gy16_own};
    int bits = 0;
    for (int i = 0; i < 3; i++)
        if (p->bf16 && img[i] && own[i] && pass_reads(kind, i)) bits |= 1 << i;
    return bits;
}

/* Creates the entry of one convolution pass (kind) on first use. An
 * operand given as an image in oneDNN's layout is described as such,
 * so it is read as it is (or reordered from it). */
static mf_status conv_prim(const mfi_conv2d *p, int kind, prim **ep)
{
    dnnl_dims_t pr;
    if (p->c % p->groups || p->oc % p->groups || !pad_right(p, pr)) return MFI_DNNL_DECLINED;
    prim_key key = conv_key(p, kind);
    key.v[16] = own_images(p, kind);
    MF_TRY(dnnl_start());
    bool found;
    prim *e = cache_get(&key, &found);
    *ep = e;
    if (found) return e->declined ? MFI_DNNL_DECLINED : MF_OK;
    /* the images' layouts (their entries never evict e, the newest) */
    dnnl_memory_desc_t img[3];
    for (int i = 0; i < 3; i++) {
        mf_status st = key.v[16] & (1 << i) ? image_md(p, i, &img[i]) : MF_OK;
        if (st == MFI_DNNL_DECLINED) e->declined = true;
        else if (st != MF_OK) prim_clear(e);   /* an error: tried again next time */
        if (st != MF_OK) return st;
    }
    dnnl_memory_desc_t md[A_NARGS];
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t s = conv_pd(p, kind, key.bf16, &pd, md);
    if (s != dnnl_success) {
        if (pd) dnnl_primitive_desc_destroy(pd);
        e->declined = true;
        return MFI_DNNL_DECLINED;
    }
    const dnnl_memory_desc_t *um[A_NARGS] = {&md[A_SRC], &md[A_WEI], NULL, &md[A_DST]};
    for (int i = 0; i < 3; i++)
        if (key.v[16] & (1 << i)) um[image_slot[i]] = &img[i];
    int arg[A_NARGS] = {0};
    bool outp[A_NARGS] = {0};
    if (kind == K_CONV_FWD || kind == K_CONV_FWD_BIAS) {
        arg[A_SRC] = DNNL_ARG_SRC, arg[A_WEI] = DNNL_ARG_WEIGHTS, arg[A_DST] = DNNL_ARG_DST, outp[A_DST] = true;
        if (kind == K_CONV_FWD_BIAS) um[A_BIAS] = &md[A_BIAS], arg[A_BIAS] = DNNL_ARG_BIAS;
    } else {
        bool data = kind == K_CONV_BWD_DATA;
        arg[A_SRC] = data ? DNNL_ARG_DIFF_SRC : DNNL_ARG_SRC;
        outp[A_SRC] = data;
        arg[A_WEI] = data ? DNNL_ARG_WEIGHTS : DNNL_ARG_DIFF_WEIGHTS;
        outp[A_WEI] = !data;
        arg[A_DST] = DNNL_ARG_DIFF_DST;
    }
    MF_TRY(prim_finish(e, pd, um, arg, outp));
    snprintf(conv_impl, sizeof conv_impl, "%s", e->impl);
    return MF_OK;
}

/* Runs one convolution pass on contiguous f32 views (under autocast the
 * bfloat16 operands are packed first). */
static mf_status conv_run(const mfi_conv2d *p, int kind, void *s0, const void *w, const void *b, void *d)
{
    if (!p->n || !p->oc || !p->c || (p->bf16 && !mfi_dnnl_bf16_native())) return MFI_DNNL_DECLINED;
    pthread_mutex_lock(&lock);
    prim *e = NULL;
    mf_status st = conv_prim(p, kind, &e);
    void *packed[A_NARGS] = {0};
    size_t bytes[A_NARGS] = {0};
    void *ptr[A_NARGS] = {s0, (void *)w, (void *)b, d};
    if (st == MF_OK && e->key.bf16) {
        /* the operands read as bfloat16: x/w forward, gy/w backward-data, x/gy backward-filter */
        int64_t nx = p->n * p->c * p->h * p->w, nw = p->oc * (p->c / p->groups) * p->kh * p->kw;
        int64_t ny = p->n * p->oc * p->oh * p->ow;
        bool in[A_NARGS] = {kind != K_CONV_BWD_DATA, kind != K_CONV_BWD_FILTER, false,
                            kind == K_CONV_BWD_DATA || kind == K_CONV_BWD_FILTER};
        int64_t n[A_NARGS] = {nx, nw, 0, ny};
        const void *img[A_NARGS] = {p->x16, p->w16, NULL, p->gy16};
        for (int i = 0; i < A_NARGS && st == MF_OK; i++) {
            if (!in[i]) continue;
            if (img[i]) {   /* converted once by the op */
                ptr[i] = (void *)img[i];
                continue;
            }
            bytes[i] = (size_t)n[i] * 2;
            if (!(packed[i] = mfi_alloc(bytes[i]))) {
                st = mfi_error(MF_ERR_NOMEM, "conv2d: out of memory packing bfloat16 operands");
                break;
            }
            pack_bf16(packed[i], ptr[i], n[i], false, 1, n[i]);
            ptr[i] = packed[i];
        }
    }
    if (st == MF_OK) st = prim_run(e, ptr);
    for (int i = 0; i < A_NARGS; i++)
        if (packed[i]) mfi_free(packed[i], bytes[i]);
    pthread_mutex_unlock(&lock);
    return st;
}

mf_status mfi_dnnl_conv_fwd(const mfi_conv2d *p, mfi_cv *out, mfi_cv *x, mfi_cv *w, mfi_cv *bias)
{
    if (x->dtype != MF_F32) return MFI_DNNL_DECLINED;
    return conv_run(p, bias ? K_CONV_FWD_BIAS : K_CONV_FWD, x->data, w->data, bias ? bias->data : NULL, out->data);
}

mf_status mfi_dnnl_conv_bwd_data(const mfi_conv2d *p, mfi_cv *gx, mfi_cv *gy, mfi_cv *w)
{
    if (gx->dtype != MF_F32) return MFI_DNNL_DECLINED;
    return conv_run(p, K_CONV_BWD_DATA, gx->data, w->data, NULL, gy->data);
}

mf_status mfi_dnnl_conv_bwd_filter(const mfi_conv2d *p, mfi_cv *gw, mfi_cv *gy, mfi_cv *x)
{
    if (gw->dtype != MF_F32) return MFI_DNNL_DECLINED;
    return conv_run(p, K_CONV_BWD_FILTER, x->data, gw->data, NULL, gy->data);
}

/* conv_run's and prim_run's buffers: bfloat16 packings, scratchpad, reorders */
int mfi_dnnl_conv_temps(const mfi_conv2d *p, int pass, bool bias, size_t *bytes, int max)
{
    if (!p->n || !p->oc || !p->c || (p->bf16 && !mfi_dnnl_bf16_native()) || max < 2 * A_NARGS + 1) return -1;
    const int kind = pass == MFI_CONV_PASS_FWD ? (bias ? K_CONV_FWD_BIAS : K_CONV_FWD)
                     : pass == MFI_CONV_PASS_BWD_DATA ? K_CONV_BWD_DATA : K_CONV_BWD_FILTER;
    pthread_mutex_lock(&lock);
    prim *e = NULL;
    int n = conv_prim(p, kind, &e) == MF_OK ? 0 : -1;
    const int64_t el[3] = {p->n * p->c * p->h * p->w, p->oc * (p->c / p->groups) * p->kh * p->kw,
                           p->n * p->oc * p->oh * p->ow};
    const void *img[3] = {p->x16, p->w16, p->gy16};   /* conv_run packs the operands with no image */
    const bool in[3] = {kind != K_CONV_BWD_DATA, kind != K_CONV_BWD_FILTER, kind >= K_CONV_BWD_DATA};
    for (int i = 0; n >= 0 && e->key.bf16 && i < 3; i++)
        if (in[i] && !img[i]) bytes[n++] = (size_t)el[i] * 2;
    if (n >= 0 && e->scratch_bytes) bytes[n++] = e->scratch_bytes;
    for (int i = 0; n >= 0 && i < A_NARGS; i++)
        if (e->s[i].arg && e->s[i].inner) bytes[n++] = e->s[i].inner_bytes;
    pthread_mutex_unlock(&lock);
    return n;
}

/* ---------------------------------------------------------------- reports */
const char *mfi_dnnl_isa(void)
{
    switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "other";
    }
}

bool mfi_dnnl_bf16_native(void)
{
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    return isa == dnnl_cpu_isa_avx512_core_bf16 || isa == dnnl_cpu_isa_avx512_core_amx;
}

void mfi_dnnl_impls(char *buf, size_t size)
{
    /* a probe convolution (32 -> 64 channels, 5x5 on 14x14) names the
     * implementation oneDNN picks for this CPU */
    if (!conv_impl[0]) {
        mfi_conv2d p = {.n = 8, .c = 32, .h = 14, .w = 14, .oc = 64, .oh = 14, .ow = 14, .kh = 5, .kw = 5,
                        .stride = {1, 1}, .padding = {2, 2}, .dilation = {1, 1}, .groups = 1};
        pthread_mutex_lock(&lock);
        prim *e;
        if (conv_prim(&p, K_CONV_FWD, &e) != MF_OK) snprintf(conv_impl, sizeof conv_impl, "none");
        pthread_mutex_unlock(&lock);
    }
    snprintf(buf, size, "conv %s, gemm %s%s%s", conv_impl, gemm_impl_f32[0] ? gemm_impl_f32 : "sgemm",
             gemm_impl[0] ? ", bf16 matmul " : "", gemm_impl);
}
