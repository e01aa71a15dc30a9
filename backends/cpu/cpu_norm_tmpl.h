/*
 * backends/cpu/cpu_norm_tmpl.h - batch norm and layer norm for one
 * element type (T, SFX), included by cpu_norm.c.
 *
 * Batch norm over x viewed as [n, c, s]: statistics per channel over
 * n*s values (biased variance to normalise, unbiased for the running
 * variance, as PyTorch). Backward in training mode:
 *   gx = w*invstd/M * (M*gy - sum(gy) - xhat*sum(gy*xhat)),  M = n*s.
 * Layer norm over [rows, cols]: statistics per row. Sums in double.
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

static void FN(ln_fwd)(int64_t rows, int64_t cols, double eps, T *y, const T *x, const T *w, const T *b, T *mean,
                       T *rstd)
{
    #pragma omp parallel for if (cpu_par(rows * cols)) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const T *a = x + r * cols;
        double sum = 0, sq = 0;
        for (int64_t j = 0; j < cols; j++) sum += a[j];
        double mu = cols ? sum / (double)cols : 0;
        for (int64_t j = 0; j < cols; j++) sq += (a[j] - mu) * (a[j] - mu);
        double rs = 1.0 / sqrt((cols ? sq / (double)cols : 0) + eps);
        mean[r] = (T)mu;
        rstd[r] = (T)rs;
        T *o = y + r * cols;
        for (int64_t j = 0; j < cols; j++)
            o[j] = (T)((a[j] - mu) * rs * (w ? w[j] : 1) + (b ? b[j] : 0));
    }
}

static void FN(ln_bwd)(int64_t rows, int64_t cols, T *gx, T *gw, T *gb, const T *gy, const T *x, const T *w,
                       const T *mean, const T *rstd)
{
    if (gx) {
        #pragma omp parallel for if (cpu_par(rows * cols)) schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            const T *g = gy + r * cols, *a = x + r * cols;
            double mu = mean[r], rs = rstd[r], s1 = 0, s2 = 0;
            for (int64_t j = 0; j < cols; j++) {
                double gw_ = g[j] * (w ? w[j] : 1);
                s1 += gw_;
                s2 += gw_ * (a[j] - mu) * rs;
            }
            T *o = gx + r * cols;
            for (int64_t j = 0; j < cols; j++) {
                double gw_ = g[j] * (w ? w[j] : 1), xh = (a[j] - mu) * rs;
                o[j] = (T)(rs / (double)cols * ((double)cols * gw_ - s1 - xh * s2));
            }
        }
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
