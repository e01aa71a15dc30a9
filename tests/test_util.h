/*
 * tests/test_util.h - helpers shared by the Check suites: an MPI-aware
 * main, value comparisons and the finite-difference gradient check.
 */
#ifndef MPIFLOW_TEST_UTIL_H
#define MPIFLOW_TEST_UTIL_H

#include <check.h>
#include <math.h>
#include <string.h>
#include "mpiflow.h"

/* Runs the suite on every rank (CK_FORK=no: MPI must not be forked) and
 * returns the exit code all ranks agree on. */
int mf_test_main(int argc, char **argv, Suite *(*make_suite)(void));
/* The same, but exits 77 (automake's SKIP) after printing the reason
 * when skip() returns one (a suite that needs a GPU, on a machine
 * without one), or 1 (FAIL) when it also sets *fail (a GPU is there but
 * CUDA cannot use it). Every suite runs under an alarm: CK_DEFAULT_TIMEOUT
 * (600 s) x CK_TIMEOUT_MULTIPLIER, then exit 124. */
int mf_test_main_unless(int argc, char **argv, Suite *(*make_suite)(void), const char *(*skip)(bool *fail));
/* The same, but a suite that skip() gives a reason for (and no failure)
 * still runs (make_suite sees the reason through its own state): one
 * that passes then exits 77 with the reason, one that fails exits 1. */
int mf_test_main_then_skip(int argc, char **argv, Suite *(*make_suite)(void), const char *(*skip)(bool *fail));
/* A device node or driver entry of an NVIDIA GPU on this machine
 * (/dev/nvidia0, /proc/driver/nvidia/gpus/...), whatever CUDA says; NULL
 * when there is none. */
const char *mf_test_gpu_device(void);

#define MF_TEST_MAIN(make_suite) \
    int main(int argc, char **argv) { return mf_test_main(argc, argv, make_suite); }

#define ck_assert_ok(expr)                                                               \
    do {                                                                                 \
        mf_status st_ = (expr);                                                          \
        ck_assert_msg(st_ == MF_OK, "%s failed: %s", #expr, mf_last_error());            \
    } while (0)

#define ck_assert_nonnull(t) ck_assert_msg((t) != NULL, "%s is NULL: %s", #t, mf_last_error())

/* Fails unless expr fails with status `want` and a message containing
 * every listed substring. */
#define ck_assert_fails(expr, want, ...)                                                 \
    do {                                                                                 \
        mf_clear_error();                                                                \
        bool failed_ = mf_test_failed_(expr);                                            \
        ck_assert_msg(failed_, "%s did not fail", #expr);                                \
        ck_assert_msg(mf_last_status() == (want), "%s: status %s, expected %s (%s)",     \
                      #expr, mf_status_string(mf_last_status()), mf_status_string(want), \
                      mf_last_error());                                                  \
        const char *subs_[] = {__VA_ARGS__};                                             \
        for (size_t i_ = 0; i_ < sizeof subs_ / sizeof *subs_; i_++)                     \
            ck_assert_msg(strstr(mf_last_error(), subs_[i_]) != NULL,                    \
                          "%s: message '%s' lacks '%s'", #expr, mf_last_error(), subs_[i_]); \
    } while (0)

/* True if a tensor result is NULL or a status result is not MF_OK; frees
 * a tensor that came back anyway. */
#define mf_test_failed_(expr)                                                          \
    _Generic((expr), mf_status: mf_test_status_failed_, mf_tensor *: mf_test_tensor_failed_, \
             default: mf_test_ptr_failed_)(expr)
bool mf_test_status_failed_(mf_status s);
bool mf_test_tensor_failed_(mf_tensor *t);
bool mf_test_ptr_failed_(const void *p);

/* A tensor from a literal list: T32(MF_DIMS(2, 2), 1, 2, 3, 4). */
mf_tensor *mf_test_tensor(mf_dtype dt, int ndim, const int64_t *shape, const double *values);
#define T32(nd_shape, ...) mf_test_tensor(MF_F32, nd_shape, (const double[]){__VA_ARGS__})
#define T64(nd_shape, ...) mf_test_tensor(MF_F64, nd_shape, (const double[]){__VA_ARGS__})
#define TI64(nd_shape, ...) mf_test_tensor(MF_I64, nd_shape, (const double[]){__VA_ARGS__})

/* Fails the test unless t has exactly the given shape and its values are
 * within tol (absolute + relative) of expect. */
void mf_test_expect(const char *what, mf_tensor *t, int ndim, const int64_t *shape, const double *expect, double tol);
#define ck_expect(t, tol, nd_shape, ...) \
    mf_test_expect(#t, t, nd_shape, (const double[]){__VA_ARGS__}, tol)
void mf_test_expect_shape(const char *what, mf_tensor *t, int ndim, const int64_t *shape);
#define ck_expect_shape(t, nd_shape) mf_test_expect_shape(#t, t, nd_shape)

/* Finite-difference gradient check in f64. fn builds an output from the
 * inputs; the check backpropagates sum(out * w) for a fixed random w and
 * compares the gradient of every float input that requires grad with
 * central differences (step eps). Returns the worst error seen, and
 * fails the test if it exceeds atol + rtol * |numeric|, or if no element
 * at all was checked (no f64 input that requires grad). */
typedef mf_tensor *(*mf_test_fn)(mf_tensor **in, void *user);
double mf_test_gradcheck(const char *what, mf_test_fn fn, int n, mf_tensor **in, void *user, double eps,
                         double atol, double rtol);

/* The largest |a - b| (relative: |a - b| / (1 + |b|)) over the whole
 * values; a may be global (it is gathered, so call it on every rank),
 * b is local. INFINITY if the sizes differ or either side has a NaN. */
double mf_test_max_diff(mf_tensor *a, mf_tensor *b, bool relative);

/* A fresh directory /tmp/mf_test_<tag>_<pid> into dir (for a Check
 * fixture's setup), and its removal with everything in it (teardown). */
void mf_test_tmpdir_make(char *dir, size_t size, const char *tag);
void mf_test_tmpdir_remove(const char *dir);

/* A random f64 tensor in [lo, hi) that requires grad. */
mf_tensor *mf_test_rand64(int ndim, const int64_t *shape, double lo, double hi);

#endif
