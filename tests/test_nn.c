/*
 * tests/test_nn.c - modules: PyTorch names and state_dict order,
 * shapes, default initialisation keyed by name, train/eval, buffers,
 * custom modules and errors.
 */
#include <stdio.h>
#include "tests/test_util.h"

static void expect_names(mf_tensor_list *l, int n, const char *const *names)
{
    ck_assert_int_eq(l->n, n);
    for (int i = 0; i < n; i++) ck_assert_str_eq(l->items[i].name, names[i]);
}

START_TEST(mlp_and_lenet_layout)
{
    mf_module *mlp = mf_model_mlp(784, 512, 10);
    ck_assert_nonnull(mlp);
    mf_tensor_list *p = mf_module_parameters(mlp);
    expect_names(p, 4, (const char *const[]){"hidden.weight", "hidden.bias", "output.weight", "output.bias"});
    ck_expect_shape(p->items[0].tensor, MF_DIMS(512, 784));
    ck_expect_shape(p->items[2].tensor, MF_DIMS(10, 512));
    ck_assert_int_eq(mf_module_num_parameters(mlp), 784 * 512 + 512 + 512 * 10 + 10);
    mf_tensor_list_destroy(p);
    mf_module *lenet = mf_model_lenet(1, 28, 28, 10);
    ck_assert_nonnull(lenet);
    p = mf_module_parameters(lenet);
    expect_names(p, 8, (const char *const[]){"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias",
                                             "hidden.weight", "hidden.bias", "output.weight", "output.bias"});
    ck_expect_shape(p->items[0].tensor, MF_DIMS(32, 1, 5, 5));
    ck_expect_shape(p->items[2].tensor, MF_DIMS(64, 32, 5, 5));
    ck_expect_shape(p->items[4].tensor, MF_DIMS(512, 3136));
    ck_assert_int_eq(mf_module_num_parameters(lenet), 832 + 51264 + 1606144 + 5130);
    mf_tensor_list_destroy(p);
    /* forward shapes and gradients reaching every parameter */
    mf_tensor *x = mf_randn(MF_F32, MF_DIMS(3, 1, 28, 28));
    mf_tensor *y = mf_module_forward(lenet, x);
    ck_expect_shape(y, MF_DIMS(3, 10));
    mf_tensor *s = mf_sum_all(y);
    ck_assert_ok(mf_backward(s));
    p = mf_module_parameters(lenet);
    for (int i = 0; i < p->n; i++) ck_assert_msg(mf_tensor_grad(p->items[i].tensor) != NULL, "%s has no grad", p->items[i].name);
    mf_tensor_list_destroy(p);
    ck_assert_ptr_eq(mf_module_get(lenet, "conv2.bias"), mf_module_param(mf_module_child(lenet, "conv2"), "bias"));
    ck_assert_ptr_null(mf_module_get(lenet, "conv3.bias"));
    mf_tensor_destroy(x);
    mf_tensor_destroy(y);
    mf_tensor_destroy(s);
    mf_module_destroy(mlp);
    mf_module_destroy(lenet);
}
END_TEST

START_TEST(default_init)
{
    mf_module *l = mf_linear_create(400, 300, true);
    mf_tensor *w = mf_module_param(l, "weight");
    float *v = mf_tensor_data(w);
    double bound = 1 / sqrt(400.0), s2 = 0, mx = 0;
    for (int i = 0; i < 120000; i++) {
        ck_assert(fabs(v[i]) <= bound);
        s2 += (double)v[i] * v[i];
        mx = fmax(mx, fabs(v[i]));
    }
    /* U(-b, b) has variance b^2/3 */
    ck_assert_msg(fabs(s2 / 120000 - bound * bound / 3) < 0.02 * bound * bound, "variance %g", s2 / 120000);
    ck_assert(mx > 0.99 * bound);
    mf_module *c = mf_conv2d_create(6, 8, 3, 1, 1);
    float *cv = mf_tensor_data(mf_module_param(c, "weight"));
    for (int i = 0; i < 8 * 6 * 9; i++) ck_assert(fabs(cv[i]) <= 1 / sqrt(54.0));
    mf_module *bn = mf_batch_norm2d_create(4);
    ck_expect(mf_module_param(bn, "weight"), 0, MF_DIMS(4), 1, 1, 1, 1);
    ck_expect(mf_module_buffer(bn, "running_var"), 0, MF_DIMS(4), 1, 1, 1, 1);
    mf_module_destroy(l);
    mf_module_destroy(c);
    mf_module_destroy(bn);
}
END_TEST

START_TEST(init_is_keyed_by_name_and_seed)
{
    mf_module *a = mf_model_mlp(20, 8, 3), *b = mf_model_mlp(20, 8, 3);
    ck_assert_ok(mf_module_reset_parameters(a, 5));
    ck_assert_ok(mf_module_reset_parameters(b, 5));
    mf_tensor_list *pa = mf_module_state_dict(a), *pb = mf_module_state_dict(b);
    for (int i = 0; i < pa->n; i++)
        ck_assert_msg(!memcmp(mf_tensor_data(pa->items[i].tensor), mf_tensor_data(pb->items[i].tensor),
                              mf_tensor_nbytes(pa->items[i].tensor)), "%s differs", pa->items[i].name);
    ck_assert_ok(mf_module_reset_parameters(b, 6));
    ck_assert(memcmp(mf_tensor_data(pa->items[0].tensor), mf_tensor_data(pb->items[0].tensor),
                     mf_tensor_nbytes(pa->items[0].tensor)));
    /* the bias does not take the weight's values: keys differ by name */
    ck_assert(memcmp(mf_tensor_data(pa->items[0].tensor), mf_tensor_data(pa->items[1].tensor), 8 * sizeof(float)));
    mf_tensor_list_destroy(pa);
    mf_tensor_list_destroy(pb);
    mf_module_destroy(a);
    mf_module_destroy(b);
    /* two same-shaped layers created without a reset still differ */
    mf_module *l1 = mf_linear_create(16, 16, false), *l2 = mf_linear_create(16, 16, false);
    ck_assert(memcmp(mf_tensor_data(mf_module_param(l1, "weight")), mf_tensor_data(mf_module_param(l2, "weight")),
                     256 * sizeof(float)));
    mf_module_destroy(l1);
    mf_module_destroy(l2);
}
END_TEST

START_TEST(buffers_and_modes)
{
    mf_module *seq = mf_sequential_create();
    ck_assert_ok(mf_sequential_add(seq, NULL, mf_conv2d_create(1, 2, 3, 1, 1)));
    ck_assert_ok(mf_sequential_add(seq, NULL, mf_batch_norm2d_create(2)));
    ck_assert_ok(mf_sequential_add(seq, "drop", mf_dropout_create(0.5)));
    mf_tensor_list *sd = mf_module_state_dict(seq);
    expect_names(sd, 7, (const char *const[]){"0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean",
                                              "1.running_var", "1.num_batches_tracked"});
    ck_assert_int_eq(sd->items[4].kind, MF_ENTRY_BUFFER);
    mf_tensor_list_destroy(sd);
    mf_tensor_list *p = mf_module_parameters(seq);
    ck_assert_int_eq(p->n, 4);
    mf_tensor_list_destroy(p);
    mf_tensor *x = mf_randn(MF_F32, MF_DIMS(2, 1, 4, 4));
    mf_tensor *y = mf_module_forward(seq, x);
    ck_expect(mf_module_get(seq, "1.num_batches_tracked"), 0, MF_DIMS(), 1);
    mf_tensor_destroy(y);
    mf_module_train(seq, false);
    ck_assert(!mf_module_is_training(mf_module_child(seq, "drop")));
    mf_tensor *e1 = mf_module_forward(seq, x), *e2 = mf_module_forward(seq, x);
    ck_assert(!memcmp(mf_tensor_data(e1), mf_tensor_data(e2), mf_tensor_nbytes(e1)));   /* no dropout, fixed stats */
    ck_expect(mf_module_get(seq, "1.num_batches_tracked"), 0, MF_DIMS(), 1);
    mf_tensor_destroy(e1);
    mf_tensor_destroy(e2);
    mf_tensor_destroy(x);
    mf_module_destroy(seq);
}
END_TEST

/* a custom module: y = scale * x with one parameter */
static mf_tensor *scale_forward(mf_module *m, mf_tensor *x) { return mf_mul(x, mf_module_param(m, "scale")); }
static const mf_module_ops scale_ops = {"Scale", scale_forward, NULL, NULL, NULL};

START_TEST(custom_module)
{
    mf_module *m = mf_module_create(&scale_ops, NULL);
    mf_tensor *s = T32(MF_DIMS(1), 3);
    ck_assert_ok(mf_module_register_parameter(m, "scale", s));
    ck_assert(mf_tensor_requires_grad(s));
    mf_tensor *x = T32(MF_DIMS(2), 1, 2), *y = mf_module_forward(m, x);
    ck_expect(y, 0, MF_DIMS(2), 3, 6);
    ck_assert_fails(mf_module_register_parameter(m, "scale", s), MF_ERR_ARG, "already used");
    ck_assert_fails(mf_module_register_parameter(m, "a.b", s), MF_ERR_ARG, "a.b");
    mf_module *seq = mf_sequential_create();
    ck_assert_ok(mf_sequential_add(seq, "scale", m));
    ck_assert_fails(mf_sequential_add(seq, "scale", mf_relu_create()), MF_ERR_ARG, "already used");
    char buf[1024] = "";
    FILE *f = fmemopen(buf, sizeof buf, "w");
    mf_module_print(seq, f);
    fclose(f);
    ck_assert_msg(strstr(buf, "scale: Scale") && strstr(buf, "total parameters: 1"), "print: %s", buf);
    mf_module_destroy(seq);
    mf_tensor_destroy(s);
    mf_tensor_destroy(x);
    mf_tensor_destroy(y);
}
END_TEST

START_TEST(other_layers)
{
    mf_module *e = mf_embedding_create(10, 4);
    mf_tensor *ix = TI64(MF_DIMS(2, 3), 1, 2, 3, 4, 5, 9);
    mf_tensor *y = mf_module_forward(e, ix);
    ck_expect_shape(y, MF_DIMS(2, 3, 4));
    mf_module *ln = mf_layer_norm_create(1, (const int64_t[]){4});
    mf_tensor *z = mf_module_forward(ln, y);
    ck_expect_shape(z, MF_DIMS(2, 3, 4));
    mf_module *ap = mf_adaptive_avg_pool2d_create(1, 1), *g = mf_gelu_create(), *fl = mf_flatten_create(1, -1);
    mf_tensor *img = mf_randn(MF_F32, MF_DIMS(2, 3, 5, 5)), *a = mf_module_forward(ap, img), *b = mf_module_forward(g, a),
              *c = mf_module_forward(fl, b);
    ck_expect_shape(c, MF_DIMS(2, 3));
    ck_assert_fails(mf_linear_create(-1, 2, true), MF_ERR_ARG, "-1");
    mf_conv2d_params grouped = {{1, 1}, {0, 0}, {1, 1}, 2};
    ck_assert_fails(mf_conv2d_create_ex(3, 4, 3, 3, &grouped, true), MF_ERR_ARG, "divisible by groups");
    ck_assert_fails(mf_model_create("resnet", 1, 28, 28, 10), MF_ERR_ARG, "resnet");
    mf_tensor *all[] = {ix, y, z, img, a, b, c};
    for (int k = 0; k < 7; k++) mf_tensor_destroy(all[k]);
    mf_module *mods[] = {e, ln, ap, g, fl};
    for (int k = 0; k < 5; k++) mf_module_destroy(mods[k]);
}
END_TEST

/* recompute of any module (mf_module_set_recompute): the same output,
 * gradients and BatchNorm running statistics as without, bit for bit,
 * and the statistics updated once */
static void run_recompute(bool on, mf_tensor **out, mf_tensor **grad, mf_tensor **mean, double *tracked)
{
    mf_manual_seed(5);
    mf_module *seq = mf_sequential_create();
    ck_assert_ok(mf_sequential_add(seq, "conv", mf_conv2d_create(2, 3, 3, 1, 1)));
    ck_assert_ok(mf_sequential_add(seq, "bn", mf_batch_norm2d_create(3)));
    ck_assert_ok(mf_sequential_add(seq, "drop", mf_dropout_create(0.3)));
    ck_assert_ok(mf_module_reset_parameters(seq, 9));
    ck_assert_ok(mf_module_set_recompute(mf_module_child(seq, "bn"), on));
    ck_assert_ok(mf_module_set_recompute(mf_module_child(seq, "drop"), on));
    ck_assert(mf_module_recomputes(mf_module_child(seq, "bn")) == on);
    ck_assert_str_eq(mf_module_child_name(seq, 1), "bn");
    mf_tensor *x = mf_randn(MF_F32, MF_DIMS(2, 2, 5, 5));
    mf_tensor *y = mf_module_forward(seq, x);
    mf_tensor *sq = mf_mul(y, y), *l = mf_sum_all(sq);
    ck_assert_ok(mf_backward(l));
    mf_tensor_destroy(sq);
    *out = y;
    *grad = mf_clone(mf_tensor_grad(mf_module_get(seq, "conv.weight")));
    *mean = mf_clone(mf_module_get(seq, "bn.running_mean"));
    int64_t zero = 0;
    *tracked = mf_tensor_get(mf_module_get(seq, "bn.num_batches_tracked"), &zero);
    mf_tensor_destroy(l);
    mf_tensor_destroy(x);
    mf_module_destroy(seq);
}

START_TEST(recompute_any_module)
{
    mf_tensor *y0, *g0, *m0, *y1, *g1, *m1;
    double t0, t1;
    run_recompute(false, &y0, &g0, &m0, &t0);
    run_recompute(true, &y1, &g1, &m1, &t1);
    ck_assert_msg(mf_test_max_diff(y0, y1, false) == 0, "the output differs with recompute");
    ck_assert_msg(mf_test_max_diff(g0, g1, false) == 0, "conv.weight's gradient differs with recompute");
    ck_assert_msg(mf_test_max_diff(m0, m1, false) == 0, "bn's running mean differs with recompute (updated twice?)");
    ck_assert(t0 == 1 && t1 == 1);
    mf_tensor *all[] = {y0, g0, m0, y1, g1, m1};
    for (int i = 0; i < 6; i++) mf_tensor_destroy(all[i]);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("nn");
    TCase *tc = tcase_create("modules");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, mlp_and_lenet_layout);
    tcase_add_test(tc, default_init);
    tcase_add_test(tc, init_is_keyed_by_name_and_seed);
    tcase_add_test(tc, buffers_and_modes);
    tcase_add_test(tc, custom_module);
    tcase_add_test(tc, other_layers);
    tcase_add_test(tc, recompute_any_module);
    suite_add_tcase(s, tc);
    return s;
}

MF_TEST_MAIN(suite)
