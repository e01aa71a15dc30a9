/*
 * tests/test_base.c - the base layer's address map (base/ptrmap.h),
 * linked against base/ alone: adds, lookups and removals checked
 * against a plain array, through growth and long probe runs.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include "base/ptrmap.h"

enum { N = 3000 };

/* Addresses that share low bits, so probe runs are long and wrap. */
static const void *addr(int i) { return (const void *)(uintptr_t)(0x1000 + (uintptr_t)i * 4096); }

START_TEST(add_find_remove)
{
    static int want[N];   /* -1: absent */
    mfi_ptr_map m = {0};
    for (int i = 0; i < N; i++) {
        *mfi_ptr_map_at(&m, addr(i), true) = i + 1;
        want[i] = i + 1;
    }
    ck_assert_uint_eq(m.n, N);
    ck_assert_uint_ge(m.cap, 2 * N);
    uint64_t x = 12345;   /* remove in a scrambled order, checking all after some */
    for (int round = 0; round < 2 * N; round++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        int i = (int)((x >> 33) % N);
        bool had = want[i] >= 0;
        ck_assert(mfi_ptr_map_remove(&m, addr(i)) == had);
        want[i] = -1;
        if (round % 250 == 0 || round == 2 * N - 1) {
            size_t live = 0;
            for (int j = 0; j < N; j++) {
                int *v = mfi_ptr_map_at(&m, addr(j), false);
                if (want[j] < 0) ck_assert_ptr_null(v);
                else {
                    ck_assert_ptr_nonnull(v);
                    ck_assert_int_eq(*v, want[j]);
                    live++;
                }
            }
            ck_assert_uint_eq(m.n, live);
        }
    }
    ck_assert(!mfi_ptr_map_remove(&m, addr(N + 1)));   /* never there */
    *mfi_ptr_map_at(&m, addr(7), true) = 70;          /* reusable after removals */
    ck_assert_int_eq(*mfi_ptr_map_at(&m, addr(7), false), 70);
    mfi_ptr_map_free(&m);
    ck_assert_uint_eq(m.n, 0);
    ck_assert(!mfi_ptr_map_remove(&m, addr(7)));   /* empty map */
}
END_TEST

static Suite *base_suite(void)
{
    Suite *s = suite_create("base");
    TCase *tc = tcase_create("ptrmap");
    tcase_add_test(tc, add_find_remove);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(base_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
