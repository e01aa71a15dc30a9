/*
 * tests/cuda_parity.c - the parity harness of tests/test_cuda.c (see
 * tests/cuda_parity.h for the rule it applies).
 */
#include <stdlib.h>
#include "tests/cuda_parity.h"

#define RTOL_F32 1e-4
#define ATOL_F32 3e-6
#define RTOL_F64 1e-10
#define ATOL_F64 1e-12

bool parity_self_check;                 /* no GPU: CPU f32 against CPU f64 */
mf_device_type parity_dut = MF_DEV_CUDA;   /* the device under test */
double parity_worst;                    /* this kernel's worst error, as a share of the tolerance */
int parity_ncases;
int64_t parity_dut_calls[64];           /* kernel calls made by the device under test's runs */

/* Fails unless a (under test) and b (the reference) agree elementwise
 * within rtol |b| + atol (exact: the same bits); without a GPU, within
 * half of that. */
static void expect_close(const char *what, mf_tensor *a, mf_tensor *b, mf_dtype dt, bool exact)
{
    ck_assert_msg(a && b, "%s: missing tensor: %s", what, mf_last_error());
    int64_t n = mf_tensor_numel(b);
    ck_assert_msg(mf_tensor_numel(a) == n, "%s: %lld vs %lld elements", what, (long long)mf_tensor_numel(a),
                  (long long)n);
    double *x = malloc((size_t)(n + 1) * sizeof *x), *y = malloc((size_t)(n + 1) * sizeof *y);
    ck_assert(x && y);
    ck_assert_ok(mf_tensor_copy_out(a, MF_F64, x, n));
    ck_assert_ok(mf_tensor_copy_out(b, MF_F64, y, n));
    double rtol = dt == MF_F64 ? RTOL_F64 : RTOL_F32, atol = dt == MF_F64 ? ATOL_F64 : ATOL_F32;
    double limit = parity_self_check ? 0.5 : 1.0;
    for (int64_t i = 0; i < n; i++) {
        if (x[i] == y[i] || (isnan(x[i]) && isnan(y[i]))) continue;
        double r = exact ? INFINITY : fabs(x[i] - y[i]) / (rtol * fabs(y[i]) + atol);
        if (!(r <= limit)) {
            double xi = x[i], yi = y[i];
            free(x);
            free(y);
            ck_abort_msg("%s[%lld]: %s %.9g vs %s %.9g (%s)", what, (long long)i, parity_self_check ? "cpu f32" : "cuda", xi,
                         parity_self_check ? "cpu f64" : "cpu", yi, exact ? "must be equal" : "over the tolerance");
        }
        if (r > parity_worst) parity_worst = r;
    }
    free(x);
    free(y);
}

/* A fixed weighting for the backward pass: 0.5 + 0.25*sin(i) */
static mf_tensor *weights_like(mf_tensor *y)
{
    int64_t n = mf_tensor_numel(y);
    double *v = malloc((size_t)(n + 1) * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = 0.5 + 0.25 * sin((double)i);
    mf_tensor *w = mf_empty(mf_tensor_dtype(y), mf_tensor_ndim(y), mf_tensor_shape(y));
    if (w) mf_tensor_copy_in(w, MF_F64, v, n);
    free(v);
    return w;
}

/* One run on device d (f64: float inputs as f64): inputs copied there,
 * output, input gradients. The device under test's kernel calls are
 * added to parity_dut_calls. */
static mf_tensor *run_on(mf_device_type d, bool f64, fn_t fn, int n, mf_tensor **in, void *u, mf_tensor **grads)
{
    bool under_test = d == parity_dut && !f64;
    int64_t before[64];
    for (int k = 0; under_test && mf_kernel_name(k); k++) before[k] = mf_kernel_calls(d, mf_kernel_name(k));
    ck_assert_ok(mf_set_default_device(d));
    mf_tensor *x[8] = {0};
    for (int i = 0; i < n; i++) {
        if (!in[i]) continue;
        mf_tensor *det = mf_tensor_detach(in[i]);
        mf_no_grad_begin();
        mf_tensor *c = f64 && mf_dtype_is_float(mf_tensor_dtype(det)) ? mf_cast(det, MF_F64) : mf_tensor_retain(det);
        x[i] = mf_to_device(c, d);
        if (x[i] && d == MF_DEV_CPU) {   /* a leaf of its own */
            mf_tensor_destroy(x[i]);
            x[i] = mf_clone(c);
        }
        mf_no_grad_end();
        mf_tensor_destroy(c);
        mf_tensor_destroy(det);
        ck_assert_nonnull(x[i]);
        ck_assert_msg(mf_tensor_device(x[i]) == d, "input %d is not on %s", i, mf_device_name(d));
        if (mf_dtype_is_float(mf_tensor_dtype(x[i])) && mf_tensor_requires_grad(in[i]))
            ck_assert_ok(mf_tensor_set_requires_grad(x[i], true));
    }
    mf_tensor *y = fn(x, u);
    ck_assert_msg(y != NULL, "forward on %s failed: %s", mf_device_name(d), mf_last_error());
    ck_assert_msg(mf_tensor_device(y) == d, "the output is on %s, not %s", mf_device_name(mf_tensor_device(y)),
                  mf_device_name(d));
    if (mf_tensor_requires_grad(y)) {
        mf_tensor *w = weights_like(y);
        mf_tensor *p = mf_mul(y, w);
        mf_tensor *l = p ? mf_sum_all(p) : NULL;
        ck_assert_msg(l != NULL, "loss on %s: %s", mf_device_name(d), mf_last_error());
        ck_assert_msg(mf_backward(l) == MF_OK, "backward on %s: %s", mf_device_name(d), mf_last_error());
        mf_tensor_destroy(w);
        mf_tensor_destroy(p);
        mf_tensor_destroy(l);
    }
    for (int i = 0; i < n; i++) {
        grads[i] = x[i] && mf_tensor_grad(x[i]) ? mf_tensor_retain(mf_tensor_grad(x[i])) : NULL;
        if (grads[i]) ck_assert_msg(mf_tensor_device(grads[i]) == d, "gradient %d is on the wrong device", i);
        mf_tensor_destroy(x[i]);
    }
    ck_assert_ok(mf_set_default_device(MF_DEV_CPU));
    for (int k = 0; under_test && mf_kernel_name(k); k++) parity_dut_calls[k] += mf_kernel_calls(d, mf_kernel_name(k)) - before[k];
    return y;
}

/* Runs fn on the device under test and on the reference, and compares
 * output and gradients in the dtype of in[0]. */
void parity(const char *what, fn_t fn, int n, mf_tensor **in, void *u, int flags)
{
    mf_tensor *gc[8] = {0}, *gg[8] = {0};
    mf_dtype dt = mf_tensor_dtype(in[0]);
    bool f64 = parity_self_check && !(flags & (EXACT | SAME_DTYPE)) && dt == MF_F32;
    mf_tensor *yc = run_on(MF_DEV_CPU, f64, fn, n, in, u, gc);
    mf_tensor *yg = run_on(parity_dut, false, fn, n, in, u, gg);
    char name[160];
    snprintf(name, sizeof name, "%s output", what);
    expect_close(name, yg, yc, dt, flags & EXACT);
    for (int i = 0; i < n; i++) {
        ck_assert_msg(!gc[i] == !gg[i], "%s: input %d has a gradient on one side only", what, i);
        if (!gc[i]) continue;
        snprintf(name, sizeof name, "%s d/d input %d", what, i);
        expect_close(name, gg[i], gc[i], dt, flags & EXACT);
        mf_tensor_destroy(gc[i]);
        mf_tensor_destroy(gg[i]);
    }
    mf_tensor_destroy(yc);
    mf_tensor_destroy(yg);
    parity_ncases++;
}

mf_tensor *rnd(mf_dtype dt, int ndim, const int64_t *shape, double lo, double hi)
{
    mf_tensor *u = mf_rand(dt, ndim, shape);
    mf_tensor *s = u ? mf_scale(u, hi - lo) : NULL;
    mf_tensor *t = s ? mf_add_scalar(s, lo) : NULL;
    mf_tensor_destroy(u);
    mf_tensor_destroy(s);
    if (t) mf_tensor_set_requires_grad(t, true);
    return t;
}

mf_tensor *ints(int64_t n, int64_t hi)
{
    mf_tensor *t = mf_empty(MF_I64, 1, &n);
    for (int64_t i = 0; i < n; i++) mf_tensor_set(t, &i, (double)((i * 7 + 3) % hi));
    return t;
}

void free_all(int n, mf_tensor **t)
{
    for (int i = 0; i < n; i++) mf_tensor_destroy(t[i]);
}
