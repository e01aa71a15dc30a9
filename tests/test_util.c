/*
 * tests/test_util.c - see test_util.h.
 */
#include <glob.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "tests/test_util.h"

int mf_test_main(int argc, char **argv, Suite *(*make_suite)(void))
{
    return mf_test_main_unless(argc, argv, make_suite, NULL);
}

static void out_of_time(int sig)
{
    (void)sig;
    static const char msg[] = "FAIL: the suite ran out of time (CK_DEFAULT_TIMEOUT x CK_TIMEOUT_MULTIPLIER)\n";
    if (write(STDERR_FILENO, msg, sizeof msg - 1) < 0) { /* nothing left to do */ }
    _exit(124);
}

/* Check's per-test timeouts need fork mode, which MPI forbids: the
 * whole suite gets an alarm instead, CK_DEFAULT_TIMEOUT (default 600 s)
 * times CK_TIMEOUT_MULTIPLIER, however it is started. */
static void time_limit(void)
{
    const char *t = getenv("CK_DEFAULT_TIMEOUT"), *m = getenv("CK_TIMEOUT_MULTIPLIER");
    double secs = t && atof(t) > 0 ? atof(t) : 600, mul = m && atof(m) > 0 ? atof(m) : 1;
    signal(SIGALRM, out_of_time);
    alarm((unsigned)(secs * mul + 0.5));
}

const char *mf_test_gpu_device(void)
{
    static char found[256];
    const char *patterns[] = {"/dev/nvidia[0-9]*", "/proc/driver/nvidia/gpus/*"};
    for (int i = 0; i < 2; i++) {
        glob_t g;
        if (glob(patterns[i], 0, NULL, &g) == 0 && g.gl_pathc > 0) {
            snprintf(found, sizeof found, "%s", g.gl_pathv[0]);
            globfree(&g);
            return found;
        }
        globfree(&g);
    }
    return NULL;
}

static int run_main(int argc, char **argv, Suite *(*make_suite)(void), const char *(*skip)(bool *fail), bool run_anyway)
{
    time_limit();
    if (mf_init(&argc, &argv) != MF_OK) {
        fprintf(stderr, "mf_init failed: %s\n", mf_last_error());
        return 1;
    }
    bool fail = false;
    const char *why = skip ? skip(&fail) : NULL;
    if (why && (fail || !run_anyway)) {
        if (mf_rank() == 0) printf("%s: %s\n", fail ? "FAIL" : "SKIP", why);
        mf_finalize();
        return fail ? 1 : 77;
    }
    setenv("CK_FORK", "no", 1);
    SRunner *sr = srunner_create(make_suite());
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, mf_rank() == 0 ? CK_NORMAL : CK_SILENT);
    int failed = srunner_ntests_failed(sr);
    if (failed && mf_rank() != 0) {      /* rank 0 printed its own */
        TestResult **res = srunner_failures(sr);
        for (int i = 0; i < failed; i++)
            fprintf(stderr, "[rank %d] %s:%d: %s: %s\n", mf_rank(), tr_lfile(res[i]), tr_lno(res[i]), tr_tcname(res[i]),
                    tr_msg(res[i]));
        free(res);
    }
    srunner_free(sr);
    mf_status agreed = mf_agree(failed ? MF_ERR_STATE : MF_OK);
    mf_finalize();
    if (agreed != MF_OK) return 1;
    if (why && mf_rank() == 0) printf("SKIP: %s\n", why);
    return why ? 77 : 0;
}

int mf_test_main_unless(int argc, char **argv, Suite *(*make_suite)(void), const char *(*skip)(bool *fail))
{
    return run_main(argc, argv, make_suite, skip, false);
}

int mf_test_main_then_skip(int argc, char **argv, Suite *(*make_suite)(void), const char *(*skip)(bool *fail))
{
    return run_main(argc, argv, make_suite, skip, true);
}

bool mf_test_status_failed_(mf_status s) { return s != MF_OK; }

bool mf_test_ptr_failed_(const void *p) { return p == NULL; }

bool mf_test_tensor_failed_(mf_tensor *t)
{
    if (!t) return true;
    mf_tensor_destroy(t);
    return false;
}

mf_tensor *mf_test_tensor(mf_dtype dt, int ndim, const int64_t *shape, const double *values)
{
    mf_tensor *t = mf_empty(dt, ndim, shape);
    if (!t) return NULL;
    int64_t n = mf_tensor_numel(t);
    if (mf_tensor_copy_in(t, MF_F64, values, n) != MF_OK) {
        mf_tensor_destroy(t);
        return NULL;
    }
    return t;
}

void mf_test_expect_shape(const char *what, mf_tensor *t, int ndim, const int64_t *shape)
{
    ck_assert_msg(t != NULL, "%s is NULL: %s", what, mf_last_error());
    char got[128], want[128];
    snprintf(want, sizeof want, "[");
    for (int i = 0; i < ndim; i++)
        snprintf(want + strlen(want), sizeof want - strlen(want), i ? ",%lld" : "%lld", (long long)shape[i]);
    snprintf(want + strlen(want), sizeof want - strlen(want), "]");
    mf_tensor_shape_str(t, got, sizeof got);
    ck_assert_msg(!strcmp(got, want), "%s has shape %s, expected %s", what, got, want);
}

void mf_test_expect(const char *what, mf_tensor *t, int ndim, const int64_t *shape, const double *expect, double tol)
{
    mf_test_expect_shape(what, t, ndim, shape);
    int64_t n = mf_tensor_numel(t);
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    ck_assert(v != NULL);
    ck_assert_msg(mf_tensor_copy_out(t, MF_F64, v, n) == MF_OK, "%s: %s", what, mf_last_error());
    for (int64_t i = 0; i < n; i++) {
        double err = fabs(v[i] - expect[i]);
        bool ok = err <= tol * (1.0 + fabs(expect[i])) || (isnan(v[i]) && isnan(expect[i])) ||
                  (isinf(v[i]) && v[i] == expect[i]);
        if (!ok) {
            double got = v[i];
            free(v);
            ck_abort_msg("%s[%lld] = %.9g, expected %.9g (tol %g)", what, (long long)i, got, expect[i], tol);
        }
    }
    free(v);
}

double mf_test_max_diff(mf_tensor *a, mf_tensor *b, bool relative)
{
    mf_tensor *fa = mf_tensor_is_global(a) ? mf_global_gather(a) : mf_tensor_retain(a);
    if (!fa || mf_tensor_numel(fa) != mf_tensor_numel(b)) {
        mf_tensor_destroy(fa);
        return INFINITY;
    }
    int64_t n = mf_tensor_numel(b);
    double *x = malloc((size_t)(n + 1) * sizeof *x), *y = malloc((size_t)(n + 1) * sizeof *y), m = 0;
    if (x && y && mf_tensor_copy_out(fa, MF_F64, x, n) == MF_OK && mf_tensor_copy_out(b, MF_F64, y, n) == MF_OK) {
        for (int64_t i = 0; i < n && m < INFINITY; i++) {
            double d = fabs(x[i] - y[i]) / (relative ? 1.0 + fabs(y[i]) : 1.0);
            if (isnan(d)) d = INFINITY;   /* a NaN on either side is never close */
            if (d > m) m = d;
        }
    } else {
        m = INFINITY;
    }
    free(x);
    free(y);
    mf_tensor_destroy(fa);
    return m;
}

mf_tensor *mf_test_rand64(int ndim, const int64_t *shape, double lo, double hi)
{
    mf_tensor *u = mf_rand(MF_F64, ndim, shape);
    if (!u) return NULL;
    mf_tensor *s = mf_scale(u, hi - lo);
    mf_tensor *t = s ? mf_add_scalar(s, lo) : NULL;
    mf_tensor_destroy(u);
    mf_tensor_destroy(s);
    if (t) mf_tensor_set_requires_grad(t, true);
    return t;
}

/* sum(out * w) with grad mode as the caller has it. */
static mf_tensor *weighted(mf_tensor *out, mf_tensor *w)
{
    mf_tensor *p = mf_mul(out, w);
    mf_tensor *s = p ? mf_sum_all(p) : NULL;
    mf_tensor_destroy(p);
    return s;
}

static double eval_loss(mf_test_fn fn, mf_tensor **in, void *user, mf_tensor *w)
{
    mf_no_grad_begin();
    mf_tensor *out = fn(in, user);
    mf_tensor *l = out ? weighted(out, w) : NULL;
    double v = l ? mf_tensor_item(l) : NAN;
    mf_tensor_destroy(out);
    mf_tensor_destroy(l);
    mf_no_grad_end();
    return v;
}

double mf_test_gradcheck(const char *what, mf_test_fn fn, int n, mf_tensor **in, void *user, double eps, double atol,
                         double rtol)
{
    for (int i = 0; i < n; i++)
        if (in[i]) mf_tensor_set_grad(in[i], NULL);
    mf_tensor *out = fn(in, user);
    ck_assert_msg(out != NULL, "%s: forward failed: %s", what, mf_last_error());
    /* a fixed random weighting tests the whole Jacobian, not just its sum */
    mf_tensor *w0 = mf_rand(mf_tensor_dtype(out), mf_tensor_ndim(out), mf_tensor_shape(out));
    mf_tensor *w = w0 ? mf_add_scalar(w0, 0.5) : NULL;
    mf_tensor_destroy(w0);
    ck_assert_nonnull(w);
    mf_tensor *l = weighted(out, w);
    ck_assert_msg(l != NULL, "%s: loss failed: %s", what, mf_last_error());
    ck_assert_msg(mf_backward(l) == MF_OK, "%s: backward failed: %s", what, mf_last_error());
    mf_tensor_destroy(l);
    mf_tensor_destroy(out);
    double worst = 0;
    int64_t checked = 0;   /* elements compared: a check of nothing is a failure */
    for (int i = 0; i < n; i++) {
        mf_tensor *x = in[i];
        if (!x || !mf_tensor_requires_grad(x) || mf_tensor_dtype(x) != MF_F64) continue;
        mf_tensor *g = mf_tensor_grad(x);
        ck_assert_msg(g != NULL, "%s: input %d got no gradient", what, i);
        ck_assert_msg(mf_tensor_is_contiguous(x), "%s: input %d must be contiguous", what, i);
        double *xv = mf_tensor_data(x);
        int64_t m = mf_tensor_numel(x);
        double *gv = malloc((size_t)(m ? m : 1) * sizeof *gv);
        ck_assert(gv != NULL);
        ck_assert_ok(mf_tensor_copy_out(g, MF_F64, gv, m));
        for (int64_t k = 0; k < m; k++) {
            double keep = xv[k];
            xv[k] = keep + eps;
            double lp = eval_loss(fn, in, user, w);
            xv[k] = keep - eps;
            double lm = eval_loss(fn, in, user, w);
            xv[k] = keep;
            double num = (lp - lm) / (2 * eps), err = fabs(num - gv[k]);
            if (err > worst) worst = err;
            checked++;
            if (!(err <= atol + rtol * fabs(num))) {
                double a = gv[k];
                free(gv);
                ck_abort_msg("%s: d/d input%d[%lld]: analytic %.9g vs numeric %.9g", what, i, (long long)k, a, num);
            }
        }
        free(gv);
    }
    mf_tensor_destroy(w);
    ck_assert_msg(checked > 0, "%s: no gradient was checked (no f64 input that requires grad, or all empty)", what);
    return worst;
}

void mf_test_tmpdir_make(char *dir, size_t size, const char *tag)
{
    snprintf(dir, size, "/tmp/mf_test_%s_%d", tag, (int)getpid());
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", dir, dir);
    ck_assert_int_eq(system(cmd), 0);
}

void mf_test_tmpdir_remove(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}
