/*
 * backends/cpu/cpu_conv_tmpl.h - conv2d kernels for one element type.
 *
 * Included by cpu_conv.c with T (float or double), SFX (f32/f64) and
 * GEMM_T (cblas_sgemm or cblas_dgemm) defined.
 *
 * Algorithm: im2col + one GEMM per group and chunk of images. A chunk's
 * column matrix is [C/g*KH*KW, nb*OH*OW]; nb is chosen so that it stays
 * about 4 MiB, which keeps the GEMM's N dimension long (good for BLAS)
 * without making the buffer spill far out of cache. Cost per image:
 * 2*OC*(C/g)*KH*KW*OH*OW flops in the GEMM, plus O(C*KH*KW*OH*OW)
 * moves for im2col and the output scatter.
 */
#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)
#define FN(name) CAT(name, SFX)

/* Columns of images [n0, n0+nb) for channels [c0, c0+cg). */
static void FN(im2col)(const mfi_conv2d *p, const T *x, int64_t n0, int64_t nb, int64_t c0, int64_t cg, T *col)
{
    const int64_t H = p->h, W = p->w, OH = p->oh, OW = p->ow, L = OH * OW;
    const int64_t rows = cg * p->kh * p->kw;
    #pragma omp parallel for if (cpu_par(rows * nb * L)) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        int64_t c = r / (p->kh * p->kw), ki = (r / p->kw) % p->kh, kj = r % p->kw;
        int64_t dh = ki * p->dilation[0] - p->padding[0], dw = kj * p->dilation[1] - p->padding[1];
        /* the ow range whose input column is inside the image */
        int64_t lo = 0, hi = OW;
        while (lo < OW && lo * p->stride[1] + dw < 0) lo++;
        while (hi > lo && (hi - 1) * p->stride[1] + dw >= W) hi--;
        for (int64_t b = 0; b < nb; b++) {
            const T *plane = x + ((n0 + b) * p->c + c0 + c) * H * W;
            T *dst = col + r * nb * L + b * L;
            for (int64_t oh = 0; oh < OH; oh++, dst += OW) {
                int64_t ih = oh * p->stride[0] + dh;
                if (ih < 0 || ih >= H) {
                    memset(dst, 0, (size_t)OW * sizeof(T));
                    continue;
                }
                const T *src = plane + ih * W + dw;
                for (int64_t ow = 0; ow < lo; ow++) dst[ow] = 0;
                if (p->stride[1] == 1) {
                    memcpy(dst + lo, src + lo, (size_t)(hi - lo) * sizeof(T));
                } else {
                    for (int64_t ow = lo; ow < hi; ow++) dst[ow] = src[ow * p->stride[1]];
                }
                for (int64_t ow = hi; ow < OW; ow++) dst[ow] = 0;
            }
        }
    }
}

/* gx[images n0.., channels c0..] += columns, parallel over channels so
 * that no two threads write the same plane. */
static void FN(col2im)(const mfi_conv2d *p, const T *col, int64_t n0, int64_t nb, int64_t c0, int64_t cg, T *gx)
{
    const int64_t H = p->h, W = p->w, OH = p->oh, OW = p->ow, L = OH * OW;
    const int64_t kk = (int64_t)p->kh * p->kw;
    #pragma omp parallel for if (cpu_par(cg * kk * nb * L)) schedule(static)
    for (int64_t c = 0; c < cg; c++) {
        for (int64_t k = 0; k < kk; k++) {
            int64_t r = c * kk + k, ki = k / p->kw, kj = k % p->kw;
            int64_t dh = ki * p->dilation[0] - p->padding[0], dw = kj * p->dilation[1] - p->padding[1];
            int64_t lo = 0, hi = OW;
            while (lo < OW && lo * p->stride[1] + dw < 0) lo++;
            while (hi > lo && (hi - 1) * p->stride[1] + dw >= W) hi--;
            for (int64_t b = 0; b < nb; b++) {
                T *plane = gx + ((n0 + b) * p->c + c0 + c) * H * W;
                const T *src = col + r * nb * L + b * L;
                for (int64_t oh = 0; oh < OH; oh++, src += OW) {
                    int64_t ih = oh * p->stride[0] + dh;
                    if (ih < 0 || ih >= H) continue;
                    T *dst = plane + ih * W + dw;
                    if (p->stride[1] == 1) {
                        for (int64_t ow = lo; ow < hi; ow++) dst[ow] += src[ow];
                    } else {
                        for (int64_t ow = lo; ow < hi; ow++) dst[ow * p->stride[1]] += src[ow];
                    }
                }
            }
        }
    }
}

/* tmp [ocg, nb*L] <-> y[images n0.., channels o0..o0+ocg] */
static void FN(gather_out)(const mfi_conv2d *p, const T *y, int64_t n0, int64_t nb, int64_t o0, int64_t ocg, T *tmp)
{
    const int64_t L = p->oh * p->ow;
    #pragma omp parallel for collapse(2) if (cpu_par(ocg * nb * L)) schedule(static)
    for (int64_t o = 0; o < ocg; o++)
        for (int64_t b = 0; b < nb; b++)
            memcpy(tmp + o * nb * L + b * L, y + ((n0 + b) * p->oc + o0 + o) * L, (size_t)L * sizeof(T));
}

static void FN(scatter_out)(const mfi_conv2d *p, const T *tmp, const T *bias, int64_t n0, int64_t nb, int64_t o0,
                            int64_t ocg, T *y)
{
    const int64_t L = p->oh * p->ow;
    #pragma omp parallel for collapse(2) if (cpu_par(ocg * nb * L)) schedule(static)
    for (int64_t o = 0; o < ocg; o++)
        for (int64_t b = 0; b < nb; b++) {
            const T *s = tmp + o * nb * L + b * L;
            T *d = y + ((n0 + b) * p->oc + o0 + o) * L;
            T bv = bias ? bias[o0 + o] : (T)0;
            for (int64_t i = 0; i < L; i++) d[i] = s[i] + bv;
        }
}

static mf_status FN(conv_fwd)(const mfi_conv2d *p, T *y, const T *x, const T *w, const T *bias)
{
    const int64_t cg = p->c / p->groups, ocg = p->oc / p->groups, K = cg * p->kh * p->kw;
    const int64_t L = p->oh * p->ow, nb = conv_chunk(p->n, K, L, ocg);
    const size_t colb = (size_t)(K * nb * L) * sizeof(T), tmpb = (size_t)(ocg * nb * L) * sizeof(T);
    T *col = mfi_alloc(colb), *tmp = mfi_alloc(tmpb);
    if (!col || !tmp) {
        mfi_free(col, colb);
        mfi_free(tmp, tmpb);
        MF_FAIL(MF_ERR_NOMEM, "conv2d: out of memory for a %zu-byte workspace", colb + tmpb);
    }
    for (int64_t n0 = 0; n0 < p->n; n0 += nb) {
        int64_t cnt = p->n - n0 < nb ? p->n - n0 : nb;
        for (int g = 0; g < p->groups; g++) {
            FN(im2col)(p, x, n0, cnt, g * cg, cg, col);
            GEMM_T(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)ocg, (int)(cnt * L), (int)K, 1,
                   w + g * ocg * K, (int)K, col, (int)(cnt * L), 0, tmp, (int)(cnt * L));
            FN(scatter_out)(p, tmp, bias, n0, cnt, g * ocg, ocg, y);
        }
    }
    mfi_free(col, colb);
    mfi_free(tmp, tmpb);
    return MF_OK;
}

static mf_status FN(conv_bwd_data)(const mfi_conv2d *p, T *gx, const T *gy, const T *w)
{
    const int64_t cg = p->c / p->groups, ocg = p->oc / p->groups, K = cg * p->kh * p->kw;
    const int64_t L = p->oh * p->ow, nb = conv_chunk(p->n, K, L, ocg);
    const size_t colb = (size_t)(K * nb * L) * sizeof(T), tmpb = (size_t)(ocg * nb * L) * sizeof(T);
    T *col = mfi_alloc(colb), *tmp = mfi_alloc(tmpb);
    if (!col || !tmp) {
        mfi_free(col, colb);
        mfi_free(tmp, tmpb);
        MF_FAIL(MF_ERR_NOMEM, "conv2d backward: out of memory for a %zu-byte workspace", colb + tmpb);
    }
    memset(gx, 0, (size_t)(p->n * p->c * p->h * p->w) * sizeof(T));
    for (int64_t n0 = 0; n0 < p->n; n0 += nb) {
        int64_t cnt = p->n - n0 < nb ? p->n - n0 : nb;
        for (int g = 0; g < p->groups; g++) {
            FN(gather_out)(p, gy, n0, cnt, g * ocg, ocg, tmp);
            GEMM_T(CblasRowMajor, CblasTrans, CblasNoTrans, (int)K, (int)(cnt * L), (int)ocg, 1,
                   w + g * ocg * K, (int)K, tmp, (int)(cnt * L), 0, col, (int)(cnt * L));
            FN(col2im)(p, col, n0, cnt, g * cg, cg, gx);
        }
    }
    mfi_free(col, colb);
    mfi_free(tmp, tmpb);
    return MF_OK;
}

static mf_status FN(conv_bwd_filter)(const mfi_conv2d *p, T *gw, const T *gy, const T *x)
{
    const int64_t cg = p->c / p->groups, ocg = p->oc / p->groups, K = cg * p->kh * p->kw;
    const int64_t L = p->oh * p->ow, nb = conv_chunk(p->n, K, L, ocg);
    const size_t colb = (size_t)(K * nb * L) * sizeof(T), tmpb = (size_t)(ocg * nb * L) * sizeof(T);
    T *col = mfi_alloc(colb), *tmp = mfi_alloc(tmpb);
    if (!col || !tmp) {
        mfi_free(col, colb);
        mfi_free(tmp, tmpb);
        MF_FAIL(MF_ERR_NOMEM, "conv2d backward: out of memory for a %zu-byte workspace", colb + tmpb);
    }
    if (p->n == 0) memset(gw, 0, (size_t)(p->oc * K) * sizeof(T));
    for (int64_t n0 = 0; n0 < p->n; n0 += nb) {
        int64_t cnt = p->n - n0 < nb ? p->n - n0 : nb;
        for (int g = 0; g < p->groups; g++) {
            FN(im2col)(p, x, n0, cnt, g * cg, cg, col);
            FN(gather_out)(p, gy, n0, cnt, g * ocg, ocg, tmp);
            GEMM_T(CblasRowMajor, CblasNoTrans, CblasTrans, (int)ocg, (int)K, (int)(cnt * L), 1, tmp,
                   (int)(cnt * L), col, (int)(cnt * L), n0 == 0 ? 0 : 1, gw + g * ocg * K, (int)K);
        }
    }
    mfi_free(col, colb);
    mfi_free(tmp, tmpb);
    return MF_OK;
}

#undef FN
#undef CAT
#undef CAT_
