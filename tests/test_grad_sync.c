/*
 * tests/test_grad_sync.c - gradient buckets (lib/optim/grad_sync.c):
 * data-parallel training with buckets of every size equals training with
 * one sync per parameter, in plain steps, with two backwards per step
 * (accumulation), with gradient clipping, without a zero_grad before the
 * first backward, and with a model-parallel layer the buckets skip; and
 * ZeRO-1 equals plain data parallel in all of these; two optimizers in one
 * process, stepped in interleaved order, each work as alone.
 * Runs on 1 rank in make check and on 2-4 ranks in tests/coll.sh.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tests/test_util.h"

enum { PLAIN, ACCUMULATE, CLIP, NO_ZERO_GRAD, SPLIT_OUTPUT, MODES };
static const char *const mode_names[MODES] = {"plain", "accumulate", "clip", "no zero_grad", "split output"};
#define NPARAM (20 * 32 + 32 + 32 * 8 + 8)

/* 12 samples of 20 features and their classes 0..7, split S(0) on w */
typedef struct batch {
    mf_tensor *x, *y, *u, *u8, *gx, *gy;
} batch;

static batch make_batch(mf_placement *w)
{
    batch d;
    mf_manual_seed(8);
    d.x = mf_randn(MF_F32, 2, (const int64_t[]){12, 20});
    d.u = mf_rand(MF_F32, 1, (const int64_t[]){12});
    d.u8 = mf_scale(d.u, 7.99);
    d.y = mf_cast(d.u8, MF_I64);
    d.gx = mf_global_from_full(d.x, w, "S(0)");
    d.gy = mf_global_from_full(d.y, w, "S(0)");
    ck_assert_nonnull(d.gx);
    ck_assert_nonnull(d.gy);
    return d;
}

static void free_batch(batch *d)
{
    mf_tensor *all[] = {d->x, d->y, d->u, d->u8, d->gx, d->gy};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) mf_tensor_destroy(all[i]);
}

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
    batch d = make_batch(w);
    mf_tensor *gx = d.gx, *gy = d.gy;
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
    free_batch(&d);
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

/* Two models, each with its own optimizer, stepped in interleaved
 * order (both zero_grads, both backwards, both steps): each equals its
 * model trained alone, and on more than one rank both optimizers' buckets
 * were started during backward (a trace span each), so neither's
 * gradients fell back to a blocking sum. The second model is wider, so
 * its buckets' names (sizes in MiB) tell them apart. */
static mf_module *two_model(int width, uint64_t seed)
{
    mf_module *m = mf_sequential_create();
    ck_assert_ok(mf_sequential_add(m, "a", mf_linear_create(20, width, true)));
    ck_assert_ok(mf_sequential_add(m, NULL, mf_relu_create()));
    ck_assert_ok(mf_sequential_add(m, "b", mf_linear_create(width, 8, true)));
    ck_assert_ok(mf_module_reset_parameters(m, seed));
    return m;
}

/* 3 steps of both models (alone: only model k); their parameters, gathered */
static void two_train(int alone, int zero, bool clip, float *out0, float *out1, const char *trace)
{
    mf_placement *w = mf_placement_world();
    mf_module *m[2] = {two_model(32, 3), two_model(64, 4)};
    mf_tensor_list *ps[2];
    mf_optim *opt[2];
    for (int k = 0; k < 2; k++) {
        ck_assert_ok(mf_module_to_global(m[k], w, "B"));
        ps[k] = mf_module_parameters(m[k]);
        opt[k] = mf_sgd_create(ps[k], &(mf_sgd_opts){.lr = 0.05, .momentum = 0.9});
        ck_assert_nonnull(opt[k]);
        ck_assert_ok(mf_optim_set_bucket_mb(opt[k], 25));
        ck_assert_ok(mf_optim_set_zero(opt[k], zero));
    }
    batch d = make_batch(w);
    mf_tensor *gx = d.gx, *gy = d.gy;
    if (trace) ck_assert_ok(mf_trace_enable(true));
    for (int step = 0; step < 3; step++) {
        mf_tensor *loss[2] = {NULL, NULL};
        for (int k = 0; k < 2; k++)
            if (alone < 0 || alone == k) ck_assert_ok(mf_optim_zero_grad(opt[k]));
        for (int k = 0; k < 2; k++) {
            if (alone >= 0 && alone != k) continue;
            mf_tensor *o = mf_module_forward(m[k], gx);
            loss[k] = mf_cross_entropy(o, gy, MF_REDUCTION_MEAN);
            ck_assert_nonnull(loss[k]);
            mf_tensor_destroy(o);
        }
        for (int k = 0; k < 2; k++)
            if (loss[k]) ck_assert_ok(mf_backward(loss[k]));
        for (int k = 0; k < 2; k++)
            if (loss[k] && clip) ck_assert_ok(mf_clip_grad_norm(ps[k], 0.05, NULL));
        for (int k = 0; k < 2; k++)
            if (loss[k]) ck_assert_ok(mf_optim_step(opt[k]));
        for (int k = 0; k < 2; k++) mf_tensor_destroy(loss[k]);
    }
    if (trace) {
        ck_assert_ok(mf_trace_write(trace));
        ck_assert_ok(mf_trace_enable(false));
    }
    float *outs[2] = {out0, out1};
    for (int k = 0; k < 2; k++) {
        int64_t at = 0;
        for (int i = 0; outs[k] && i < ps[k]->n; i++) {
            int64_t n = mf_tensor_numel(ps[k]->items[i].tensor);
            ck_assert_ok(mf_tensor_copy_out(ps[k]->items[i].tensor, MF_F32, outs[k] + at, n));
            at += n;
        }
        mf_optim_destroy(opt[k]);
        mf_tensor_list_destroy(ps[k]);
        mf_module_destroy(m[k]);
    }
    free_batch(&d);
    mf_placement_destroy(w);
}

/* whether the trace file holds a span whose name contains what */
static bool trace_has(const char *path, const char *what)
{
    FILE *f = fopen(path, "r");
    ck_assert_nonnull(f);
    static char text[1 << 20];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    return strstr(text, what) != NULL;
}

START_TEST(test_two_optimizers)
{
    enum { N0 = 20 * 32 + 32 + 32 * 8 + 8, N1 = 20 * 64 + 64 + 64 * 8 + 8 };
    static float ref0[N0], ref1[N1], got0[N0], got1[N1];
    char trace[64];
    snprintf(trace, sizeof trace, "two_optimizers.%d.json", mf_world_size());
    for (int zero = 0; zero < 2; zero++)
        for (int clip = 0; clip < 2; clip++) {
            two_train(0, zero, clip, ref0, NULL, NULL);
            two_train(1, zero, clip, NULL, ref1, NULL);
            two_train(-1, zero, clip, got0, got1, trace);
            double worst = 0;
            for (int i = 0; i < N0; i++) worst = fmax(worst, fabs((double)got0[i] - ref0[i]) / (1 + fabs(ref0[i])));
            for (int i = 0; i < N1; i++) worst = fmax(worst, fabs((double)got1[i] - ref1[i]) / (1 + fabs(ref1[i])));
            ck_assert_msg(mf_agree(worst <= 1e-6 ? MF_OK : MF_ERR_INTERNAL) == MF_OK,
                          "two optimizers (ZeRO %d, clip %d): parameters differ by %g from each model alone", zero,
                          clip, worst);
            char missing[64] = "";   /* rank 0 reads the trace; every rank learns the verdict */
            if (mf_world_size() > 1 && mf_rank() == 0) {
                const char *kind = zero ? "reduce-scatter" : "allreduce";
                char a[64], b[64];
                snprintf(a, sizeof a, "%s bucket 0 (%.2f MiB)", kind, N0 * 4.0 / 1048576.0);
                snprintf(b, sizeof b, "%s bucket 0 (%.2f MiB)", kind, N1 * 4.0 / 1048576.0);
                if (!trace_has(trace, a)) snprintf(missing, sizeof missing, "%s", a);
                else if (!trace_has(trace, b)) snprintf(missing, sizeof missing, "%s", b);
            }
            ck_assert_msg(mf_agree(missing[0] ? MF_ERR_INTERNAL : MF_OK) == MF_OK,
                          "two optimizers (ZeRO %d, clip %d): no '%s' span: an optimizer's buckets did not run "
                          "during backward", zero, clip, missing);
            if (mf_rank() == 0) remove(trace);
            ck_assert_ok(mf_agree(MF_OK));   /* rank 0 is done with the file */
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
    tcase_add_test(tc, test_two_optimizers);
    tcase_add_test(tc, test_bucket_errors);
    suite_add_tcase(s, tc);
    return s;
}

MF_TEST_MAIN(grad_sync_suite)
