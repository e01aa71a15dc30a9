/*
 * tests/test_grad_sync.c - gradient buckets (lib/optim/grad_sync.c):
 * data-parallel training with buckets of every size equals training with
 * one sync per parameter, in plain steps, with two backwards per step
 * (accumulation), with gradient clipping, without a zero_grad before the
 * first backward, and with a model-parallel layer the buckets skip; and
 * ZeRO-1 equals plain data parallel in all of these.
 * Runs on 1 rank in make check and on 2-4 ranks in tests/coll.sh.
 */
#include <math.h>
#include <stdlib.h>
#include "tests/test_util.h"

enum { PLAIN, ACCUMULATE, CLIP, NO_ZERO_GRAD, SPLIT_OUTPUT, MODES };
static const char *const mode_names[MODES] = {"plain", "accumulate", "clip", "no zero_grad", "split output"};
#define NPARAM (20 * 32 + 32 + 32 * 8 + 8)

/* three steps of SGD with momentum (adam: Adam); every parameter,
 * gathered, into out */
static void train(double bucket_mb, int mode, int zero, bool adam, float *out)
{
    mf_placement *w = mf_placement_world();
    mf_module *m = mf_sequential_create();
    ck_assert_ok(mf_sequential_add(m, "a", mf_linear_create(20, 32, true)));
    ck_assert_ok(mf_sequential_add(m, NULL, mf_relu_create()));
    ck_assert_ok(mf_sequential_add(m, "b", mf_linear_create(32, 8, true)));
    ck_assert_ok(mf_module_reset_parameters(m, 3));
    if (mode == SPLIT_OUTPUT) {
        ck_assert_ok(mf_module_param_to_global(m, "b.weight", w, "S(0)"));
        ck_assert_ok(mf_module_param_to_global(m, "b.bias", w, "S(0)"));
    }
    ck_assert_ok(mf_module_to_global(m, w, "B"));
    mf_tensor_list *ps = mf_module_parameters(m);
    mf_sgd_opts so = mf_sgd_defaults();
    so.lr = 0.05;
    so.momentum = 0.9;
    mf_adam_opts ao = mf_adam_defaults();
    ao.lr = 0.01;
    mf_optim *opt = adam ? mf_adam_create(ps, &ao) : mf_sgd_create(ps, &so);
    ck_assert_nonnull(opt);
    ck_assert_ok(mf_optim_set_bucket_mb(opt, bucket_mb));
    ck_assert_ok(mf_optim_set_zero(opt, zero));
    mf_manual_seed(8);
    mf_tensor *x = mf_randn(MF_F32, 2, (const int64_t[]){12, 20});
    mf_tensor *u = mf_rand(MF_F32, 1, (const int64_t[]){12}), *u8 = mf_scale(u, 7.99), *y = mf_cast(u8, MF_I64);
    mf_tensor *gx = mf_global_from_full(x, w, "S(0)"), *gy = mf_global_from_full(y, w, "S(0)");
    for (int step = 0; step < 3; step++) {
        if (!(mode == NO_ZERO_GRAD && step == 0)) ck_assert_ok(mf_optim_zero_grad(opt));
        for (int pass = 0; pass < (mode == ACCUMULATE ? 2 : 1); pass++) {
            mf_tensor *o = mf_module_forward(m, gx), *loss = mf_cross_entropy(o, gy, MF_REDUCTION_MEAN);
            ck_assert_nonnull(loss);
            ck_assert_ok(mf_backward(loss));
            mf_tensor_destroy(o);
            mf_tensor_destroy(loss);
        }
        if (mode == CLIP) ck_assert_ok(mf_clip_grad_norm(ps, 0.05, NULL));
        ck_assert_ok(mf_optim_step(opt));
    }
    int64_t at = 0;
    for (int i = 0; i < ps->n; i++) {
        int64_t n = mf_tensor_numel(ps->items[i].tensor);
        ck_assert_ok(mf_tensor_copy_out(ps->items[i].tensor, MF_F32, out + at, n));
        at += n;
    }
    ck_assert_int_eq(at, NPARAM);
    mf_tensor_destroy(x);
    mf_tensor_destroy(y);
    mf_tensor_destroy(u);
    mf_tensor_destroy(u8);
    mf_tensor_destroy(gx);
    mf_tensor_destroy(gy);
    mf_optim_destroy(opt);
    mf_tensor_list_destroy(ps);
    mf_module_destroy(m);
    mf_placement_destroy(w);
}

static void compare(const float *ref, const float *got, const char *what, int mode, double mb)
{
    double worst = 0;
    for (int i = 0; i < NPARAM; i++) worst = fmax(worst, fabs((double)got[i] - ref[i]) / (1 + fabs(ref[i])));
    ck_assert_msg(mf_agree(worst <= 1e-6 ? MF_OK : MF_ERR_INTERNAL) == MF_OK,
                  "%s, %s, buckets of %g MiB: parameters differ by %g from one sync per parameter", what,
                  mode_names[mode], mb, worst);
}

START_TEST(test_buckets_equal_unbucketed)
{
    static float ref[NPARAM], got[NPARAM];
    const double sizes[] = {25, 0.004, 0.0001};   /* one bucket; a few; one per parameter */
    for (int mode = 0; mode < MODES; mode++) {
        train(0, mode, 0, false, ref);
        for (int k = 0; k < 3; k++) {
            train(sizes[k], mode, 0, false, got);
            compare(ref, got, "buckets", mode, sizes[k]);
        }
    }
}
END_TEST

/* ZeRO-1 equals plain data parallel, for SGD with momentum and Adam */
START_TEST(test_zero1_equals_dp)
{
    static float ref[NPARAM], got[NPARAM];
    const double sizes[] = {25, 0.004, 0};
    for (int adam = 0; adam < 2; adam++)
        for (int mode = 0; mode < MODES; mode++) {
            train(0, mode, 0, adam, ref);
            for (int k = 0; k < 3; k++) {
                train(sizes[k], mode, 1, adam, got);
                compare(ref, got, adam ? "ZeRO-1 adam" : "ZeRO-1 sgd", mode, sizes[k]);
            }
        }
}
END_TEST

START_TEST(test_bucket_errors)
{
    mf_module *lin = mf_linear_create(3, 2, true);
    mf_tensor_list *ps = mf_module_parameters(lin);
    mf_optim *opt = mf_sgd_create(ps, &(mf_sgd_opts){.lr = 0.1});
    ck_assert_fails(mf_optim_set_bucket_mb(opt, -1), MF_ERR_ARG, "-1 MiB is not in [0, 2^20]");
    ck_assert_fails(mf_optim_set_bucket_mb(NULL, 1), MF_ERR_ARG, "optimizer is NULL");
    ck_assert_ok(mf_optim_set_bucket_mb(opt, 0));
    ck_assert_fails(mf_optim_set_zero(opt, 2), MF_ERR_ARG, "stage 2 is not 0 or 1");
    mf_optim_destroy(opt);
    mf_tensor_list_destroy(ps);
    mf_module_destroy(lin);
}
END_TEST

Suite *grad_sync_suite(void)
{
    Suite *s = suite_create("grad_sync");
    TCase *tc = tcase_create("grad_sync");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_buckets_equal_unbucketed);
    tcase_add_test(tc, test_zero1_equals_dp);
    tcase_add_test(tc, test_bucket_errors);
    suite_add_tcase(s, tc);
    return s;
}

MF_TEST_MAIN(grad_sync_suite)
