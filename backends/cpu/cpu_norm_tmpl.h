/*
 * backends/cpu/cpu_norm_tmpl.h - batch norm and layer norm for one
 * element type (T, SFX), included by cpu_norm.c.
 *
 * Batch norm over x viewed as [n, c, s]: statistics per channel over
 * n*s values (biased variance to normalise, unbiased for the running
 * variance, as PyTorch). Backward in training mode:
 *   gx = w*invstd/M * (M*gy - sum(gy) - xhat*sum(gy*xhat)),  M = n*s.
 * Layer norm over [rows, cols]: statistics per row, a row's sums in double
 * in 8 partial sums (CPU_SUM8), each row compiled also for AVX2/AVX-512.
 */
#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)
#define FN(name) CAT(name, SFX)

static void FN(bn_fwd)(const mfi_bnorm *p, T *y, const T *x, const T *w, const T *b, T *rm, T *rv, T *sm, T *si)
{
    const int64_t n = p->n, c = p->c, s = p->s, M = n * s;
    #pragma omp parallel for if (cpu_par(n * c * s)) schedule(static)
    for (int64_t ch = 0; ch < c; ch++) {
        double mean, invstd;
        if (p->training) {
            double sum = 0, sq = 0;
            for (int64_t i = 0; i < n; i++) {
                const T *a = x + (i * c + ch) * s;
                for (int64_t j = 0; j < s; j++) sum += a[j];
            }
            mean = M ? sum / (double)M : 0;
            for (int64_t i = 0; i < n; i++) {
                const T *a = x + (i * c + ch) * s;
                for (int64_t j = 0; j < s; j++) {
                    double d = a[j] - mean;
                    sq += d * d;
                }
            }
            double var = M ? sq / (double)M : 0;
            invstd = 1.0 / sqrt(var + p->eps);
            if (rm) rm[ch] = (T)((1 - p->momentum) * rm[ch] + p->momentum * mean);
            if (rv) rv[ch] = (T)((1 - p->momentum) * rv[ch] + p->momentum * (M > 1 ? sq / (double)(M - 1) : var));
        } else {
            mean = rm[ch];
            invstd = 1.0 / sqrt((double)rv[ch] + p->eps);
        }
        sm[ch] = (T)mean;
        si[ch] = (T)invstd;
        double scale = invstd * (w ? w[ch] : 1), shift = (b ? b[ch] : 0) - mean * scale;
        for (int64_t i = 0; i < n; i++) {
            const T *a = x + (i * c + ch) * s;
            T *o = y + (i * c + ch) * s;
            for (int64_t j = 0; j < s; j++) o[j] = (T)(a[j] * scale + shift);
        }
    }
}

static void FN(bn_bwd)(const mfi_bnorm *p, T *gx, T *gw, T *gb, const T *gy, const T *x, const T *w,
                       const T *sm, const T *si)
{
    const int64_t n = p->n, c = p->c, s = p->s, M = n * s;
    #pragma omp parallel for if (cpu_par(n * c * s)) schedule(static)
    for (int64_t ch = 0; ch < c; ch++) {
        double mean = sm[ch], invstd = si[ch], sg = 0, sgx = 0;
        for (int64_t i = 0; i < n; i++) {
            const T *g = gy + (i * c + ch) * s, *a = x + (i * c + ch) * s;
            for (int64_t j = 0; j < s; j++) {
                sg += g[j];
                sgx += g[j] * (a[j] - mean);
            }
        }
        sgx *= invstd;   /* sum(gy * xhat) */
        if (gw) gw[ch] = (T)sgx;
        if (gb) gb[ch] = (T)sg;
        if (!gx) continue;
        double wv = w ? w[ch] : 1;
        for (int64_t i = 0; i < n; i++) {
            const T *g = gy + (i * c + ch) * s, *a = x + (i * c + ch) * s;
            T *o = gx + (i * c + ch) * s;
            if (p->training) {
                double k = wv * invstd / (double)M;
                for (int64_t j = 0; j < s; j++) {
                    double xh = (a[j] - mean) * invstd;
                    o[j] = (T)(k * ((double)M * g[j] - sg - xh * sgx));
                }
            } else {
                for (int64_t j = 0; j < s; j++) o[j] = (T)(g[j] * wv * invstd);
            }
        }
    }
}

/* One row of layer norm: y = (x - mean) rstd w + b. */
CPU_CLONES static void FN(ln_row_fwd)(int64_t cols, double eps, T *restrict o, const T *restrict a,
                                      const T *restrict w, const T *restrict b, T *mean, T *rstd)
{
    double sum, sq;
    CPU_SUM8(sum, cols, j, (double)a[j]);
    double mu = cols ? sum / (double)cols : 0;
    CPU_SUM8(sq, cols, j, ((double)a[j] - mu) * ((double)a[j] - mu));
    double rs = 1.0 / sqrt((cols ? sq / (double)cols : 0) + eps);
    *mean = (T)mu;
    *rstd = (T)rs;
    if (w && b)
        for (int64_t j = 0; j < cols; j++) o[j] = (T)(((double)a[j] - mu) * rs * w[j] + b[j]);
    else
        for (int64_t j = 0; j < cols; j++) o[j] = (T)(((double)a[j] - mu) * rs * (w ? w[j] : 1) + (b ? b[j] : 0));
}

static void FN(ln_fwd)(int64_t rows, int64_t cols, double eps, T *y, const T *x, const T *w, const T *b, T *mean,
                       T *rstd)
{
    #pragma omp parallel for if (cpu_par(rows * cols)) schedule(static)
    for (int64_t r = 0; r < rows; r++)
        FN(ln_row_fwd)(cols, eps, y + r * cols, x + r * cols, w, b, mean + r, rstd + r);
}

/* One row of layer norm's input gradient:
 *   gx = rstd/cols (cols gy w - sum(gy w) - xhat sum(gy w xhat)). */
CPU_CLONES static void FN(ln_row_gx)(int64_t cols, T *restrict o, const T *restrict g, const T *restrict a,
                                     const T *restrict w, double mu, double rs)
{
    double s1, s2;
    if (w) {
        CPU_SUM8(s1, cols, j, (double)g[j] * w[j]);
        CPU_SUM8(s2, cols, j, (double)g[j] * w[j] * (((double)a[j] - mu) * rs));
        for (int64_t j = 0; j < cols; j++)
            o[j] = (T)(rs / (double)cols * ((double)cols * ((double)g[j] * w[j]) - s1 - ((double)a[j] - mu) * rs * s2));
    } else {
        CPU_SUM8(s1, cols, j, (double)g[j]);
        CPU_SUM8(s2, cols, j, (double)g[j] * (((double)a[j] - mu) * rs));
        for (int64_t j = 0; j < cols; j++)
            o[j] = (T)(rs / (double)cols * ((double)cols * g[j] - s1 - ((double)a[j] - mu) * rs * s2));
    }
}

static void FN(ln_bwd)(int64_t rows, int64_t cols, T *gx, T *gw, T *gb, const T *gy, const T *x, const T *w,
                       const T *mean, const T *rstd)
{
    if (gx) {
        #pragma omp parallel for if (cpu_par(rows * cols)) schedule(static)
        for (int64_t r = 0; r < rows; r++)
            FN(ln_row_gx)(cols, gx + r * cols, gy + r * cols, x + r * cols, w, mean[r], rstd[r]);
    }
    if (gw || gb) {
        /* per column, the sums over rows in row order; a block of columns
         * at a time, walked row by row, so that the reads are contiguous */
        enum { LN_COLS = 64 };
        const int64_t blocks = (cols + LN_COLS - 1) / LN_COLS;
        #pragma omp parallel for if (cpu_par(rows * cols)) schedule(static)
        for (int64_t bk = 0; bk < blocks; bk++) {
            const int64_t j0 = bk * LN_COLS, nj = cols - j0 < LN_COLS ? cols - j0 : LN_COLS;
            double sw[LN_COLS] = {0}, sb[LN_COLS] = {0};
            for (int64_t r = 0; r < rows; r++) {
                const T *g = gy + r * cols + j0, *a = x + r * cols + j0, mu = mean[r], rs = rstd[r];
                for (int64_t j = 0; j < nj; j++) {
                    double gj = g[j];
                    sw[j] += gj * (a[j] - mu) * rs;
                    sb[j] += gj;
                }
            }
            for (int64_t j = 0; j < nj; j++) {
                if (gw) gw[j0 + j] = (T)sw[j];
                if (gb) gb[j0 + j] = (T)sb[j];
            }
        }
    }
}

#undef FN
#undef CAT
#undef CAT_
