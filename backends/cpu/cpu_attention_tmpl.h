/*
 * backends/cpu/cpu_attention_tmpl.h - fused causal attention for one
 * element type (T, SFX, EXP, LOG, SUM, TILE_FN, GEMM), included by
 * cpu_attention.c.
 *
 * Forward, per (batch, head) and tile of QR query rows: the key tiles of
 * KC keys up to the diagonal are visited once. A tile's scores
 * S = scale Q K^T are one small GEMM into a QR x KC scratch; each row
 * keeps a running maximum m and a running sum l of exp(s - m), and a
 * larger maximum rescales the unnormalised output rows already there
 * (the online softmax of flash attention) before the second GEMM adds
 * P V. The output row is divided by l at the end; lse = m + log(l).
 *
 * Backward, per (batch, head): delta_i = dO_i . O_i, then for every
 * tile pair the weights are recomputed from lse,
 *   P = exp(scale Q K^T - lse),  dS = scale P (dO V^T - delta),
 *   dV += P^T dO,  dQ += dS K,  dK += dS^T Q,
 * five GEMMs per tile pair. One thread owns a whole head and BLAS runs
 * single-threaded inside the parallel region, so the sums run in one
 * fixed order whatever the thread count.
 */
#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)
#define FN(name) CAT(name, SFX)

static inline T FN(dot)(const T *a, const T *b, int64_t n)
{
    T s = 0;
    #pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* view element (b, h, t, 0), and a view's row stride as BLAS's ld */
#define AT(v, b, h, t) ((T *)(v)->data + (b) * (v)->stride[0] + (h) * (v)->stride[1] + (t) * (v)->stride[2])
#define LD(v) ((int)(v)->stride[2])

/* scores of rows i0.. (ni) against keys j0.. (nc), scaled, masked above
 * the diagonal: s[r * KC + c] */
static void FN(scores)(T *s, const T *qi, int ldq, const T *kj, int ldk, int64_t ni, int64_t nc, int64_t D, T scale,
                       int64_t i0, int64_t j0)
{
    GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)ni, (int)nc, (int)D, scale, qi, ldq, kj, ldk, 0, s, KC);
    if (j0 + nc > i0 + 1)   /* a tile on the diagonal */
        for (int64_t r = 0; r < ni; r++)
            for (int64_t c = i0 + r - j0 + 1; c < nc; c++)
                if (c >= 0) s[r * KC + c] = -INFINITY;
}

/* The online softmax over one score tile (rows 0..ni, columns 0..nc of
 * s): each row's running maximum m and sum l move on, s becomes
 * exp(s - m), and alpha says how much the output rows already there
 * shrink (0 on a row's first tile, 1 when its maximum stays). */
TILE_FN static void FN(tile_softmax)(T *restrict s, int64_t ni, int64_t nc, T *restrict m, T *restrict l,
                                     T *restrict alpha)
{
    for (int64_t r = 0; r < ni; r++) {
        T *sr = s + r * KC, mx = m[r];
        #pragma omp simd reduction(max : mx)
        for (int64_t c = 0; c < nc; c++) mx = sr[c] > mx ? sr[c] : mx;
        for (int64_t c = 0; c < nc; c++) sr[c] = EXP(sr[c] - mx);   /* exp(-inf) = 0 above the diagonal */
        alpha[r] = EXP(m[r] - mx);                                   /* exp(-inf) = 0 on the first tile */
        l[r] = l[r] * alpha[r] + SUM(sr, nc);
        m[r] = mx;
    }
}

/* A backward tile: P = exp(s - lse) into s, dS = scale P (dP - delta)
 * into dp. */
TILE_FN static void FN(tile_ds)(T *restrict s, T *restrict dp, int64_t ni, int64_t nc, const T *restrict lse,
                                const T *restrict delta, T scale)
{
    for (int64_t r = 0; r < ni; r++) {
        T *sr = s + r * KC, *dr = dp + r * KC, li = lse[r], di = delta[r];
        for (int64_t c = 0; c < nc; c++) {
            sr[c] = EXP(sr[c] - li);
            dr[c] = sr[c] * (dr[c] - di) * scale;
        }
    }
}

static void FN(attn_fwd)(const mfi_attn *p, mfi_cv *out, mfi_cv *lse, mfi_cv *q, mfi_cv *k, mfi_cv *v)
{
    const int64_t B = p->b, H = p->h, N = p->t, D = p->d, tiles = (N + QR - 1) / QR;
    const T scale = (T)p->scale;
    #pragma omp parallel for if (cpu_par(B * H * N * N * D / 2)) schedule(dynamic, 1)
    for (int64_t w = 0; w < B * H * tiles; w++) {
        const int64_t b = w / (H * tiles), h = w / tiles % H, i0 = (tiles - 1 - w % tiles) * QR;   /* long tiles first */
        const int64_t ni = N - i0 < QR ? N - i0 : QR;
        T s[QR * KC], m[QR], l[QR], alpha[QR];
        T *o0 = AT(out, b, h, i0);
        for (int64_t r = 0; r < ni; r++) {
            m[r] = -INFINITY;
            l[r] = 0;
            T *o = o0 + r * out->stride[2];
            for (int64_t d = 0; d < D; d++) o[d] = 0;
        }
        for (int64_t j0 = 0; j0 < i0 + ni; j0 += KC) {
            const int64_t nc = i0 + ni - j0 < KC ? i0 + ni - j0 : KC;
            FN(scores)(s, AT(q, b, h, i0), LD(q), AT(k, b, h, j0), LD(k), ni, nc, D, scale, i0, j0);
            FN(tile_softmax)(s, ni, nc, m, l, alpha);
            for (int64_t r = 0; r < ni; r++) {
                T *o = o0 + r * out->stride[2];
                if (alpha[r] != 1)
                    for (int64_t d = 0; d < D; d++) o[d] *= alpha[r];
            }
            GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)ni, (int)D, (int)nc, 1, s, KC, AT(v, b, h, j0), LD(v),
                 1, o0, LD(out));
        }
        T *ls = (T *)lse->data + (b * H + h) * N + i0;
        for (int64_t r = 0; r < ni; r++) {
            T inv = (T)1 / l[r], *o = o0 + r * out->stride[2];
            for (int64_t d = 0; d < D; d++) o[d] *= inv;
            ls[r] = m[r] + LOG(l[r]);
        }
    }
}

static void FN(attn_bwd)(const mfi_attn *p, mfi_cv *gq, mfi_cv *gk, mfi_cv *gv, mfi_cv *gout, mfi_cv *q, mfi_cv *k,
                         mfi_cv *v, mfi_cv *out, mfi_cv *lse, T *delta_all)
{
    const int64_t B = p->b, H = p->h, N = p->t, D = p->d;
    const T scale = (T)p->scale;
    #pragma omp parallel for if (cpu_par(B * H * N * N * D)) schedule(dynamic, 1)
    for (int64_t w = 0; w < B * H; w++) {
        const int64_t b = w / H, h = w % H, base = (b * H + h) * N;
        T *delta = delta_all + base, s[QR * KC], dp[QR * KC];
        const T *ls = (const T *)lse->data + base;
        for (int64_t i = 0; i < N; i++) {
            delta[i] = FN(dot)(AT(gout, b, h, i), AT(out, b, h, i), D);
            T *dq = AT(gq, b, h, i), *dk = AT(gk, b, h, i), *dv = AT(gv, b, h, i);
            for (int64_t d = 0; d < D; d++) dq[d] = dk[d] = dv[d] = 0;
        }
        for (int64_t i0 = 0; i0 < N; i0 += QR) {
            const int64_t ni = N - i0 < QR ? N - i0 : QR;
            const T *qi = AT(q, b, h, i0), *goi = AT(gout, b, h, i0);
            for (int64_t j0 = 0; j0 < i0 + ni; j0 += KC) {
                const int64_t nc = i0 + ni - j0 < KC ? i0 + ni - j0 : KC;
                const T *kj = AT(k, b, h, j0), *vj = AT(v, b, h, j0);
                FN(scores)(s, qi, LD(q), kj, LD(k), ni, nc, D, scale, i0, j0);
                GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)ni, (int)nc, (int)D, 1, goi, LD(gout), vj, LD(v), 0,
                     dp, KC);
                FN(tile_ds)(s, dp, ni, nc, ls + i0, delta + i0, scale);
                GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, (int)nc, (int)D, (int)ni, 1, s, KC, goi, LD(gout), 1,
                     AT(gv, b, h, j0), LD(gv));
                GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)ni, (int)D, (int)nc, 1, dp, KC, kj, LD(k), 1,
                     AT(gq, b, h, i0), LD(gq));
                GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, (int)nc, (int)D, (int)ni, 1, dp, KC, qi, LD(q), 1,
                     AT(gk, b, h, j0), LD(gk));
            }
        }
    }
}

#undef AT
#undef LD
#undef FN
#undef CAT
#undef CAT_
