/*
 * backends/cpu/cpu_attention_tmpl.h - fused causal attention for one
 * element type (T, SFX), included by cpu_attention.c.
 *
 * Forward, per (batch, head) and tile of QR query rows: the key tiles of
 * KC keys up to the diagonal are visited once, and each row keeps a
 * running maximum m, a running sum l of exp(s - m) and the unnormalised
 * output; a larger maximum rescales what is there (the online softmax of
 * flash attention). The scores of one tile are the only O(t) scratch.
 * The output row is divided by l at the end; lse = m + log(l).
 *
 * Backward, per (batch, head): delta_i = dO_i . O_i, then for every
 * query row i and key j <= i the weight is recomputed from lse,
 *   p = exp(scale q_i.k_j - lse_i),  ds = p (dO_i.v_j - delta_i),
 *   dV_j += p dO_i,  dQ_i += scale ds k_j,  dK_j += scale ds q_i,
 * in the same tiles. One thread owns a whole head, so the sums run in
 * one fixed order whatever the thread count.
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

static inline void FN(axpy)(T *y, T a, const T *x, int64_t n)
{
    #pragma omp simd
    for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}

/* view element (b, h, t, 0) */
#define AT(v, b, h, t) ((T *)(v)->data + (b) * (v)->stride[0] + (h) * (v)->stride[1] + (t) * (v)->stride[2])

static void FN(attn_fwd)(const mfi_attn *p, mfi_cv *out, mfi_cv *lse, mfi_cv *q, mfi_cv *k, mfi_cv *v)
{
    const int64_t B = p->b, H = p->h, N = p->t, D = p->d, tiles = (N + QR - 1) / QR;
    const T scale = (T)p->scale;
    #pragma omp parallel for if (cpu_par(B * H * N * N * D / 2)) schedule(dynamic, 1)
    for (int64_t w = 0; w < B * H * tiles; w++) {
        const int64_t b = w / (H * tiles), h = w / tiles % H, i0 = (tiles - 1 - w % tiles) * QR;   /* long tiles first */
        const int64_t ni = N - i0 < QR ? N - i0 : QR;
        T s[KC], m[QR], l[QR];
        for (int64_t r = 0; r < ni; r++) {
            m[r] = -INFINITY;
            l[r] = 0;
            T *o = AT(out, b, h, i0 + r);
            for (int64_t d = 0; d < D; d++) o[d] = 0;
        }
        for (int64_t j0 = 0; j0 < i0 + ni; j0 += KC) {
            for (int64_t r = 0; r < ni; r++) {
                const int64_t i = i0 + r, nc = i - j0 + 1 < KC ? i - j0 + 1 : KC;   /* keys j0 .. min(i, j0+KC-1) */
                if (nc <= 0) continue;
                const T *qi = AT(q, b, h, i);
                T mx = m[r];
                for (int64_t c = 0; c < nc; c++) {
                    s[c] = scale * FN(dot)(qi, AT(k, b, h, j0 + c), D);
                    if (s[c] > mx) mx = s[c];
                }
                T alpha = EXP(m[r] - mx), sum = 0;   /* exp(-inf) = 0 on the first tile */
                T *o = AT(out, b, h, i);
                for (int64_t d = 0; d < D; d++) o[d] *= alpha;
                for (int64_t c = 0; c < nc; c++) {
                    T e = EXP(s[c] - mx);
                    sum += e;
                    FN(axpy)(o, e, AT(v, b, h, j0 + c), D);
                }
                l[r] = l[r] * alpha + sum;
                m[r] = mx;
            }
        }
        T *ls = (T *)lse->data + (b * H + h) * N + i0;
        for (int64_t r = 0; r < ni; r++) {
            T inv = (T)1 / l[r], *o = AT(out, b, h, i0 + r);
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
        T *delta = delta_all + base;
        const T *ls = (const T *)lse->data + base;
        for (int64_t i = 0; i < N; i++) {
            delta[i] = FN(dot)(AT(gout, b, h, i), AT(out, b, h, i), D);
            T *dq = AT(gq, b, h, i), *dk = AT(gk, b, h, i), *dv = AT(gv, b, h, i);
            for (int64_t d = 0; d < D; d++) dq[d] = dk[d] = dv[d] = 0;
        }
        for (int64_t i0 = 0; i0 < N; i0 += QR) {
            const int64_t ni = N - i0 < QR ? N - i0 : QR;
            for (int64_t j0 = 0; j0 < i0 + ni; j0 += KC)
                for (int64_t r = 0; r < ni; r++) {
                    const int64_t i = i0 + r, nc = i - j0 + 1 < KC ? i - j0 + 1 : KC;
                    const T *qi = AT(q, b, h, i), *goi = AT(gout, b, h, i);
                    T *dqi = AT(gq, b, h, i);
                    for (int64_t c = 0; c < nc; c++) {
                        const int64_t j = j0 + c;
                        const T *kj = AT(k, b, h, j), *vj = AT(v, b, h, j);
                        T pw = EXP(scale * FN(dot)(qi, kj, D) - ls[i]);
                        T ds = pw * (FN(dot)(goi, vj, D) - delta[i]) * scale;
                        FN(axpy)(AT(gv, b, h, j), pw, goi, D);
                        FN(axpy)(dqi, ds, kj, D);
                        FN(axpy)(AT(gk, b, h, j), ds, qi, D);
                    }
                }
        }
    }
}

#undef AT
#undef FN
#undef CAT
#undef CAT_
