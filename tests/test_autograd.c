/*
 * tests/test_autograd.c - the tape: accumulation, no-grad scopes,
 * retain_graph, in-place checks, custom ops, the grad-ready hook and
 * freeing the tape.
 */
#include "tests/test_util.h"

START_TEST(accumulates)
{
    mf_tensor *x = T64(MF_DIMS(2), 3, -1);
    mf_tensor_set_requires_grad(x, true);
    /* y = x*x + 2x: dy/dx = 2x + 2, with x used three times */
    mf_tensor *sq = mf_mul(x, x), *two = mf_scale(x, 2), *y = mf_add(sq, two), *s = mf_sum_all(y);
    ck_assert_ok(mf_backward(s));
    ck_expect(mf_tensor_grad(x), 0, MF_DIMS(2), 8, 0);
    /* a second backward through a new graph adds into .grad */
    mf_tensor *sq2 = mf_mul(x, x), *s2 = mf_sum_all(sq2);
    ck_assert_ok(mf_backward(s2));
    ck_expect(mf_tensor_grad(x), 0, MF_DIMS(2), 14, -2);
    ck_assert(mf_tensor_is_leaf(x) && !mf_tensor_is_leaf(y));
    mf_tensor *all[] = {x, sq, two, y, s, sq2, s2};
    for (int k = 0; k < 7; k++) mf_tensor_destroy(all[k]);
}
END_TEST

START_TEST(no_grad_scopes)
{
    mf_tensor *x = T32(MF_DIMS(2), 1, 2);
    mf_tensor_set_requires_grad(x, true);
    mf_no_grad_begin();
    mf_no_grad_begin();
    mf_tensor *a = mf_mul(x, x);
    mf_no_grad_end();
    ck_assert(!mf_grad_enabled());
    mf_no_grad_end();
    ck_assert(mf_grad_enabled());
    ck_assert(!mf_tensor_requires_grad(a));
    ck_assert_fails(mf_backward(a), MF_ERR_STATE, "does not require grad");
    bool prev = mf_set_grad_enabled(false);
    ck_assert(prev);
    mf_tensor *b = mf_exp(x);
    ck_assert(!mf_tensor_requires_grad(b));
    mf_set_grad_enabled(true);
    mf_tensor *d = mf_tensor_detach(x);
    mf_tensor *c = mf_mul(d, d);
    ck_assert(!mf_tensor_requires_grad(c));
    ck_assert(mf_tensor_shares_storage(d, x));
    mf_tensor *all[] = {x, a, b, c, d};
    for (int k = 0; k < 5; k++) mf_tensor_destroy(all[k]);
}
END_TEST

START_TEST(retain_graph)
{
    mf_tensor *x = T64(MF_DIMS(1), 2);
    mf_tensor_set_requires_grad(x, true);
    mf_tensor *y = mf_pow(x, 3), *s = mf_sum_all(y);
    ck_assert_ok(mf_backward_ex(s, NULL, true));
    ck_assert_ok(mf_backward_ex(s, NULL, false));
    ck_expect(mf_tensor_grad(x), 1e-12, MF_DIMS(1), 24);
    ck_assert_fails(mf_backward(s), MF_ERR_STATE, "already freed", "retain_graph");
    mf_tensor_destroy(x);
    mf_tensor_destroy(y);
    mf_tensor_destroy(s);
}
END_TEST

START_TEST(non_scalar_output)
{
    mf_tensor *x = T64(MF_DIMS(2), 1, 2);
    mf_tensor_set_requires_grad(x, true);
    mf_tensor *y = mf_scale(x, 3);
    ck_assert_fails(mf_backward(y), MF_ERR_SHAPE, "[2]", "not a scalar");
    mf_tensor *g = T64(MF_DIMS(2), 1, 10);
    ck_assert_ok(mf_backward_ex(y, g, false));
    ck_expect(mf_tensor_grad(x), 0, MF_DIMS(2), 3, 30);
    mf_tensor *bad = T64(MF_DIMS(3), 1, 1, 1);
    ck_assert_fails(mf_backward_ex(y, bad, false), MF_ERR_SHAPE, "[3]", "[2]");
    mf_tensor *all[] = {x, y, g, bad};
    for (int k = 0; k < 4; k++) mf_tensor_destroy(all[k]);
}
END_TEST

START_TEST(in_place_after_save)
{
    mf_tensor *x = T64(MF_DIMS(2), 1, 2);
    mf_tensor_set_requires_grad(x, true);
    mf_tensor *y = mf_exp(x), *s = mf_sum_all(y);
    ck_assert_ok(mf_fill_(y, 0));   /* exp saved its output */
    ck_assert_fails(mf_backward(s), MF_ERR_STATE, "mf_exp", "modified in place");
    mf_tensor_destroy(x);
    mf_tensor_destroy(y);
    mf_tensor_destroy(s);
}
END_TEST

/* a user op: y = x^3 with backward 3x^2 */
static mf_tensor *cube_fwd(mf_custom_ctx *ctx, int n, mf_tensor *const *in)
{
    (void)n;
    if (mf_custom_save(ctx, in[0]) != MF_OK) return NULL;
    int *calls = mf_custom_user(ctx);
    (*calls)++;
    mf_tensor *sq = mf_mul(in[0], in[0]);
    mf_tensor *y = sq ? mf_mul(sq, in[0]) : NULL;
    mf_tensor_destroy(sq);
    return y;
}

static mf_status cube_bwd(mf_custom_ctx *ctx, mf_tensor *gy, mf_tensor **gx)
{
    mf_tensor *x = mf_custom_saved(ctx, 0);
    if (!x) return mf_last_status();
    if (!mf_custom_needs_grad(ctx, 0)) return MF_OK;
    mf_tensor *sq = mf_mul(x, x), *d = sq ? mf_scale(sq, 3) : NULL;
    gx[0] = d ? mf_mul(gy, d) : NULL;
    mf_tensor_destroy(sq);
    mf_tensor_destroy(d);
    return gx[0] ? MF_OK : mf_last_status();
}

static const mf_custom_op cube = {"cube", cube_fwd, cube_bwd};
static int cube_calls;

static mf_tensor *cube_fn(mf_tensor **in, void *u)
{
    (void)u;
    return mf_custom_apply(&cube, 1, in, &cube_calls);
}

START_TEST(custom_op)
{
    mf_tensor *x = T64(MF_DIMS(3), 1, -2, 0.5);
    mf_tensor_set_requires_grad(x, true);
    mf_tensor *y = cube_fn(&x, NULL);
    ck_expect(y, 1e-12, MF_DIMS(3), 1, -8, 0.125);
    ck_assert(mf_tensor_requires_grad(y));
    mf_tensor_destroy(y);
    mf_test_gradcheck("custom cube", cube_fn, 1, &x, NULL, 1e-6, 1e-8, 1e-6);
    ck_assert(cube_calls > 1);
    mf_tensor_destroy(x);
}
END_TEST

static int hook_calls;
static mf_tensor *hook_seen[4];

static void hook(mf_tensor *leaf, void *user)
{
    (void)user;
    /* the gradient is complete when the hook runs */
    ck_assert_ptr_nonnull(mf_tensor_grad(leaf));
    if (hook_calls < 4) hook_seen[hook_calls] = leaf;
    hook_calls++;
}

START_TEST(grad_ready_hook)
{
    /* w1 is used twice: its hook must fire once, after both uses */
    mf_tensor *w1 = T64(MF_DIMS(2), 1, 2), *w2 = T64(MF_DIMS(2), 3, 4);
    mf_tensor_set_requires_grad(w1, true);
    mf_tensor_set_requires_grad(w2, true);
    mf_autograd_set_grad_ready_hook(hook, NULL);
    mf_tensor *a = mf_mul(w1, w2), *b = mf_add(a, w1), *s = mf_sum_all(b);
    hook_calls = 0;
    ck_assert_ok(mf_backward(s));
    mf_autograd_set_grad_ready_hook(NULL, NULL);
    ck_assert_int_eq(hook_calls, 2);
    ck_assert(hook_seen[0] != hook_seen[1]);
    ck_expect(mf_tensor_grad(w1), 0, MF_DIMS(2), 4, 5);
    mf_tensor *all[] = {w1, w2, a, b, s};
    for (int k = 0; k < 5; k++) mf_tensor_destroy(all[k]);
}
END_TEST

START_TEST(tape_is_freed)
{
    mf_tensor *w = mf_randn(MF_F32, MF_DIMS(256, 256));
    mf_tensor_set_requires_grad(w, true);
    mf_tensor *x = mf_randn(MF_F32, MF_DIMS(64, 256));
    mf_memory_stats before, during, after;
    mf_memory_get_stats(&before);
    mf_tensor *h = x;
    mf_tensor_retain(h);
    for (int i = 0; i < 20; i++) {   /* a deep chain: the release must not recurse */
        mf_tensor *y = mf_matmul(h, w), *r = mf_tanh(y);
        mf_tensor_destroy(y);
        mf_tensor_destroy(h);
        h = r;
    }
    mf_tensor *s = mf_sum_all(h);
    mf_tensor_destroy(h);
    mf_memory_get_stats(&during);
    ck_assert(during.in_use > before.in_use + 20 * 64 * 256 * 4);   /* activations held by the tape */
    ck_assert_ok(mf_backward(s));
    mf_tensor_destroy(s);
    mf_memory_get_stats(&after);
    /* only w's gradient remains */
    ck_assert_msg(after.in_use <= before.in_use + 256 * 256 * 4 + 4096, "in use %lld before, %lld after",
                  (long long)before.in_use, (long long)after.in_use);
    mf_tensor_destroy(w);
    mf_tensor_destroy(x);
}
END_TEST

/* A gradient's bytes count as gradients in the allocator's breakdown
 * from when backward hands them to the parameter until they are freed;
 * the activations of the step stay tensors. */
START_TEST(gradients_in_breakdown)
{
    mf_tensor *w = mf_randn(MF_F32, MF_DIMS(128, 64));
    mf_tensor_set_requires_grad(w, true);
    mf_tensor *x = mf_randn(MF_F32, MF_DIMS(32, 128));
    mf_memory_breakdown b0, b1, b2, b3;
    mf_memory_get_breakdown(&b0, NULL);
    mf_tensor *y = mf_matmul(x, w), *s = mf_sum_all(y);
    mf_memory_get_breakdown(&b1, NULL);
    ck_assert_int_eq(b1.bytes[MF_MEM_GRADS], b0.bytes[MF_MEM_GRADS]);
    ck_assert(b1.bytes[MF_MEM_TENSORS] >= b0.bytes[MF_MEM_TENSORS] + 32 * 64 * 4);
    ck_assert_ok(mf_backward(s));
    mf_memory_get_breakdown(&b2, NULL);
    ck_assert_int_eq(b2.bytes[MF_MEM_GRADS] - b0.bytes[MF_MEM_GRADS], 128 * 64 * 4);
    /* a gradient set by hand counts too, and the one it replaces goes */
    mf_tensor *g = mf_zeros(MF_F32, MF_DIMS(128, 64));
    ck_assert_ok(mf_tensor_set_grad(w, g));
    mf_tensor_destroy(g);
    mf_memory_get_breakdown(&b3, NULL);
    ck_assert_int_eq(b3.bytes[MF_MEM_GRADS] - b0.bytes[MF_MEM_GRADS], 128 * 64 * 4);
    ck_assert_ok(mf_tensor_set_grad(w, NULL));
    mf_memory_get_breakdown(&b3, NULL);
    ck_assert_int_eq(b3.bytes[MF_MEM_GRADS], b0.bytes[MF_MEM_GRADS]);
    mf_tensor *all[] = {w, x, y, s};
    for (int k = 0; k < 4; k++) mf_tensor_destroy(all[k]);
}
END_TEST

START_TEST(long_chain_release)
{
    mf_tensor *x = mf_ones(MF_F32, MF_DIMS(4));
    mf_tensor_set_requires_grad(x, true);
    mf_tensor *h = mf_tensor_retain(x);
    for (int i = 0; i < 100000; i++) {
        mf_tensor *n = mf_add_scalar(h, 1e-6);
        mf_tensor_destroy(h);
        h = n;
    }
    mf_tensor_destroy(h);   /* frees 100000 nodes without deep recursion */
    mf_tensor_destroy(x);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("autograd");
    TCase *tc = tcase_create("tape");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, accumulates);
    tcase_add_test(tc, no_grad_scopes);
    tcase_add_test(tc, retain_graph);
    tcase_add_test(tc, non_scalar_output);
    tcase_add_test(tc, in_place_after_save);
    tcase_add_test(tc, custom_op);
    tcase_add_test(tc, grad_ready_hook);
    tcase_add_test(tc, tape_is_freed);
    tcase_add_test(tc, gradients_in_breakdown);
    tcase_add_test(tc, long_chain_release);
    suite_add_tcase(s, tc);
    return s;
}

MF_TEST_MAIN(suite)
