/*
 * tests/test_coll.c - the collective algorithms against exact sums and
 * against the MPI library's own result: every algorithm, counts 0, 1,
 * odd, fewer than the ranks, and large; f32, f64, i32, i64. Runs on 1 to
 * 4 ranks (tests/coll.sh).
 */
#include <math.h>
#include <stdlib.h>
#include "tests/test_util.h"

static const mf_coll_algo algos[] = {MF_COLL_MPI, MF_COLL_RING, MF_COLL_RHD, MF_COLL_AUTO};
#define NALGOS (int)(sizeof algos / sizeof algos[0])
static const int64_t counts[] = {0, 1, 2, 3, 7, 1000, 65537, (1 << 20) + 3};
#define NCOUNTS (int)(sizeof counts / sizeof counts[0])

/* integer values whose sums are exact in every dtype */
static double value(int rank, int64_t i)
{
    return (double)((i * 7 + rank * 13) % 101) - 50.0;
}

START_TEST(test_allreduce_exact)
{
    const mf_dtype dts[] = {MF_F32, MF_F64, MF_I32, MF_I64};
    int n = mf_world_size(), r = mf_rank();
    for (int a = 0; a < NALGOS; a++)
        for (int d = 0; d < 4; d++)
            for (int k = 0; k < NCOUNTS; k++) {
                int64_t cnt = counts[k];
                size_t es = mf_dtype_size(dts[d]);
                void *buf = malloc((size_t)cnt * es + 8);
                for (int64_t i = 0; i < cnt; i++) {
                    double v = value(r, i);
                    if (dts[d] == MF_F32) ((float *)buf)[i] = (float)v;
                    else if (dts[d] == MF_F64) ((double *)buf)[i] = v;
                    else if (dts[d] == MF_I32) ((int32_t *)buf)[i] = (int32_t)v;
                    else ((int64_t *)buf)[i] = (int64_t)v;
                }
                ck_assert_ok(mf_allreduce(buf, cnt, dts[d], algos[a]));
                int64_t bad = -1;
                for (int64_t i = 0; i < cnt && bad < 0; i++) {
                    double want = 0, got;
                    for (int q = 0; q < n; q++) want += value(q, i);
                    if (dts[d] == MF_F32) got = ((float *)buf)[i];
                    else if (dts[d] == MF_F64) got = ((double *)buf)[i];
                    else if (dts[d] == MF_I32) got = ((int32_t *)buf)[i];
                    else got = (double)((int64_t *)buf)[i];
                    if (got != want) bad = i;
                }
                free(buf);
                ck_assert_msg(mf_agree(bad < 0 ? MF_OK : MF_ERR_INTERNAL) == MF_OK,
                              "%s, %s, count %lld: element %lld wrong on rank %d", mf_coll_algo_name(algos[a]),
                              mf_dtype_name(dts[d]), (long long)cnt, (long long)bad, r);
            }
}
END_TEST

/* random floats: each algorithm within summation tolerance of MPI's */
START_TEST(test_allreduce_against_mpi)
{
    int64_t cnt = 100003;
    float *ref = malloc((size_t)cnt * sizeof *ref), *x = malloc((size_t)cnt * sizeof *x);
    uint64_t s = 0x9e3779b9u * (uint64_t)(mf_rank() + 1);
    for (int64_t i = 0; i < cnt; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        ref[i] = (float)((double)(s >> 11) / 9007199254740992.0 - 0.5);
    }
    float *want = malloc((size_t)cnt * sizeof *want);
    for (int64_t i = 0; i < cnt; i++) want[i] = ref[i];
    ck_assert_ok(mf_allreduce(want, cnt, MF_F32, MF_COLL_MPI));
    for (int a = 1; a < NALGOS; a++) {
        for (int64_t i = 0; i < cnt; i++) x[i] = ref[i];
        ck_assert_ok(mf_allreduce(x, cnt, MF_F32, algos[a]));
        double worst = 0;
        for (int64_t i = 0; i < cnt; i++) worst = fmax(worst, fabs((double)x[i] - want[i]));
        ck_assert_msg(mf_agree(worst <= 1e-6 ? MF_OK : MF_ERR_INTERNAL) == MF_OK, "%s: max difference %g from MPI's",
                      mf_coll_algo_name(algos[a]), worst);
    }
    free(ref);
    free(x);
    free(want);
}
END_TEST

START_TEST(test_algo_names)
{
    mf_coll_algo a;
    ck_assert_ok(mf_coll_algo_parse("rhd", &a));
    ck_assert_int_eq(a, MF_COLL_RHD);
    ck_assert_str_eq(mf_coll_algo_name(MF_COLL_RING), "ring");
    ck_assert_fails(mf_coll_algo_parse("butterfly", &a), MF_ERR_ARG, "'butterfly' is not one of");
    float v = 1;
    ck_assert_fails(mf_allreduce(&v, 1, MF_F32, (mf_coll_algo)42), MF_ERR_ARG, "unknown algorithm 42");
}
END_TEST

Suite *coll_suite(void)
{
    Suite *s = suite_create("coll");
    TCase *tc = tcase_create("coll");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_allreduce_exact);
    tcase_add_test(tc, test_allreduce_against_mpi);
    tcase_add_test(tc, test_algo_names);
    suite_add_tcase(s, tc);
    return s;
}

MF_TEST_MAIN(coll_suite)
