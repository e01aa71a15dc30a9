/*
 * tests/test_coll.c - the collective algorithms against exact sums and
 * against the MPI library's own result: every algorithm, counts 0, 1,
 * odd, fewer than the ranks, and large; f32, f64, i32, i64; and the
 * same for reduce-scatter and allgather. Runs on 1 to 4 ranks, and on
 * emulated nodes (tests/coll.sh).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "tests/test_util.h"

static const mf_coll_algo algos[] = {MF_COLL_MPI, MF_COLL_RING, MF_COLL_RHD, MF_COLL_HIER, MF_COLL_AUTO};
static const mf_coll_algo piece_algos[] = {MF_COLL_MPI, MF_COLL_RING, MF_COLL_HIER, MF_COLL_AUTO};
#define NPIECE_ALGOS (int)(sizeof piece_algos / sizeof piece_algos[0])
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

static void fill(mf_dtype dt, void *buf, int64_t i, double v)
{
    if (dt == MF_F32) ((float *)buf)[i] = (float)v;
    else if (dt == MF_F64) ((double *)buf)[i] = v;
    else if (dt == MF_I32) ((int32_t *)buf)[i] = (int32_t)v;
    else ((int64_t *)buf)[i] = (int64_t)v;
}

static double get(mf_dtype dt, const void *buf, int64_t i)
{
    if (dt == MF_F32) return ((const float *)buf)[i];
    if (dt == MF_F64) return ((const double *)buf)[i];
    if (dt == MF_I32) return ((const int32_t *)buf)[i];
    return (double)((const int64_t *)buf)[i];
}

/* reduce-scatter: piece q of rank r holds value(r, q * cnt + i); rank q
 * gets sum over r. allgather: rank r sends value(r, i); piece r of the
 * result must be it. Both exact in every dtype. */
START_TEST(test_pieces_exact)
{
    const mf_dtype dts[] = {MF_F32, MF_F64, MF_I32, MF_I64};
    int n = mf_world_size(), r = mf_rank();
    for (int a = 0; a < NPIECE_ALGOS; a++)
        for (int d = 0; d < 4; d++)
            for (int k = 0; k < NCOUNTS - 1; k++) {
                int64_t cnt = counts[k];
                size_t es = mf_dtype_size(dts[d]);
                void *all = malloc((size_t)(cnt * n) * es + 8), *one = malloc((size_t)cnt * es + 8);
                for (int64_t i = 0; i < cnt * n; i++) fill(dts[d], all, i, value(r, i));
                ck_assert_ok(mf_reduce_scatter(all, one, cnt, dts[d], piece_algos[a]));
                int64_t bad = -1;
                for (int64_t i = 0; i < cnt && bad < 0; i++) {
                    double want = 0;
                    for (int q = 0; q < n; q++) want += value(q, r * cnt + i);
                    if (get(dts[d], one, i) != want) bad = i;
                }
                ck_assert_msg(mf_agree(bad < 0 ? MF_OK : MF_ERR_INTERNAL) == MF_OK,
                              "reduce-scatter %s, %s, count %lld: element %lld wrong on rank %d",
                              mf_coll_algo_name(piece_algos[a]), mf_dtype_name(dts[d]), (long long)cnt,
                              (long long)bad, r);
                for (int64_t i = 0; i < cnt; i++) fill(dts[d], one, i, value(r, i));
                ck_assert_ok(mf_allgather(one, all, cnt, dts[d], piece_algos[a]));
                for (int64_t i = 0; i < cnt * n && bad < 0; i++)
                    if (get(dts[d], all, i) != value((int)(i / cnt), i % cnt)) bad = i;
                ck_assert_msg(mf_agree(bad < 0 ? MF_OK : MF_ERR_INTERNAL) == MF_OK,
                              "allgather %s, %s, count %lld: element %lld wrong on rank %d",
                              mf_coll_algo_name(piece_algos[a]), mf_dtype_name(dts[d]), (long long)cnt,
                              (long long)bad, r);
                free(all);
                free(one);
            }
}
END_TEST

/* a float with all mantissa bits busy, from (a, i) alone */
static float noise(uint64_t a, int64_t i)
{
    uint64_t s = (a + 1) * 0x9e3779b97f4a7c15ULL ^ (uint64_t)i * 0xbf58476d1ce4e5b9ULL;
    s ^= s >> 31;
    s *= 0x94d049bb133111ebULL;
    s ^= s >> 29;
    return (float)((double)(s >> 11) / 9007199254740992.0 - 0.5) * (float)(1 + (s & 7));
}

/* 12 virtual pieces: the sum's bits equal the sequential sum in piece
 * order, by every algorithm and so on every rank count */
START_TEST(test_pieces_deterministic)
{
    const int V = 12;
    const int64_t cnt = 10007;
    int first, nl;
    mf_pieces_range(V, &first, &nl);
    float *local = malloc((size_t)(nl * cnt + 1) * sizeof(float)), *out = malloc((size_t)cnt * sizeof(float));
    float *want = malloc((size_t)cnt * sizeof(float));
    for (int p = 0; p < nl; p++)
        for (int64_t i = 0; i < cnt; i++) local[p * cnt + i] = noise((uint64_t)(first + p), i);
    for (int64_t i = 0; i < cnt; i++) {
        float acc = noise(0, i);
        for (int v = 1; v < V; v++) acc += noise((uint64_t)v, i);
        want[i] = acc;
    }
    for (int a = 0; a < NALGOS; a++) {
        for (int64_t i = 0; i < cnt; i++) out[i] = -1;
        ck_assert_ok(mf_allreduce_pieces(local, out, cnt, MF_F32, V, algos[a]));
        int bad = memcmp(out, want, (size_t)cnt * sizeof(float)) != 0;
        ck_assert_msg(mf_agree(bad ? MF_ERR_INTERNAL : MF_OK) == MF_OK, "%s: not the sequential sum's bits",
                      mf_coll_algo_name(algos[a]));
    }
    ck_assert_fails(mf_allreduce_pieces(local, out, cnt, MF_F32, 0, MF_COLL_AUTO), MF_ERR_ARG, "npieces 0 < 1");
    free(local);
    free(out);
    free(want);
}
END_TEST

/* MF_DETERMINISTIC=1 (tests/coll.sh): every algorithm sums in rank
 * order, bit for bit */
START_TEST(test_deterministic_env)
{
    if (!getenv("MF_DETERMINISTIC")) return;
    int n = mf_world_size(), r = mf_rank();
    const int64_t cnt = 300007;   /* big enough for the hierarchical and ring paths */
    float *x = malloc((size_t)cnt * n * sizeof(float)), *want = malloc((size_t)cnt * n * sizeof(float));
    for (int64_t i = 0; i < cnt * n; i++) {
        float acc = noise(0, i);
        for (int q = 1; q < n; q++) acc += noise((uint64_t)q, i);
        want[i] = acc;
    }
    for (int a = 0; a < NALGOS; a++) {
        for (int64_t i = 0; i < cnt; i++) x[i] = noise((uint64_t)r, i);
        ck_assert_ok(mf_allreduce(x, cnt, MF_F32, algos[a]));
        int bad = memcmp(x, want, (size_t)cnt * sizeof(float)) != 0;
        ck_assert_msg(mf_agree(bad ? MF_ERR_INTERNAL : MF_OK) == MF_OK, "allreduce %s: not rank order's bits",
                      mf_coll_algo_name(algos[a]));
    }
    float *piece = malloc((size_t)cnt * sizeof(float));
    for (int a = 0; a < NPIECE_ALGOS; a++) {
        for (int64_t i = 0; i < cnt * n; i++) x[i] = noise((uint64_t)r, i);
        ck_assert_ok(mf_reduce_scatter(x, piece, cnt, MF_F32, piece_algos[a]));
        int bad = memcmp(piece, want + r * cnt, (size_t)cnt * sizeof(float)) != 0;
        ck_assert_msg(mf_agree(bad ? MF_ERR_INTERNAL : MF_OK) == MF_OK, "reduce-scatter %s: not rank order's bits",
                      mf_coll_algo_name(piece_algos[a]));
    }
    free(piece);
    free(x);
    free(want);
}
END_TEST

/* several requests of every algorithm in flight at once, while this
 * thread computes; each must equal the blocking result */
START_TEST(test_nonblocking)
{
    int n = mf_world_size(), r = mf_rank();
    enum { NREQ = 6 };
    int64_t cnt = 70001;
    float *buf[NREQ];
    mf_request *req[NREQ];
    for (int k = 0; k < NREQ; k++) {
        buf[k] = malloc((size_t)cnt * n * sizeof(float));
        for (int64_t i = 0; i < cnt * n; i++) buf[k][i] = (float)value(r + k, i);
    }
    float *piece = malloc((size_t)cnt * sizeof(float)), *gath = malloc((size_t)cnt * n * sizeof(float));
    for (int k = 0; k < NREQ - 2; k++) ck_assert_ok(mf_iallreduce(buf[k], cnt, MF_F32, algos[k % NALGOS], &req[k]));
    ck_assert_ok(mf_ireduce_scatter(buf[NREQ - 2], piece, cnt, MF_F32, MF_COLL_AUTO, &req[NREQ - 2]));
    for (int64_t i = 0; i < cnt; i++) buf[NREQ - 1][i] = (float)value(r, i);
    ck_assert_ok(mf_iallgather(buf[NREQ - 1], gath, cnt, MF_F32, MF_COLL_AUTO, &req[NREQ - 1]));
    volatile double busy = 0;   /* the caller computes meanwhile */
    for (int i = 0; i < 2000000; i++) busy += i * 1e-9;
    int bad = 0;
    for (int k = 0; k < NREQ; k++) {
        ck_assert_ok(mf_wait(req[k]));
        for (int64_t i = 0; k < NREQ - 2 && i < cnt && !bad; i++) {
            double want = 0;
            for (int q = 0; q < n; q++) want += value(q + k, i);
            bad = buf[k][i] != want;
        }
    }
    for (int64_t i = 0; i < cnt && !bad; i++) {
        double want = 0;
        for (int q = 0; q < n; q++) want += value(q + NREQ - 2, r * cnt + i);
        bad = piece[i] != want;
    }
    for (int64_t i = 0; i < cnt * n && !bad; i++) bad = gath[i] != (float)value((int)(i / cnt), i % cnt);
    ck_assert_msg(mf_agree(bad ? MF_ERR_INTERNAL : MF_OK) == MF_OK, "a non-blocking result is wrong on rank %d", r);
    ck_assert(mf_test(NULL));
    ck_assert_fails(mf_iallreduce(buf[0], 1, MF_F32, MF_COLL_AUTO, NULL), MF_ERR_ARG, "req is NULL");
    for (int k = 0; k < NREQ; k++) free(buf[k]);
    free(piece);
    free(gath);
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
    ck_assert_ok(mf_coll_algo_parse("hier", &a));
    ck_assert_int_eq(a, MF_COLL_HIER);
    float w[4];
    ck_assert_fails(mf_reduce_scatter(w, w, 1, MF_F32, MF_COLL_RHD), MF_ERR_ARG, "reduce-scatter has no 'rhd'");
}
END_TEST

Suite *coll_suite(void)
{
    Suite *s = suite_create("coll");
    TCase *tc = tcase_create("coll");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_allreduce_exact);
    tcase_add_test(tc, test_allreduce_against_mpi);
    tcase_add_test(tc, test_pieces_exact);
    tcase_add_test(tc, test_nonblocking);
    tcase_add_test(tc, test_pieces_deterministic);
    tcase_add_test(tc, test_deterministic_env);
    tcase_add_test(tc, test_algo_names);
    suite_add_tcase(s, tc);
    return s;
}

MF_TEST_MAIN(coll_suite)
