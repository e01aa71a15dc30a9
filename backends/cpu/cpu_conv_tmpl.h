/*
 * backends/cpu/cpu_conv_tmpl.h - conv2d kernels for one element type.
 *
 * Included by cpu_conv.c with T (float or double), SFX (f32/f64) and
 * GEMM_T (cblas_sgemm or cblas_dgemm) defined.
 *
 * Algorithm: im2col + GEMM, one image at a time, images spread over the
 * OpenMP threads. Each thread owns a column buffer of one image,
 * [C/g*KH*KW, OH*OW] (627 KB for lenet's conv2), which stays in cache
 * between im2col writing it and GEMM reading it; GEMM writes straight
 * into the image's output rows, and BLAS runs single-threaded inside
 * the parallel region (OpenMP build of OpenBLAS). With fewer images than
 * threads, images run in turn and BLAS uses the threads instead.
 * Per image: forward W[O,K] x col[K,L] (2*O*K*L flops); backward-data
 * W^T x gy[O,L] then col2im; backward-filter gy x col^T accumulated in a
 * per-thread buffer, summed in thread order at the end (fixed bits for a
 * fixed thread count).
 */
#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)
#define FN(name) CAT(name, SFX)

/* Columns of image n, channels [c0, c0+cg): col [cg*KH*KW, OH*OW]. */
static void FN(im2col)(const mfi_conv2d *p, const T *x, int64_t n, int64_t c0, int64_t cg, T *col)
{
    const int64_t H = p->h, W = p->w, OH = p->oh, OW = p->ow, L = OH * OW;
    const int64_t rows = cg * p->kh * p->kw;
    for (int64_t r = 0; r < rows; r++) {
        int64_t c = r / (p->kh * p->kw), ki = (r / p->kw) % p->kh, kj = r % p->kw;
        int64_t dh = ki * p->dilation[0] - p->padding[0], dw = kj * p->dilation[1] - p->padding[1];
        /* the ow range whose input column is inside the image */
        int64_t lo = 0, hi = OW;
        while (lo < OW && lo * p->stride[1] + dw < 0) lo++;
        while (hi > lo && (hi - 1) * p->stride[1] + dw >= W) hi--;
        const T *plane = x + (n * p->c + c0 + c) * H * W;
        T *dst = col + r * L;
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

/* gx[n, c0..c0+cg) += columns (the adjoint of im2col). */
static void FN(col2im)(const mfi_conv2d *p, const T *col, int64_t n, int64_t c0, int64_t cg, T *gx)
{
    const int64_t H = p->h, W = p->w, OH = p->oh, OW = p->ow, L = OH * OW;
    const int64_t kk = (int64_t)p->kh * p->kw;
    for (int64_t c = 0; c < cg; c++) {
        T *plane = gx + (n * p->c + c0 + c) * H * W;
        for (int64_t k = 0; k < kk; k++) {
            int64_t ki = k / p->kw, kj = k % p->kw;
            int64_t dh = ki * p->dilation[0] - p->padding[0], dw = kj * p->dilation[1] - p->padding[1];
            int64_t lo = 0, hi = OW;
            while (lo < OW && lo * p->stride[1] + dw < 0) lo++;
            while (hi > lo && (hi - 1) * p->stride[1] + dw >= W) hi--;
            const T *src = col + (c * kk + k) * L;
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

/* Per-thread scratch: `per` elements for each of nt threads. */
static T *FN(scratch)(int nt, int64_t per, size_t *bytes)
{
    *bytes = (size_t)nt * (size_t)per * sizeof(T);
    return mfi_alloc(*bytes);
}

static mf_status FN(conv_fwd)(const mfi_conv2d *p, T *y, const T *x, const T *w, const T *bias)
{
    const conv_dims d = conv_dims_of(p);
    size_t bytes;
    T *cols = FN(scratch)(d.nt, d.K * d.L, &bytes);
    if (!cols) MF_FAIL(MF_ERR_NOMEM, "conv2d: out of memory for a %zu-byte workspace", bytes);
    #pragma omp parallel for num_threads(d.nt) schedule(static) if (d.nt > 1)
    for (int64_t n = 0; n < p->n; n++) {
        T *col = cols + (int64_t)conv_thread() * d.K * d.L;
        for (int g = 0; g < p->groups; g++) {
            FN(im2col)(p, x, n, g * d.cg, d.cg, col);
            T *out = y + (n * p->oc + g * d.ocg) * d.L;
            GEMM_T(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)d.ocg, (int)d.L, (int)d.K, 1, w + g * d.ocg * d.K, (int)d.K,
                   col, (int)d.L, 0, out, (int)d.L);
            if (bias)
                for (int64_t o = 0; o < d.ocg; o++) {
                    T b = bias[g * d.ocg + o], *row = out + o * d.L;
                    for (int64_t i = 0; i < d.L; i++) row[i] += b;
                }
        }
    }
    mfi_free(cols, bytes);
    return MF_OK;
}

static mf_status FN(conv_bwd_data)(const mfi_conv2d *p, T *gx, const T *gy, const T *w)
{
    const conv_dims d = conv_dims_of(p);
    size_t bytes;
    T *cols = FN(scratch)(d.nt, d.K * d.L, &bytes);
    if (!cols) MF_FAIL(MF_ERR_NOMEM, "conv2d backward: out of memory for a %zu-byte workspace", bytes);
    #pragma omp parallel for num_threads(d.nt) schedule(static) if (d.nt > 1)
    for (int64_t n = 0; n < p->n; n++) {
        T *col = cols + (int64_t)conv_thread() * d.K * d.L;
        memset(gx + n * p->c * p->h * p->w, 0, (size_t)(p->c * p->h * p->w) * sizeof(T));
        for (int g = 0; g < p->groups; g++) {
            GEMM_T(CblasRowMajor, CblasTrans, CblasNoTrans, (int)d.K, (int)d.L, (int)d.ocg, 1, w + g * d.ocg * d.K, (int)d.K,
                   gy + (n * p->oc + g * d.ocg) * d.L, (int)d.L, 0, col, (int)d.L);
            FN(col2im)(p, col, n, g * d.cg, d.cg, gx);
        }
    }
    mfi_free(cols, bytes);
    return MF_OK;
}

static mf_status FN(conv_bwd_filter)(const mfi_conv2d *p, T *gw, const T *gy, const T *x)
{
    const conv_dims d = conv_dims_of(p);
    const int64_t wsz = p->oc * d.K;
    size_t bytes, pbytes;
    T *cols = FN(scratch)(d.nt, d.K * d.L, &bytes);
    /* thread 0 accumulates into gw itself, the others into partials */
    T *part = d.nt > 1 ? FN(scratch)(d.nt - 1, wsz, &pbytes) : NULL;
    if (!cols || (d.nt > 1 && !part)) {
        mfi_free(cols, bytes);
        if (part) mfi_free(part, pbytes);
        MF_FAIL(MF_ERR_NOMEM, "conv2d backward: out of memory for a workspace");
    }
    #pragma omp parallel num_threads(d.nt) if (d.nt > 1)
    {
        int t = conv_thread();
        T *acc = t == 0 ? gw : part + (int64_t)(t - 1) * wsz;
        T *col = cols + (int64_t)t * d.K * d.L;
        memset(acc, 0, (size_t)wsz * sizeof(T));
        #pragma omp for schedule(static)
        for (int64_t n = 0; n < p->n; n++) {
            for (int g = 0; g < p->groups; g++) {
                FN(im2col)(p, x, n, g * d.cg, d.cg, col);
                GEMM_T(CblasRowMajor, CblasNoTrans, CblasTrans, (int)d.ocg, (int)d.K, (int)d.L, 1,
                       gy + (n * p->oc + g * d.ocg) * d.L, (int)d.L, col, (int)d.L, 1, acc + g * d.ocg * d.K, (int)d.K);
            }
        }
    }
    for (int t = 1; t < d.nt; t++) {
        const T *src = part + (int64_t)(t - 1) * wsz;
        for (int64_t i = 0; i < wsz; i++) gw[i] += src[i];
    }
    mfi_free(cols, bytes);
    if (part) mfi_free(part, pbytes);
    return MF_OK;
}

#undef FN
#undef CAT
#undef CAT_
