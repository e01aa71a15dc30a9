/*
 * tests/test_pipeline.c - cutting a Sequential into pipeline stages:
 * the balanced cut is the best one (against every cut, by brute force),
 * explicit cuts parse, and bad requests say what is wrong; and the
 * non-blocking transfers that carry activations and gradients between
 * stage placements (1 rank in make check, 2-4 ranks in tests/pipeline.sh);
 * the GPipe and 1F1B orders: complete, deadlock-free, with the bubble
 * and the activation memory they promise.
 */
#include <stdlib.h>
#include <string.h>
#include "tests/test_util.h"

/* Linear layers of the given widths with a ReLU after each */
static mf_module *chain(int n, const int64_t *widths)
{
    mf_module *m = mf_sequential_create();
    for (int i = 0; i + 1 < n; i++) {
        ck_assert_ok(mf_sequential_add(m, NULL, mf_linear_create(widths[i], widths[i + 1], true)));
        ck_assert_ok(mf_sequential_add(m, NULL, mf_relu_create()));
    }
    return m;
}

/* the heaviest stage of a cut, and its most children */
static void weigh(const mf_module *m, int P, const int *first, int64_t *heavy, int *layers)
{
    *heavy = 0;
    *layers = 0;
    for (int s = 0; s < P; s++) {
        int64_t w = 0;
        for (int i = first[s]; i < first[s + 1]; i++) w += mf_module_num_parameters(mf_module_child_at(m, i));
        if (w > *heavy) *heavy = w;
        if (first[s + 1] - first[s] > *layers) *layers = first[s + 1] - first[s];
    }
}

/* the lightest heaviest stage over every cut into P stages */
static int64_t brute(const mf_module *m, int n, int P, int *first, int s, int64_t best)
{
    if (s == P) {
        first[P] = n;
        int64_t h;
        int l;
        weigh(m, P, first, &h, &l);
        return h < best ? h : best;
    }
    for (int c = first[s - 1] + 1; c <= n - (P - s); c++) {
        first[s] = c;
        best = brute(m, n, P, first, s + 1, best);
    }
    return best;
}

START_TEST(test_balance_is_optimal)
{
    const int64_t widths[][6] = {{8, 64, 64, 8, 4, 2}, {100, 2, 2, 2, 50, 3}, {5, 5, 5, 5, 5, 5}, {3, 300, 1, 300, 3, 7}};
    for (int k = 0; k < 4; k++) {
        mf_module *m = chain(6, widths[k]);
        int n = mf_module_num_children(m);
        ck_assert_int_eq(n, 10);
        for (int P = 1; P <= n; P++) {
            int first[MF_MAX_STAGES + 1], f2[MF_MAX_STAGES + 1] = {0};
            ck_assert_ok(mf_pipeline_balance(m, P, first));
            ck_assert_int_eq(first[0], 0);
            ck_assert_int_eq(first[P], n);
            for (int s = 0; s < P; s++) ck_assert_msg(first[s] < first[s + 1], "stage %d of %d is empty", s, P);
            int64_t heavy;
            int layers;
            weigh(m, P, first, &heavy, &layers);
            int64_t best = brute(m, n, P, f2, 1, INT64_MAX);
            ck_assert_msg(heavy == best, "model %d, %d stages: heaviest stage %lld, the best cut has %lld", k, P,
                          (long long)heavy, (long long)best);
        }
        mf_module_destroy(m);
    }
}
END_TEST

START_TEST(test_cuts_and_errors)
{
    const int64_t w[] = {4, 4, 4, 4};
    mf_module *m = chain(4, w);   /* 6 children */
    int P, first[MF_MAX_STAGES + 1];
    ck_assert_ok(mf_pipeline_parse_cuts(m, "2,4", &P, first));
    ck_assert_int_eq(P, 3);
    ck_assert_int_eq(first[1], 2);
    ck_assert_int_eq(first[2], 4);
    ck_assert_int_eq(first[3], 6);
    ck_assert_fails(mf_pipeline_parse_cuts(m, "4,2", &P, first), MF_ERR_ARG, "cut 2 must be greater than 4");
    ck_assert_fails(mf_pipeline_parse_cuts(m, "6", &P, first), MF_ERR_ARG, "the model has 6 layers");
    ck_assert_fails(mf_pipeline_parse_cuts(m, "2,x", &P, first), MF_ERR_ARG, "'x' is not a layer index");
    ck_assert_fails(mf_pipeline_balance(m, 7, first), MF_ERR_ARG, "7 stages for a model of 6 layers");
    ck_assert_fails(mf_pipeline_balance(m, 0, first), MF_ERR_ARG, "(it takes 1 to 6 stages)");
    mf_module *lin = mf_linear_create(2, 2, true);
    ck_assert_fails(mf_pipeline_balance(lin, 1, first), MF_ERR_ARG, "has no layers to cut into stages");
    mf_module_destroy(lin);
    /* LeNet in 2 stages: both hold parameters (the dense layer is not alone with everything) */
    mf_module *lenet = mf_model_lenet(1, 28, 28, 10);
    ck_assert_nonnull(lenet);
    ck_assert_ok(mf_pipeline_balance(lenet, 2, first));
    int64_t heavy;
    int layers;
    weigh(lenet, 2, first, &heavy, &layers);
    ck_assert(heavy < mf_module_num_parameters(lenet));
    mf_module_destroy(lenet);
    mf_module_destroy(m);
}
END_TEST

/* Every micro-batch runs forward then backward once per stage, backwards
 * in micro-batch order; GPipe holds all M activations, 1F1B at most
 * P - s. Run together with unit-time forwards and backwards (forward m
 * on stage s needs stage s-1's; backward m needs stage s+1's), the
 * stages finish without deadlock in (M + P - 1) * 2 units: the bubble
 * is (P - 1) / (M + P - 1) for both schedules. */
START_TEST(test_schedules)
{
    enum { PMAX = 6, MMAX = 9 };
    for (int k = 0; k < 2; k++) {
        mf_pipeline_schedule sc = k ? MF_PIPELINE_1F1B : MF_PIPELINE_GPIPE;
        const char *name = mf_pipeline_schedule_name(sc);
        for (int P = 1; P <= PMAX; P++)
            for (int M = 1; M <= MMAX; M++) {
                int ops[PMAX][2 * MMAX], pos[PMAX] = {0}, fdone[PMAX][MMAX], bdone[PMAX][MMAX], free_at[PMAX] = {0};
                for (int s = 0; s < P; s++) {
                    ck_assert_ok(mf_pipeline_order(sc, P, s, M, ops[s]));
                    int held = 0, most = 0, nextb = 0, seenf[MMAX] = {0};
                    for (int i = 0; i < 2 * M; i++) {
                        int m = ops[s][i] >= 0 ? ops[s][i] : ~ops[s][i];
                        ck_assert(m >= 0 && m < M);
                        if (ops[s][i] >= 0) {
                            ck_assert_msg(!seenf[m]++, "forward %d twice", m);
                            if (++held > most) most = held;
                        } else {
                            ck_assert_msg(seenf[m] && m == nextb++, "%s P=%d M=%d stage %d: backward %d out of order",
                                          name, P, M, s, m);
                            held--;
                        }
                        fdone[s][m] = bdone[s][m] = -1;
                    }
                    int bound = sc == MF_PIPELINE_GPIPE ? M : (P - s < M ? P - s : M);
                    ck_assert_msg(most == bound, "%s P=%d M=%d stage %d holds %d micro-batches, expected %d", name, P,
                                  M, s, most, bound);
                }
                for (bool progress = true; progress;) {   /* each op takes one unit once its input is there */
                    progress = false;
                    for (int s = 0; s < P; s++) {
                        if (pos[s] == 2 * M) continue;
                        int op = ops[s][pos[s]], m = op >= 0 ? op : ~op;
                        int dep = op >= 0 ? (s ? fdone[s - 1][m] : 0) : (s + 1 < P ? bdone[s + 1][m] : 0);
                        if (dep < 0) continue;
                        int t = (dep > free_at[s] ? dep : free_at[s]) + 1;
                        if (op >= 0) fdone[s][m] = t;
                        else bdone[s][m] = t;
                        free_at[s] = t;
                        pos[s]++;
                        progress = true;
                    }
                }
                int end = 0;
                for (int s = 0; s < P; s++) {
                    ck_assert_msg(pos[s] == 2 * M, "%s P=%d M=%d: stage %d deadlocks at op %d", name, P, M, s, pos[s]);
                    if (free_at[s] > end) end = free_at[s];
                }
                ck_assert_msg(end == 2 * (M + P - 1), "%s P=%d M=%d: %d units, expected %d", name, P, M, end,
                              2 * (M + P - 1));
            }
    }
    mf_pipeline_schedule sc;
    ck_assert_ok(mf_pipeline_schedule_parse("1f1b", &sc));
    ck_assert_int_eq(sc, MF_PIPELINE_1F1B);
    ck_assert_fails(mf_pipeline_schedule_parse("interleaved", &sc), MF_ERR_ARG, "expected gpipe or 1f1b");
    int ops[4];
    ck_assert_fails(mf_pipeline_order(MF_PIPELINE_GPIPE, 2, 2, 2, ops), MF_ERR_ARG, "stage 2 of 2 stages");
    ck_assert_fails(mf_pipeline_order(MF_PIPELINE_GPIPE, 2, 0, 0, ops), MF_ERR_ARG, "0 micro-batches");
}
END_TEST

/* Transfers between two stages' placements (the first half of the
 * ranks and the second; one rank: both the same), several in flight in
 * both directions as in 1F1B, finished in another order: every value
 * arrives where the layout says. */
START_TEST(test_transfers)
{
    int n = mf_world_size(), h = n > 1 ? n / 2 : 1, ra[8], rb[8];
    for (int i = 0; i < h; i++) ra[i] = i;
    for (int i = 0; i < (n > 1 ? n - h : 1); i++) rb[i] = n > 1 ? h + i : 0;
    mf_placement *A = mf_placement_create(h, ra, 1, (const int[]){h}, MF_DEV_CPU);
    mf_placement *B = mf_placement_create(n > 1 ? n - h : 1, rb, 1, (const int[]){n > 1 ? n - h : 1}, MF_DEV_CPU);
    ck_assert_nonnull(A);
    ck_assert_nonnull(B);
    enum { M = 3 };
    mf_tensor *full[M], *src[M], *back_src[M];
    mf_transfer *fw[M], *bw[M];
    const char *fsbp[M] = {"S(0)", "B", "S(1)"}, *tsbp[M] = {"B", "S(0)", "S(0)"};
    for (int m = 0; m < M; m++) {
        full[m] = mf_arange(MF_F32, 35);
        mf_tensor *r = mf_reshape(full[m], 2, (const int64_t[]){7, 5});
        mf_tensor_destroy(full[m]);
        full[m] = mf_scale(r, m + 1.0);
        mf_tensor_destroy(r);
        src[m] = mf_global_from_full(full[m], A, fsbp[m]);      /* activation of micro-batch m on stage A */
        back_src[m] = mf_global_from_full(full[m], B, tsbp[m]); /* a gradient on stage B */
        ck_assert_nonnull(src[m]);
        ck_assert_nonnull(back_src[m]);
    }
    for (int m = 0; m < M; m++) {   /* both directions in flight at once */
        ck_assert_ok(mf_redistribute_start(src[m], B, tsbp[m], &fw[m]));
        ck_assert_ok(mf_redistribute_start(back_src[m], A, fsbp[m], &bw[m]));
    }
    for (int k = 0; k < M; k++) {
        int m = M - 1 - k;
        mf_tensor *got[2] = {mf_transfer_finish(bw[m]), mf_transfer_finish(fw[m])};
        for (int j = 0; j < 2; j++) {
            ck_assert_nonnull(got[j]);
            float v[35], w[35];
            ck_assert_ok(mf_tensor_copy_out(got[j], MF_F32, v, 35));
            ck_assert_ok(mf_tensor_copy_out(full[m], MF_F32, w, 35));
            int bad = memcmp(v, w, sizeof v) != 0;
            ck_assert_msg(mf_agree(bad ? MF_ERR_INTERNAL : MF_OK) == MF_OK, "transfer %d (%s) arrived wrong", m,
                          j ? "forward" : "backward");
            mf_tensor_destroy(got[j]);
        }
    }
    mf_tensor *p = mf_global_from_full(full[0], A, "P");
    mf_transfer *x = NULL;
    ck_assert_fails(mf_redistribute_start(p, B, "B", &x), MF_ERR_ARG, "sum a partial tensor first");
    ck_assert_fails(mf_redistribute_start(full[0], B, "B", &x), MF_ERR_ARG, "the tensor is local");
    mf_tensor_destroy(p);
    for (int m = 0; m < M; m++) {
        mf_tensor_destroy(full[m]);
        mf_tensor_destroy(src[m]);
        mf_tensor_destroy(back_src[m]);
    }
    mf_placement_destroy(A);
    mf_placement_destroy(B);
}
END_TEST

Suite *pipeline_suite(void)
{
    Suite *s = suite_create("pipeline");
    TCase *tc = tcase_create("pipeline");
    tcase_add_test(tc, test_balance_is_optimal);
    tcase_add_test(tc, test_cuts_and_errors);
    tcase_add_test(tc, test_schedules);
    tcase_add_test(tc, test_transfers);
    suite_add_tcase(s, tc);
    return s;
}

MF_TEST_MAIN(pipeline_suite)
