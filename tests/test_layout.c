/*
 * tests/test_layout.c - the layout search (mpiflow/layout.h): on
 * hand-made graphs whose optimum is known by reasoning, on random graphs
 * where branch and bound must find what trying every combination finds,
 * under a memory budget, and on a traced GPT, where it must find
 * Megatron-LM's layout without being told.
 */
#include <stdio.h>
#include <stdlib.h>
#include "test_util.h"

static mf_calibration *cal;

static void setup(void)
{
    mf_set_default_device(MF_DEV_CPU);
    cal = mf_calibration_default();
    ck_assert_nonnull(cal);
}
static void teardown(void)
{
    mf_calibration_destroy(cal);
}

/* data -> linear(a) -> gelu -> linear(b) -> loss, a [4h, h], b [h, 4h]:
 * an MLP block; compute times of `work` seconds each whole */
static mf_layout *mlp_block(double width, double rows, double work)
{
    mf_layout *l = mf_layout_create();
    ck_assert_nonnull(l);
    const double x = rows * width * 4, h = rows * width * 16, w = width * width * 16;
    int a = mf_layout_add_op(l, MF_LAYOUT_LINEAR, "a", "fc mf_linear", 1, (int[]){-1}, &x, h, "fc.weight", w, work,
                             work / 2, rows);
    int g = mf_layout_add_op(l, MF_LAYOUT_POINTWISE, "g", "act mf_gelu", 1, &a, &h, h, NULL, 0, work / 100,
                             work / 200, rows);
    int b = mf_layout_add_op(l, MF_LAYOUT_LINEAR, "b", "proj mf_linear", 1, &g, &h, x, "proj.weight", w, work,
                             work / 2, rows);
    int e = mf_layout_add_op(l, MF_LAYOUT_OTHER, "loss", "loss mf_mse", 1, &b, &x, 4, NULL, 0, 1e-9, 1e-9, rows);
    ck_assert_int_ge(a, 0);
    ck_assert_int_ge(e, 0);
    ck_assert_int_eq(mf_layout_num_ops(l), 4);
    return l;
}

/* compute-bound: column then row parallel, one allreduce each way, the
 * activation split over features between them */
START_TEST(test_known_optimum_split)
{
    mf_layout *l = mlp_block(1024, 4096, 1.0);
    mf_layout_env env = {.tp = 2, .tp_nodes = 1, .dp = 1, .dp_nodes = 1, .cal = cal};
    ck_assert_ok(mf_layout_search(l, &env));
    int a = mf_layout_find(l, "fc mf_linear"), g = mf_layout_find(l, "act mf_gelu"), b = mf_layout_find(l, "proj mf_linear");
    ck_assert_int_ge(a, 0);
    ck_assert_int_ge(b, 0);
    ck_assert_str_eq(mf_layout_role(l, a), "column parallel");
    ck_assert_str_eq(mf_layout_role(l, b), "row parallel");
    ck_assert_int_eq(mf_layout_param(l, a), MF_LS_FEATURES);
    ck_assert_int_eq(mf_layout_param(l, b), MF_LS_TOKENS);
    ck_assert_int_eq(mf_layout_out(l, g), MF_LS_FEATURES);
    ck_assert_int_eq(mf_layout_out(l, b), MF_LS_P);
    ck_assert_int_eq(mf_layout_param(l, g), MF_LS_NONE);
    double compute, comm, mem;
    double cost = mf_layout_cost(l, &compute, &comm, &mem);
    /* the two linears halved, the activation halved */
    ck_assert_double_eq_tol(compute, 1.0 + 0.01 / 2, 1e-6);
    /* two allreduces of the block's output: forward's partial sums, and
     * backward's partial input gradient of the column-parallel layer */
    double ar = mf_calibration_comm_time(cal, MF_COMM_ALLREDUCE, (int64_t)(4096.0 * 1024 * 4), 2, 1);
    ck_assert_double_eq_tol(comm, 2 * ar, 1e-6 * ar);
    ck_assert_double_eq_tol(cost, compute + comm, 1e-12);
    ck_assert(mem > 0);
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    ck_assert_ok(mf_layout_print(l, f));
    fclose(f);
    ck_assert_msg(strstr(text, "column parallel") && strstr(text, "row parallel"), "print: %s", text);
    free(text);
    mf_layout_destroy(l);
}
END_TEST

/* a block that costs nothing to compute but much to communicate stays whole */
START_TEST(test_known_optimum_replicated)
{
    mf_layout *l = mlp_block(1024, 4096, 1e-9);
    mf_layout_env env = {.tp = 4, .tp_nodes = 1, .dp = 1, .dp_nodes = 1, .cal = cal};
    ck_assert_ok(mf_layout_search(l, &env));
    for (int i = 0; i < mf_layout_num_ops(l); i++)
        ck_assert_msg(mf_layout_out(l, i) == MF_LS_B, "op %s: %s", mf_layout_op_name(l, i), mf_layout_role(l, i));
    double compute, comm, mem;
    mf_layout_cost(l, &compute, &comm, &mem);
    ck_assert_double_eq_tol(comm, 0, 1e-15);
    mf_layout_destroy(l);
}
END_TEST

/* a budget below the replicated weights forces a split; one below any
 * layout's weights is refused */
START_TEST(test_memory_budget)
{
    mf_layout *l = mlp_block(1024, 64, 1e-9);
    mf_layout_env env = {.tp = 4, .tp_nodes = 1, .dp = 1, .dp_nodes = 1, .cal = cal};
    ck_assert_ok(mf_layout_search(l, &env));
    double mem_whole;
    mf_layout_cost(l, NULL, NULL, &mem_whole);
    ck_assert_int_eq(mf_layout_param(l, mf_layout_find(l, "fc mf_linear")), MF_LS_B);
    env.memory = mem_whole * 0.6;
    ck_assert_ok(mf_layout_search(l, &env));
    double mem;
    mf_layout_cost(l, NULL, NULL, &mem);
    ck_assert_msg(mem <= env.memory, "the layout takes %g B over the budget %g", mem, env.memory);
    ck_assert_msg(mf_layout_param(l, mf_layout_find(l, "fc mf_linear")) != MF_LS_B ||
                      mf_layout_param(l, mf_layout_find(l, "proj mf_linear")) != MF_LS_B,
                  "a budget under the whole weights left both whole");
    env.memory = mem_whole / 100;
    ck_assert_int_eq(mf_layout_search(l, &env), MF_ERR_STATE);
    ck_assert_int_eq(mf_layout_search_exhaustive(l, &env), MF_ERR_STATE);
    mf_layout_destroy(l);
}
END_TEST

/* bad arguments are refused with an error, not a crash */
START_TEST(test_bad_input)
{
    mf_layout *l = mlp_block(64, 8, 1e-3);
    mf_layout_env env = {.tp = 0, .tp_nodes = 1, .dp = 1, .dp_nodes = 1, .cal = cal};
    ck_assert_int_eq(mf_layout_search(l, &env), MF_ERR_ARG);
    env.tp = 2;
    env.cal = NULL;
    ck_assert_int_eq(mf_layout_search(l, &env), MF_ERR_ARG);
    ck_assert_int_eq(mf_layout_search(NULL, &env), MF_ERR_ARG);
    double b = 4;
    /* an input that is not an earlier op */
    ck_assert_int_eq(mf_layout_add_op(l, MF_LAYOUT_POINTWISE, "z", "z", 1, (int[]){99}, &b, 4, NULL, 0, 0, 0, 1), -1);
    ck_assert_int_eq(mf_layout_add_op(l, MF_LAYOUT_POINTWISE, "z", "z", 3, (int[]){0, 0, 0}, &b, 4, NULL, 0, 0, 0, 1),
                     -1);
    ck_assert_int_eq(mf_layout_add_op(l, MF_LAYOUT_KINDS, "z", "z", 1, (int[]){0}, &b, 4, NULL, 0, 0, 0, 1), -1);
    ck_assert_int_eq(mf_layout_num_ops(l), 4);
    ck_assert_int_eq(mf_layout_find(l, "no such op"), -1);
    mf_layout_destroy(l);
    mf_layout_destroy(NULL);
}
END_TEST

/* random graphs: branch and bound finds the least cost that trying
 * every combination finds, and ops with one key take one signature */
static unsigned rnd_state = 12345;
static double rnd(void)
{
    rnd_state = rnd_state * 1103515245u + 12345u;
    return (double)((rnd_state >> 8) & 0xffff) / 65536.0;
}

START_TEST(test_random_graphs)
{
    static const mf_layout_kind kinds[] = {MF_LAYOUT_LINEAR, MF_LAYOUT_POINTWISE, MF_LAYOUT_NORM, MF_LAYOUT_ADD,
                                           MF_LAYOUT_LINEAR, MF_LAYOUT_ATTENTION, MF_LAYOUT_MATMUL};
    for (int trial = 0; trial < 40; trial++) {
        mf_layout *l = mf_layout_create();
        const int n = 4 + (int)(rnd() * 8);
        const double rows = 64 + 512 * rnd(), width = 64 + 1024 * rnd();
        const double act = rows * width * 4;
        char keys[12][16], name[32], pname[32];
        for (int i = 0; i < n; i++) {
            mf_layout_kind k = i == 0 ? MF_LAYOUT_EMBEDDING : kinds[(int)(rnd() * 7)];
            int nin = (k == MF_LAYOUT_ADD || k == MF_LAYOUT_MATMUL) && i >= 2 ? 2 : 1;
            int in[2] = {i - 1, i >= 2 ? (int)(rnd() * (i - 1)) : -1};
            double ib[2] = {act, act};
            if (nin == 1 && (k == MF_LAYOUT_ADD || k == MF_LAYOUT_MATMUL)) k = MF_LAYOUT_POINTWISE;
            char *key = keys[i];
            const size_t kn = sizeof keys[i];
            snprintf(key, kn, "k%d", (int)(rnd() * (n - 1)));
            if (i == 0) snprintf(key, kn, "first");
            /* a tied op takes its key's kind and inputs' count: make the key
             * carry them so the graph is consistent */
            snprintf(key + strlen(key), kn - strlen(key), "-%d%d", (int)k, nin);
            snprintf(name, sizeof name, "op%d", i);
            snprintf(pname, sizeof pname, "p%d.weight", i);
            const bool has_param = k == MF_LAYOUT_LINEAR || k == MF_LAYOUT_EMBEDDING;
            double t = 1e-4 + 1e-2 * rnd();
            ck_assert_int_eq(mf_layout_add_op(l, k, key, name, i == 0 ? 1 : nin, i == 0 ? (int[]){-1} : in, ib, act,
                                              has_param ? pname : NULL, has_param ? width * width * 4 : 0, t,
                                              t * (0.4 + 0.3 * rnd()), rows),
                             i);
        }
        mf_layout_add_op(l, MF_LAYOUT_HEAD, "head", "head mf_linear_cross_entropy", 1, (int[]){n - 1}, &act, 4,
                         "head.weight", width * 1000 * 4, 1e-3, 6e-4, rows);
        const int tps[] = {2, 4};
        mf_layout_env env = {.tp = tps[trial % 2], .tp_nodes = 1, .dp = 1 + trial % 3, .dp_nodes = 1, .cal = cal};
        if (trial % 5 == 4) env.memory = 1e300;
        ck_assert_ok(mf_layout_search_exhaustive(l, &env));
        double want = mf_layout_cost(l, NULL, NULL, NULL);
        ck_assert_ok(mf_layout_search(l, &env));
        double got = mf_layout_cost(l, NULL, NULL, NULL);
        ck_assert_msg(fabs(got - want) <= 1e-9 * want, "trial %d: branch and bound %.9g s, every combination %.9g s",
                      trial, got, want);
        /* tied ops: one signature */
        for (int i = 1; i < n; i++)
            for (int j = 1; j < i; j++)
                if (!strcmp(keys[i], keys[j]))
                    ck_assert_msg(mf_layout_out(l, i) == mf_layout_out(l, j) &&
                                      mf_layout_param(l, i) == mf_layout_param(l, j),
                                  "trial %d: ops %d and %d share the key %s but not a signature", trial, j, i, keys[i]);
        mf_layout_destroy(l);
    }
}
END_TEST

/* repeats of one block, tied by key, take one decision: a two-block
 * chain searched must give both blocks the same roles */
START_TEST(test_tied_blocks)
{
    mf_layout *l = mf_layout_create();
    const double rows = 2048, width = 512, x = rows * width * 4, h = 4 * x, w = width * width * 16;
    int prev = -1;
    double in = x;
    for (int b = 0; b < 6; b++) {
        char n1[32], n2[32];
        snprintf(n1, sizeof n1, "h.%d.fc mf_linear", b);
        snprintf(n2, sizeof n2, "h.%d.proj mf_linear", b);
        int a = mf_layout_add_op(l, MF_LAYOUT_LINEAR, "fc", n1, 1, &prev, &in, h, n1, w, 0.2, 0.1, rows);
        int p = mf_layout_add_op(l, MF_LAYOUT_LINEAR, "proj", n2, 1, &a, &h, x, n2, w, 0.2, 0.1, rows);
        ck_assert_int_ge(p, 0);
        prev = p;
    }
    mf_layout_add_op(l, MF_LAYOUT_OTHER, "loss", "loss", 1, &prev, &x, 4, NULL, 0, 1e-9, 1e-9, rows);
    mf_layout_env env = {.tp = 2, .tp_nodes = 1, .dp = 1, .dp_nodes = 1, .cal = cal};
    ck_assert_ok(mf_layout_search(l, &env));
    double c1 = mf_layout_cost(l, NULL, NULL, NULL);
    ck_assert_ok(mf_layout_search_exhaustive(l, &env));
    ck_assert_double_eq_tol(mf_layout_cost(l, NULL, NULL, NULL), c1, 1e-9 * c1);
    for (int b = 0; b < 6; b++) {
        ck_assert_str_eq(mf_layout_role(l, 2 * b), "column parallel");
        ck_assert_str_eq(mf_layout_role(l, 2 * b + 1), "row parallel");
    }
    mf_layout_destroy(l);
}
END_TEST

/* Megatron-LM's layout for a GPT traced on the meta device, found
 * without being told: column-parallel c_attn and c_fc, row-parallel
 * projections, a vocabulary-parallel head, and the residual stream
 * split over tokens (sequence parallel) */
static void check_role(const mf_layout *l, const char *suffix, const char *role)
{
    int i = mf_layout_find(l, suffix);
    ck_assert_msg(i >= 0, "no op %s in the traced graph", suffix);
    ck_assert_msg(!strcmp(mf_layout_role(l, i), role), "%s: %s, not %s", mf_layout_op_name(l, i), mf_layout_role(l, i),
                  role);
}

START_TEST(test_gpt_megatron)
{
    ck_assert_ok(mf_set_default_device(MF_DEV_META));
    mf_gpt_config c = {.vocab_size = 50304, .seq_len = 1024, .n_layer = 4, .n_head = 12, .n_embd = 768};
    mf_module *m = mf_model_gpt(&c);
    ck_assert_nonnull(m);
    mf_tensor *x = mf_zeros(MF_I64, 2, (int64_t[]){4, 1024});
    ck_assert_ok(mf_graph_begin(m));
    mf_tensor *loss = mf_gpt_loss(m, x, x);
    ck_assert_nonnull(loss);
    mf_graph *g = mf_graph_end();
    ck_assert_nonnull(g);
    mf_layout *l = mf_layout_from_graph(g, cal, 4);
    ck_assert_nonnull(l);
    mf_layout_env env = {.tp = 4, .tp_nodes = 1, .dp = 2, .dp_nodes = 1, .cal = cal};
    ck_assert_ok(mf_layout_search(l, &env));
    check_role(l, "h.0.attn.c_attn mf_linear", "column parallel");
    check_role(l, "h.3.attn.c_attn mf_linear", "column parallel");
    check_role(l, "h.0.attn.c_proj mf_linear", "row parallel");
    check_role(l, "h.2.mlp.c_fc mf_linear", "column parallel");
    check_role(l, "h.1.mlp.c_proj mf_linear", "row parallel");
    check_role(l, "wte mf_linear_cross_entropy", "vocabulary parallel");
    int tokens = 0;
    for (int i = 0; i < mf_layout_num_ops(l); i++) tokens += mf_layout_out(l, i) == MF_LS_TOKENS;
    ck_assert_msg(tokens > 0, "no value split over tokens: the search found no sequence parallelism");
    double compute, comm;
    mf_layout_cost(l, &compute, &comm, NULL);
    ck_assert(compute > 0 && comm > 0);
    mf_layout_destroy(l);
    mf_graph_destroy(g);
    mf_tensor_destroy(loss);
    mf_tensor_destroy(x);
    mf_module_destroy(m);
    ck_assert_ok(mf_set_default_device(MF_DEV_CPU));
}
END_TEST

static Suite *layout_suite(void)
{
    Suite *s = suite_create("layout");
    TCase *tc = tcase_create("search");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_known_optimum_split);
    tcase_add_test(tc, test_known_optimum_replicated);
    tcase_add_test(tc, test_memory_budget);
    tcase_add_test(tc, test_bad_input);
    tcase_add_test(tc, test_random_graphs);
    tcase_add_test(tc, test_tied_blocks);
    tcase_add_test(tc, test_gpt_megatron);
    suite_add_tcase(s, tc);
    return s;
}

MF_TEST_MAIN(layout_suite)
