/*
 * tests/test_gpt.c - the GPT model: nanoGPT's parameter names, shapes
 * and order; GPT-2's initialisation; the fused head's loss against the
 * logits' cross entropy; generation with the KV cache against full
 * forward passes; the same seed gives the same tokens.
 */
#include <math.h>
#include <stdio.h>
#include "tests/test_util.h"

static const mf_gpt_config tiny = {2, 2, 16, 8, 11, 0.0};

START_TEST(names_and_init)
{
    mf_manual_seed(1);
    mf_module *m = mf_model_gpt(&tiny);
    ck_assert_nonnull(m);
    mf_tensor_list *l = mf_module_parameters(m);
    const char *want[] = {"transformer.wte.weight", "transformer.wpe.weight", "transformer.h.0.ln_1.weight",
                          "transformer.h.0.ln_1.bias", "transformer.h.0.attn.c_attn.weight",
                          "transformer.h.0.attn.c_attn.bias", "transformer.h.0.attn.c_proj.weight",
                          "transformer.h.0.attn.c_proj.bias", "transformer.h.0.ln_2.weight", "transformer.h.0.ln_2.bias",
                          "transformer.h.0.mlp.c_fc.weight", "transformer.h.0.mlp.c_fc.bias",
                          "transformer.h.0.mlp.c_proj.weight", "transformer.h.0.mlp.c_proj.bias"};
    ck_assert_int_eq(l->n, 2 + 12 * 2 + 2);
    for (int i = 0; i < 14; i++) ck_assert_str_eq(l->items[i].name, want[i]);
    ck_assert_str_eq(l->items[l->n - 1].name, "transformer.ln_f.bias");
    ck_expect_shape(mf_module_get(m, "transformer.h.1.attn.c_attn.weight"), MF_DIMS(3, 16, 16));
    ck_expect_shape(mf_module_get(m, "transformer.h.1.mlp.c_proj.weight"), MF_DIMS(16, 64));
    ck_expect_shape(mf_module_get(m, "transformer.wpe.weight"), MF_DIMS(8, 16));
    /* N(0, 0.02); residual projections 0.02 / sqrt(2 n_layer); zero biases, unit LayerNorm weights */
    mf_tensor *w = mf_module_get(m, "transformer.h.0.mlp.c_fc.weight"), *p = mf_module_get(m, "transformer.h.0.mlp.c_proj.weight");
    mf_tensor *sw = mf_mul(w, w), *mw = mf_mean_all(sw), *sp = mf_mul(p, p), *mp = mf_mean_all(sp);
    double stdw = sqrt(mf_tensor_item(mw)), stdp = sqrt(mf_tensor_item(mp));
    ck_assert_msg(fabs(stdw - 0.02) < 0.003 && fabs(stdp - 0.01) < 0.0015, "std %g and %g", stdw, stdp);
    mf_tensor *b = mf_module_get(m, "transformer.h.0.attn.c_attn.bias"), *babs = mf_abs(b), *bs = mf_sum_all(babs);
    mf_tensor *g = mf_module_get(m, "transformer.ln_f.weight"), *gs = mf_sum_all(g);
    ck_assert(mf_tensor_item(bs) == 0 && mf_tensor_item(gs) == 16);
    ck_assert_str_eq(mf_module_type(m), "GPT");
    ck_assert_int_eq(mf_gpt_config_of(m)->n_head, 2);
    mf_tensor *all[] = {sw, mw, sp, mp, babs, bs, gs};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) mf_tensor_destroy(all[i]);
    mf_tensor_list_destroy(l);
    mf_module_destroy(m);
}
END_TEST

START_TEST(fused_head_loss)
{
    mf_manual_seed(2);
    mf_module *m = mf_model_gpt(&tiny);
    ck_assert_nonnull(m);
    mf_tensor *u = mf_rand(MF_F64, MF_DIMS(3, 8)), *s = mf_scale(u, 10.999), *x = mf_cast(s, MF_I64);
    mf_tensor *u2 = mf_rand(MF_F64, MF_DIMS(3, 8)), *s2 = mf_scale(u2, 10.999), *y = mf_cast(s2, MF_I64);
    mf_tensor *loss = mf_gpt_loss(m, x, y);
    ck_assert_nonnull(loss);
    mf_tensor *lg = mf_module_forward(m, x);
    ck_expect_shape(lg, MF_DIMS(3, 8, 11));
    mf_tensor *l2 = mf_reshape(lg, MF_DIMS(24, 11)), *y1 = mf_reshape(y, MF_DIMS(24));
    mf_tensor *ref = mf_cross_entropy(l2, y1, MF_REDUCTION_MEAN);
    ck_assert_msg(fabs(mf_tensor_item(loss) - mf_tensor_item(ref)) < 1e-6, "%g vs %g", mf_tensor_item(loss), mf_tensor_item(ref));
    ck_assert_msg(fabs(mf_tensor_item(loss) - log(11.0)) < 0.1, "an untrained model is near uniform: %g", mf_tensor_item(loss));
    /* too long a context is refused */
    mf_tensor *long_x = mf_zeros(MF_I64, MF_DIMS(1, 9));
    ck_assert_fails(mf_gpt_loss(m, long_x, long_x), MF_ERR_SHAPE, "seq_len 8");
    mf_tensor *all[] = {u, s, x, u2, s2, y, loss, lg, l2, y1, ref, long_x};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) mf_tensor_destroy(all[i]);
    mf_module_destroy(m);
}
END_TEST

START_TEST(generation)
{
    mf_manual_seed(3);
    mf_module *m = mf_model_gpt(&tiny);
    ck_assert_nonnull(m);
    /* a trained-looking model: larger weights make the argmax clear */
    mf_tensor_list *l = mf_module_parameters(m);
    for (int i = 0; i < l->n; i++) ck_assert_ok(mf_scale_(l->items[i].tensor, 20.0));
    const int64_t prompt[3] = {1, 4, 2};
    int64_t a[3 + 12], b[3 + 12], c[3 + 12];
    mf_gpt_gen_opts o = {0.0, 0, 0, true};
    ck_assert_ok(mf_gpt_generate(m, prompt, 3, 12, &o, a));   /* 15 > seq_len 8: the window slides */
    o.use_cache = false;
    ck_assert_ok(mf_gpt_generate(m, prompt, 3, 12, &o, b));
    for (int i = 0; i < 15; i++) ck_assert_msg(a[i] == b[i], "token %d: cached %lld, full %lld", i, (long long)a[i], (long long)b[i]);
    /* sampling from the initial, nearly uniform model: the same seed, the
     * same tokens, with and without the cache; another seed, others */
    for (int i = 0; i < l->n; i++) ck_assert_ok(mf_scale_(l->items[i].tensor, 1.0 / 20.0));
    o = (mf_gpt_gen_opts){1.0, 5, 42, true};
    ck_assert_ok(mf_gpt_generate(m, prompt, 3, 12, &o, a));
    o.use_cache = false;
    ck_assert_ok(mf_gpt_generate(m, prompt, 3, 12, &o, b));
    o.seed = 43;
    ck_assert_ok(mf_gpt_generate(m, prompt, 3, 12, &o, c));
    bool differ = false;
    for (int i = 0; i < 15; i++) {
        ck_assert_int_eq(a[i], b[i]);
        ck_assert(a[i] >= 0 && a[i] < 11);
        differ |= a[i] != c[i];
    }
    ck_assert_msg(differ, "seeds 42 and 43 gave the same 12 tokens");
    const int64_t bad[1] = {11};
    ck_assert_fails(mf_gpt_generate(m, bad, 1, 1, &o, a), MF_ERR_ARG, "outside the vocabulary");
    mf_tensor_list_destroy(l);
    mf_module_destroy(m);
}
END_TEST

START_TEST(config_errors)
{
    mf_gpt_config c;
    ck_assert_ok(mf_gpt_preset("gpt2", &c));
    ck_assert(c.n_layer == 12 && c.n_head == 12 && c.n_embd == 768 && c.seq_len == 1024 && c.vocab_size == 50257);
    ck_assert_fails(mf_gpt_preset("gpt5", &c), MF_ERR_ARG, "unknown GPT preset 'gpt5'");
    mf_gpt_config bad = {2, 3, 16, 8, 11, 0.0};
    ck_assert_fails(mf_model_gpt(&bad), MF_ERR_ARG, "divisible");
}
END_TEST

static Suite *gpt_suite(void)
{
    Suite *s = suite_create("gpt");
    TCase *tc = tcase_create("gpt");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, names_and_init);
    tcase_add_test(tc, fused_head_loss);
    tcase_add_test(tc, generation);
    tcase_add_test(tc, config_errors);
    suite_add_tcase(s, tc);
    return s;
}

MF_TEST_MAIN(gpt_suite)
