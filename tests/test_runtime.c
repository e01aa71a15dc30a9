/*
 * tests/test_runtime.c - start-up, threads, agreement, errors,
 * profiling and memory statistics.
 */
#include "tests/test_util.h"

START_TEST(init_and_ranks)
{
    ck_assert(mf_initialized());
    ck_assert_ok(mf_init(NULL, NULL));   /* nested: counted */
    ck_assert_ok(mf_finalize());
    ck_assert(mf_initialized());
    ck_assert(mf_rank() >= 0 && mf_rank() < mf_world_size());
    ck_assert(mf_local_rank() < mf_local_size() && mf_local_size() <= mf_world_size());
    ck_assert(strlen(mf_version()) > 0);
}
END_TEST

START_TEST(threads)
{
    ck_assert_ok(mf_set_threads(1));
    ck_assert_int_eq(mf_threads(), 1);
    ck_assert_ok(mf_set_threads(0));
    ck_assert(mf_threads() >= 1);
}
END_TEST

START_TEST(agreement)
{
    ck_assert_ok(mf_agree(MF_OK));
    mf_tensor *bad = mf_zeros(MF_F32, MF_DIMS(-1));
    ck_assert_ptr_null(bad);
    mf_status st = mf_agree(mf_last_status());
    ck_assert_int_ne(st, MF_OK);
    ck_assert(strstr(mf_last_error(), "negative") != NULL);
    mf_clear_error();
    ck_assert_str_eq(mf_last_error(), "");
    ck_assert_int_eq(mf_last_status(), MF_OK);
    ck_assert_str_eq(mf_status_string(MF_ERR_SHAPE), "MF_ERR_SHAPE");
}
END_TEST

START_TEST(profiling)
{
    mf_profile_reset();
    mf_profile_enable(true);
    mf_tensor *a = mf_ones(MF_F32, MF_DIMS(64, 64)), *c = mf_matmul(a, a), *r = mf_relu(c);
    mf_profile_enable(false);
    int64_t calls;
    mf_profile_seconds(MF_PROF_GEMM, &calls);
    ck_assert_int_eq(calls, 1);
    mf_profile_seconds(MF_PROF_ELEMENTWISE, &calls);
    ck_assert(calls >= 1);
    ck_assert_str_eq(mf_profile_class_name(MF_PROF_CONV), "conv");
    mf_tensor_destroy(a);
    mf_tensor_destroy(c);
    mf_tensor_destroy(r);
}
END_TEST

START_TEST(memory_cache)
{
    mf_memory_stats s0, s1, s2;
    mf_memory_get_stats(&s0);
    mf_tensor *t = mf_empty(MF_F32, MF_DIMS(1 << 20));
    mf_memory_get_stats(&s1);
    ck_assert(s1.in_use >= s0.in_use + (4 << 20));
    mf_tensor_destroy(t);
    t = mf_empty(MF_F32, MF_DIMS(1 << 20));   /* served from the cache */
    mf_memory_get_stats(&s2);
    ck_assert(s2.hits > s1.hits);
    mf_tensor_destroy(t);
    mf_memory_empty_cache();
    mf_memory_get_stats(&s2);
    ck_assert_int_eq(s2.cached, 0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("runtime");
    TCase *tc = tcase_create("runtime");
    tcase_add_test(tc, init_and_ranks);
    tcase_add_test(tc, threads);
    tcase_add_test(tc, agreement);
    tcase_add_test(tc, profiling);
    tcase_add_test(tc, memory_cache);
    suite_add_tcase(s, tc);
    return s;
}

MF_TEST_MAIN(suite)
