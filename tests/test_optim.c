/*
 * tests/test_optim.c - optimizers on f(x) = 0.5*|x|^2 (gradient x) from
 * x0 = (1, -2), against values worked out from each update rule;
 * learning-rate schedules; clipping; argument errors.
 */
#include "tests/test_util.h"

typedef mf_optim *(*make_fn)(mf_tensor_list *l, void *opts);

/* Runs `steps` updates; returns the parameter (caller destroys). */
static mf_tensor *run(mf_optim *(*make)(const mf_tensor_list *, const void *), const void *opts, int steps)
{
    mf_tensor *x = T64(MF_DIMS(2), 1, -2);
    mf_tensor_set_requires_grad(x, true);
    mf_tensor_list l = {1, (mf_named_tensor[]){{"x", x, MF_ENTRY_PARAM}}};
    mf_optim *o = make(&l, opts);
    ck_assert_nonnull(o);
    for (int i = 0; i < steps; i++) {
        mf_optim_zero_grad(o);
        mf_tensor *sq = mf_mul(x, x), *s = mf_sum_all(sq), *f = mf_scale(s, 0.5);
        ck_assert_ok(mf_backward(f));
        ck_assert_ok(mf_optim_step(o));
        mf_tensor_destroy(sq);
        mf_tensor_destroy(s);
        mf_tensor_destroy(f);
    }
    ck_assert_int_eq(mf_optim_steps(o), steps);
    mf_optim_destroy(o);
    return x;
}

static mf_optim *make_sgd(const mf_tensor_list *l, const void *o) { return mf_sgd_create(l, o); }
static mf_optim *make_rms(const mf_tensor_list *l, const void *o) { return mf_rmsprop_create(l, o); }
static mf_optim *make_adam(const mf_tensor_list *l, const void *o) { return mf_adam_create(l, o); }
static mf_optim *make_adamw(const mf_tensor_list *l, const void *o) { return mf_adamw_create(l, o); }

START_TEST(sgd)
{
    mf_sgd_opts o = mf_sgd_defaults();
    o.lr = 0.1;
    /* plain: x <- x - 0.1 x = 0.9 x, twice */
    mf_tensor *x = run(make_sgd, &o, 2);
    ck_expect(x, 1e-12, MF_DIMS(2), 0.81, -1.62);
    mf_tensor_destroy(x);
    /* momentum 0.9: buf1 = g = x0, x1 = 0.9 x0; buf2 = 0.9 x0 + 0.9 x0 = 1.8 x0, x2 = 0.9 x0 - 0.18 x0 */
    o.momentum = 0.9;
    x = run(make_sgd, &o, 2);
    ck_expect(x, 1e-12, MF_DIMS(2), 0.72, -1.44);
    mf_tensor_destroy(x);
    /* Nesterov: g' = g + 0.9 buf. x1 = x0 - 0.1*1.9 x0 = 0.81 x0; buf2 = 0.9 x0 + 0.81 x0 = 1.71 x0,
     * g' = 0.81 x0 + 1.539 x0 = 2.349 x0, x2 = 0.81 x0 - 0.2349 x0 = 0.5751 x0 */
    o.nesterov = true;
    x = run(make_sgd, &o, 2);
    ck_expect(x, 1e-12, MF_DIMS(2), 0.5751, -1.1502);
    mf_tensor_destroy(x);
    /* dampening 0.5 (not on the first step): buf2 = 0.9 x0 + 0.5*0.9 x0 = 1.35 x0, x2 = 0.9 x0 - 0.135 x0 */
    o.nesterov = false;
    o.dampening = 0.5;
    x = run(make_sgd, &o, 2);
    ck_expect(x, 1e-12, MF_DIMS(2), 0.765, -1.53);
    mf_tensor_destroy(x);
    /* weight decay 0.1: g = 1.1 x, x1 = x0 - 0.11 x0 */
    o = mf_sgd_defaults();
    o.lr = 0.1;
    o.weight_decay = 0.1;
    x = run(make_sgd, &o, 1);
    ck_expect(x, 1e-12, MF_DIMS(2), 0.89, -1.78);
    mf_tensor_destroy(x);
}
END_TEST

START_TEST(adam)
{
    mf_adam_opts o = mf_adam_defaults();
    o.lr = 0.1;
    /* step 1: m = 0.1 g, v = 0.001 g^2, mhat = g, vhat = g^2: x1 = x0 - 0.1 sign(x0) (eps aside) */
    mf_tensor *x = run(make_adam, &o, 1);
    ck_expect(x, 1e-9, MF_DIMS(2), 0.9, -1.9);
    mf_tensor_destroy(x);
    /* step 2 for x0 = 1: m = 0.09 + 0.09 = 0.18, v = 0.000999 + 0.00081 = 0.001809,
     * mhat = 0.18/0.19, vhat = 0.001809/0.001999: x2 = 0.9 - 0.1*0.947368/0.951290 */
    x = run(make_adam, &o, 3);
    ck_expect(x, 1e-9, MF_DIMS(2), 0.701586274504415, -1.7006233928121137);
    mf_tensor_destroy(x);
    /* L2 weight decay adds 0.1 x to the gradient */
    o.weight_decay = 0.1;
    x = run(make_adam, &o, 2);
    ck_expect(x, 1e-9, MF_DIMS(2), 0.8004122295267845, -1.8001664865292035);
    mf_tensor_destroy(x);
    /* AdamW decays first: x1 = 0.99 x0 - 0.1 sign(x0) */
    x = run(make_adamw, &o, 1);
    ck_expect(x, 1e-9, MF_DIMS(2), 0.89, -1.88);
    mf_tensor_destroy(x);
    x = run(make_adamw, &o, 2);
    ck_expect(x, 1e-9, MF_DIMS(2), 0.7815718569541611, -1.7614089510885826);
    mf_tensor_destroy(x);
    /* GPT-2's recipe: no decay on a vector, decay on a matrix */
    o.decay_matrices_only = true;
    x = run(make_adamw, &o, 1);
    ck_expect(x, 1e-9, MF_DIMS(2), 0.9, -1.9);
    mf_tensor_destroy(x);
    mf_tensor *m = T64(MF_DIMS(1, 2), 1, -2);
    ck_assert_ok(mf_tensor_set_requires_grad(m, true));
    mf_tensor_list lm = {1, (mf_named_tensor[]){{"m", m, MF_ENTRY_PARAM}}};
    mf_optim *om = mf_adamw_create(&lm, &o);
    mf_tensor *sq = mf_mul(m, m), *f = mf_sum_all(sq);
    ck_assert_ok(mf_backward(f));   /* gradient 2m: the same signs, so the same first Adam step */
    ck_assert_ok(mf_optim_step(om));
    ck_expect(m, 1e-9, MF_DIMS(1, 2), 0.89, -1.88);
    mf_optim_destroy(om);
    mf_tensor_destroy(sq);
    mf_tensor_destroy(f);
    mf_tensor_destroy(m);
    o.decay_matrices_only = false;
    /* AMSGrad equals Adam while v only grows */
    o.weight_decay = 0;
    o.amsgrad = true;
    x = run(make_adam, &o, 2);
    ck_expect(x, 1e-9, MF_DIMS(2), 0.8004122297123382, -1.8001664866210927);
    mf_tensor_destroy(x);
}
END_TEST

START_TEST(rmsprop)
{
    mf_rmsprop_opts o = mf_rmsprop_defaults();
    /* step 1: sq = 0.01 g^2, avg = 0.1 |g|: x1 = x0 - 0.01 * 10 sign(x0) = x0 - 0.1 sign(x0);
     * step 2 (x = 0.9): sq = 0.0099 + 0.0081 = 0.018, x2 = 0.9 - 0.009/0.134164 */
    mf_tensor *x = run(make_rms, &o, 2);
    ck_expect(x, 1e-9, MF_DIMS(2), 0.8329179752650593, -1.8309433328172848);
    mf_tensor_destroy(x);
    o.momentum = 0.9;
    x = run(make_rms, &o, 2);
    ck_expect(x, 1e-9, MF_DIMS(2), 0.7429179842650584, -1.7409433373172847);
    mf_tensor_destroy(x);
    o.momentum = 0;
    o.centered = true;
    x = run(make_rms, &o, 2);
    ck_expect(x, 1e-9, MF_DIMS(2), 0.8317593871030315, -1.8297521563555703);
    mf_tensor_destroy(x);
}
END_TEST

START_TEST(state_and_skipping)
{
    mf_tensor *a = T32(MF_DIMS(2), 1, 1), *b = T32(MF_DIMS(1), 5);
    mf_tensor_set_requires_grad(a, true);
    mf_tensor_set_requires_grad(b, true);
    mf_tensor_list l = {2, (mf_named_tensor[]){{"a", a, MF_ENTRY_PARAM}, {"b", b, MF_ENTRY_PARAM}}};
    mf_adam_opts o = mf_adam_defaults();
    mf_optim *opt = mf_adam_create(&l, &o);
    ck_assert_str_eq(mf_optim_type(opt), "adam");
    mf_tensor *g = T32(MF_DIMS(2), 1, 1);
    mf_tensor_set_grad(a, g);
    ck_assert_ok(mf_optim_step(opt));
    /* b had no gradient: unchanged, and no state for it */
    ck_expect(b, 0, MF_DIMS(1), 5);
    mf_tensor_list *st = mf_optim_state(opt);
    ck_assert_int_eq(st->n, 2);
    ck_assert_str_eq(st->items[0].name, "a/exp_avg");
    ck_assert_str_eq(st->items[1].name, "a/exp_avg_sq");
    ck_expect(st->items[0].tensor, 1e-6, MF_DIMS(2), 0.1, 0.1);
    mf_tensor_list_destroy(st);
    mf_optim_zero_grad(opt);
    ck_assert_ptr_null(mf_tensor_grad(a));
    mf_optim_set_lr(opt, 0.5);
    ck_assert(mf_optim_lr(opt) == 0.5);
    mf_optim_destroy(opt);
    mf_tensor_destroy(a);
    mf_tensor_destroy(b);
    mf_tensor_destroy(g);
}
END_TEST

START_TEST(schedules)
{
    mf_lr_schedule *p = mf_lr_piecewise_create(2, (const int64_t[]){100, 200}, (const double[]){0.1, 0.01, 0.001});
    ck_assert(mf_lr_schedule_at(p, 0) == 0.1 && mf_lr_schedule_at(p, 99) == 0.1);
    ck_assert(mf_lr_schedule_at(p, 100) == 0.01 && mf_lr_schedule_at(p, 199) == 0.01);
    ck_assert(mf_lr_schedule_at(p, 200) == 0.001 && mf_lr_schedule_at(p, 10000) == 0.001);
    mf_lr_schedule *s = mf_lr_step_create(1.0, 10, 0.5);
    ck_assert(mf_lr_schedule_at(s, 9) == 1.0 && mf_lr_schedule_at(s, 10) == 0.5 && mf_lr_schedule_at(s, 25) == 0.25);
    /* warmup 10 to 0.1, cosine to 0.001 at step 100 */
    mf_lr_schedule *c = mf_lr_cosine_create(0.1, 10, 100, 0.001);
    int64_t steps[] = {0, 4, 9, 10, 55, 99, 100};
    double want[] = {0.01, 0.05, 0.1, 0.1, 0.0505, 0.0010301540625547597, 0.001};
    for (int i = 0; i < 7; i++)
        ck_assert_msg(fabs(mf_lr_schedule_at(c, steps[i]) - want[i]) < 1e-12, "cosine at %lld: %g, want %g",
                      (long long)steps[i], mf_lr_schedule_at(c, steps[i]), want[i]);
    ck_assert_fails(mf_lr_piecewise_create(2, (const int64_t[]){5, 5}, (const double[]){1, 2, 3}), MF_ERR_ARG,
                    "increase");
    ck_assert_fails(mf_lr_cosine_create(0.1, 20, 10, 0), MF_ERR_ARG, "warmup");
    mf_lr_schedule_destroy(p);
    mf_lr_schedule_destroy(s);
    mf_lr_schedule_destroy(c);
}
END_TEST

START_TEST(clip_grad_norm)
{
    mf_tensor *a = mf_zeros(MF_F32, MF_DIMS(1)), *b = mf_zeros(MF_F32, MF_DIMS(1));
    mf_tensor *ga = T32(MF_DIMS(1), 3), *gb = T32(MF_DIMS(1), 4);
    mf_tensor_set_grad(a, ga);
    mf_tensor_set_grad(b, gb);
    mf_tensor_list l = {2, (mf_named_tensor[]){{"a", a, MF_ENTRY_PARAM}, {"b", b, MF_ENTRY_PARAM}}};
    double norm;
    ck_assert_ok(mf_clip_grad_norm(&l, 10, &norm));   /* below the limit: unchanged */
    ck_assert(fabs(norm - 5) < 1e-6);
    ck_expect(mf_tensor_grad(a), 0, MF_DIMS(1), 3);
    ck_assert_ok(mf_clip_grad_norm(&l, 1, &norm));
    ck_expect(mf_tensor_grad(a), 1e-5, MF_DIMS(1), 0.6);
    ck_expect(mf_tensor_grad(b), 1e-5, MF_DIMS(1), 0.8);
    ck_assert_fails(mf_clip_grad_norm(&l, 0, NULL), MF_ERR_ARG, "max_norm");
    mf_tensor *all[] = {a, b, ga, gb};
    for (int k = 0; k < 4; k++) mf_tensor_destroy(all[k]);
}
END_TEST

START_TEST(bad_arguments)
{
    mf_tensor *x = mf_zeros(MF_F32, MF_DIMS(1));
    mf_tensor_list l = {1, (mf_named_tensor[]){{"x", x, MF_ENTRY_PARAM}}};
    mf_sgd_opts s = mf_sgd_defaults();
    s.nesterov = true;
    ck_assert_fails(make_sgd(&l, &s), MF_ERR_ARG, "Nesterov");
    s = mf_sgd_defaults();
    s.lr = -1;
    ck_assert_fails(make_sgd(&l, &s), MF_ERR_ARG, "learning rate");
    mf_adam_opts a = mf_adam_defaults();
    a.beta2 = 1.0;
    ck_assert_fails(make_adam(&l, &a), MF_ERR_ARG, "betas");
    mf_tensor *i = mf_zeros(MF_I64, MF_DIMS(1));
    mf_tensor_list li = {1, (mf_named_tensor[]){{"steps", i, MF_ENTRY_PARAM}}};
    ck_assert_fails(make_adam(&li, NULL), MF_ERR_DTYPE, "steps", "i64");
    mf_tensor_destroy(x);
    mf_tensor_destroy(i);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("optim");
    TCase *tc = tcase_create("rules");
    tcase_add_test(tc, sgd);
    tcase_add_test(tc, adam);
    tcase_add_test(tc, rmsprop);
    tcase_add_test(tc, state_and_skipping);
    tcase_add_test(tc, schedules);
    tcase_add_test(tc, clip_grad_norm);
    tcase_add_test(tc, bad_arguments);
    suite_add_tcase(s, tc);
    return s;
}

MF_TEST_MAIN(suite)
