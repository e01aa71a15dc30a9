/*
 * tests/test_pipe_exec.c - the pipeline executor against one rank: a
 * small model with dropout cut into stages, each on its own ranks, gives
 * the one-stage run's loss and gradients (bit for bit with one rank per
 * stage; to float tolerance with data or tensor parallelism inside the
 * stages), for GPipe and 1F1B; evaluation gives the same sums; and bad
 * requests fail on every rank without a hang. 1 rank in make check,
 * 2-4 ranks in tests/pipeline.sh.
 */
#include <stdlib.h>
#include <string.h>
#include "tests/test_util.h"

enum { NCH = 6, B = 6, IN = 6, OUT = 3 };

static double p_drop = 0.3;

static mf_module *model(void)
{
    mf_module *m = mf_sequential_create();
    ck_assert_ok(mf_sequential_add(m, NULL, mf_linear_create(IN, 8, true)));
    ck_assert_ok(mf_sequential_add(m, NULL, mf_relu_create()));
    ck_assert_ok(mf_sequential_add(m, NULL, mf_dropout_create(p_drop)));
    ck_assert_ok(mf_sequential_add(m, NULL, mf_linear_create(8, 8, true)));
    ck_assert_ok(mf_sequential_add(m, NULL, mf_tanh_create()));
    ck_assert_ok(mf_sequential_add(m, NULL, mf_linear_create(8, OUT, true)));
    ck_assert_ok(mf_module_reset_parameters(m, 7));
    return m;
}

/* ranks lo .. lo+n-1 as a 1-D placement */
static mf_placement *ranks(int lo, int n)
{
    int r[8];
    for (int i = 0; i < n; i++) r[i] = lo + i;
    mf_placement *p = mf_placement_create(n, r, 1, &n, MF_DEV_CPU);
    ck_assert_nonnull(p);
    return p;
}

typedef struct setup {
    mf_module *m;
    mf_pipeline *pipe;
    mf_placement *pl[4];
    int P;
} setup;

/* the model cut at first[], stage s on pl[s] with parameters psbp
 * ("B" data parallel, "S(0)" for the Linear layers' tensor parallelism)
 * and inputs in_sbp */
static setup build(int P, const int *first, mf_placement **pl, const char *psbp, const char *in_sbp, int M,
                   mf_pipeline_schedule sc)
{
    setup s = {model(), NULL, {NULL}, P};
    const char *ins[4];
    for (int k = 0; k < P; k++) {
        s.pl[k] = pl[k];
        ins[k] = in_sbp;
        for (int c = first[k]; c < first[k + 1]; c++) {
            mf_module *child = mf_module_child_at(s.m, c);
            const char *sb = !strcmp(mf_module_type(child), "Linear") ? psbp : "B";
            ck_assert_ok(mf_module_to_global(child, pl[k], sb));
        }
    }
    mf_pipeline_opts o = {P, first, pl, ins, M, sc, 0};
    s.pipe = mf_pipeline_create(s.m, &o);
    ck_assert_nonnull(s.pipe);
    return s;
}

static void teardown(setup *s)
{
    mf_pipeline_destroy(s->pipe);
    mf_module_destroy(s->m);
}

/* micro-batch m of the fixed batch: x on p0, y on pl (both full on every rank) */
static void batch(int M, const mf_placement *p0, const mf_placement *pl, const char *sbp, mf_tensor **x, mf_tensor **y)
{
    mf_manual_seed(3);
    mf_tensor *fx = mf_randn(MF_F32, MF_DIMS(B, IN));
    mf_tensor *fy = TI64(MF_DIMS(B), 0, 2, 1, 1, 0, 2);
    for (int m = 0; m < M; m++) {
        mf_tensor *nx = mf_narrow(fx, 0, m * (B / M), B / M), *cx = mf_contiguous(nx);
        mf_tensor *ny = mf_narrow(fy, 0, m * (B / M), B / M), *cy = mf_contiguous(ny);
        x[m] = mf_global_from_full(cx, p0, sbp);
        y[m] = mf_global_from_full(cy, pl, sbp);
        ck_assert_nonnull(x[m]);
        ck_assert_nonnull(y[m]);
        mf_tensor *all[] = {nx, cx, ny, cy};
        for (int i = 0; i < 4; i++) mf_tensor_destroy(all[i]);
    }
    mf_tensor_destroy(fx);
    mf_tensor_destroy(fy);
}

static void free_batch(int M, mf_tensor **x, mf_tensor **y)
{
    for (int m = 0; m < M; m++) {
        mf_tensor_destroy(x[m]);
        mf_tensor_destroy(y[m]);
    }
}

/* one training step: the loss, and every parameter's gradient gathered
 * (grads[i] gets NCH-sized arrays of new tensors) */
static double step(setup *s, int M, const char *sbp, mf_tensor **grads)
{
    mf_tensor *x[8], *y[8];
    batch(M, s->pl[0], s->pl[s->P - 1], sbp, x, y);
    mf_rng_set_draws(100);
    double loss = 0;
    ck_assert_ok(mf_pipeline_train_step(s->pipe, x, y, NULL, NULL, &loss));
    ck_assert_int_eq(mf_rng_draws(), 101);   /* one draw, as the whole model's forward, everywhere */
    free_batch(M, x, y);
    mf_tensor_list *l = mf_module_parameters(s->m);
    for (int i = 0; i < l->n; i++) {
        mf_tensor *g = mf_tensor_grad(l->items[i].tensor);
        ck_assert_nonnull(g);
        grads[i] = mf_global_gather(g);
        ck_assert_nonnull(grads[i]);
        ck_assert_ok(mf_tensor_set_grad(l->items[i].tensor, NULL));
    }
    mf_tensor_list_destroy(l);
    return loss;
}

/* the summed loss and the correct answers of a micro-batch */
static mf_status metric(mf_tensor *out, mf_tensor *y, void *user, mf_tensor **vals)
{
    (void)user;
    mf_tensor *p = mf_argmax(out, 1, false), *e = p ? mf_eq(p, y) : NULL;
    vals[0] = mf_cross_entropy(out, y, MF_REDUCTION_SUM);
    vals[1] = e ? mf_sum_all(e) : NULL;
    mf_tensor_destroy(p);
    mf_tensor_destroy(e);
    return vals[0] && vals[1] ? MF_OK : mf_last_status();
}

static void evaluate(setup *s, const char *sbp, double *v)
{
    mf_tensor *x[8], *y[8];
    batch(3, s->pl[0], s->pl[s->P - 1], sbp, x, y);
    ck_assert_ok(mf_pipeline_eval(s->pipe, 3, x, y, metric, NULL, 2, v));
    free_batch(3, x, y);
}

/* stages of 1 rank each (or ranks per stage) against one stage on rank 0 */
static void compare(int P, int per, const char *psbp, const char *sbp, mf_pipeline_schedule sc, double tol)
{
    const int M = 3, firsts[4][5] = {{0, 6}, {0, 3, 6}, {0, 2, 4, 6}, {0, 1, 3, 5, 6}};
    mf_placement *one = ranks(0, 1), *pl[4];
    for (int k = 0; k < P; k++) pl[k] = ranks(k * per, per);
    setup ref = build(1, firsts[0], &one, "B", "S(0)", M, sc);
    setup pip = build(P, firsts[P - 1], pl, psbp, sbp, M, sc);
    mf_tensor *gr[NCH], *gp[NCH];
    double lr = step(&ref, M, "S(0)", gr), lp = step(&pip, M, sbp, gp);
    ck_assert_msg(tol ? fabs(lr - lp) <= tol : lr == lp, "%s, %d stages x %d ranks (%s): loss %.9g, one rank %.9g",
                  mf_pipeline_schedule_name(sc), P, per, psbp, lp, lr);
    for (int i = 0; i < NCH; i++) {
        double d = mf_test_max_diff(gp[i], gr[i], false);
        ck_assert_msg(d <= tol, "%s, %d stages x %d ranks (%s): gradient %d differs by %g",
                      mf_pipeline_schedule_name(sc), P, per, psbp, i, d);
        mf_tensor_destroy(gr[i]);
        mf_tensor_destroy(gp[i]);
    }
    mf_pipeline_stats st;
    ck_assert_ok(mf_pipeline_last_stats(pip.pipe, &st));
    int me = mf_pipeline_stage(pip.pipe);
    if (me >= 0) {
        int bound = sc == MF_PIPELINE_GPIPE ? M : (P - me < M ? P - me : M);
        ck_assert_msg(st.max_in_flight == bound, "stage %d held %d micro-batches, expected %d", me,
                      st.max_in_flight, bound);
        ck_assert(st.step_s > 0 && st.busy_s > 0 && st.busy_s <= st.step_s && st.peak_bytes > 0);
    }
    double vr[2], vp[2];
    evaluate(&ref, "S(0)", vr);
    evaluate(&pip, sbp, vp);
    ck_assert_msg(fabs(vr[0] - vp[0]) <= (tol ? 1e-4 : 0) && vr[1] == vp[1], "eval: %g %g, one rank %g %g", vp[0],
                  vp[1], vr[0], vr[1]);
    teardown(&ref);
    teardown(&pip);
    mf_placement_destroy(one);
    for (int k = 0; k < P; k++) mf_placement_destroy(pl[k]);
}

START_TEST(test_one_rank_per_stage_is_exact)
{
    int n = mf_world_size(), P = n < 4 ? n : 4;
    for (int k = 0; k < 2; k++) compare(P, 1, "B", "S(0)", k ? MF_PIPELINE_1F1B : MF_PIPELINE_GPIPE, 0);
}
END_TEST

START_TEST(test_parallel_stages)
{
    int n = mf_world_size();
    if (n < 4) return;   /* 2 stages x 2 ranks */
    for (int k = 0; k < 2; k++) {
        mf_pipeline_schedule sc = k ? MF_PIPELINE_1F1B : MF_PIPELINE_GPIPE;
        compare(2, 2, "B", "S(0)", sc, 1e-5);   /* data parallel inside each stage */
        compare(2, 2, "S(0)", "B", sc, 1e-5);   /* the Linear layers split by output feature */
    }
}
END_TEST

/* The pipeline's step is the plain full-batch step, dropout included:
 * masks follow samples and layers, not micro-batches, and the 1/M
 * scaling and the accumulation give the batch mean's gradients. */
START_TEST(test_matches_plain_step)
{
    int n = mf_world_size(), P = n < 4 ? n : 4;
    const int M = 3, firsts[4][5] = {{0, 6}, {0, 3, 6}, {0, 2, 4, 6}, {0, 1, 3, 5, 6}};
    mf_module *plain = model();
    mf_manual_seed(3);
    mf_tensor *fx = mf_randn(MF_F32, MF_DIMS(B, IN)), *fy = TI64(MF_DIMS(B), 0, 2, 1, 1, 0, 2);
    mf_rng_set_draws(100);   /* as step() does */
    mf_tensor *out = mf_module_forward(plain, fx), *loss = mf_cross_entropy(out, fy, MF_REDUCTION_MEAN);
    ck_assert_ok(mf_backward(loss));
    mf_placement *pl[4];
    for (int k = 0; k < P; k++) pl[k] = ranks(k, 1);
    setup pip = build(P, firsts[P - 1], pl, "B", "S(0)", M, MF_PIPELINE_1F1B);
    mf_tensor *gp[NCH];
    double lp = step(&pip, M, "S(0)", gp);
    ck_assert_msg(fabs(lp - mf_tensor_item(loss)) < 1e-6, "loss %.9g, plain %.9g", lp, mf_tensor_item(loss));
    mf_tensor_list *l = mf_module_parameters(plain);
    for (int i = 0; i < NCH; i++) {
        double d = mf_test_max_diff(gp[i], mf_tensor_grad(l->items[i].tensor), false);
        ck_assert_msg(d < 1e-6, "gradient of %s differs from the plain step's by %g", l->items[i].name, d);
        mf_tensor_destroy(gp[i]);
    }
    mf_tensor_list_destroy(l);
    teardown(&pip);
    for (int k = 0; k < P; k++) mf_placement_destroy(pl[k]);
    mf_tensor *all[] = {fx, fy, out, loss};
    for (int i = 0; i < 4; i++) mf_tensor_destroy(all[i]);
    mf_module_destroy(plain);
}
END_TEST

static mf_tensor *not_scalar(mf_tensor *out, mf_tensor *y, void *user)
{
    (void)y;
    (void)user;
    return mf_tensor_retain(out);
}

START_TEST(test_errors)
{
    int n = mf_world_size();
    mf_placement *p0 = ranks(0, 1), *p1 = ranks(n - 1, 1), *both[2] = {p0, p0};
    const char *ins[2] = {"S(0)", "S(0)"};
    const int cut[3] = {0, 3, 6};
    mf_module *m = model();
    mf_pipeline_opts o = {2, cut, both, ins, 2, MF_PIPELINE_1F1B, 0};
    ck_assert_fails(mf_pipeline_create(m, &o), MF_ERR_ARG, "stage placements overlap: rank 0 is in stage 0");
    mf_placement *two[2] = {p0, p1};
    o.placements = two;
    if (n > 1) ck_assert_fails(mf_pipeline_create(m, &o), MF_ERR_ARG, "'0.weight' of layer 0 (stage 0) is local");
    o.nstages = 7;
    ck_assert_fails(mf_pipeline_create(m, &o), MF_ERR_ARG, "7 stages for a model of 6 layers");
    o.nstages = 2;
    o.micro_batches = 0;
    ck_assert_fails(mf_pipeline_create(m, &o), MF_ERR_ARG, "0 micro-batches");
    o.micro_batches = 2;
    mf_module_destroy(m);
    if (n == 1) {
        mf_placement_destroy(p0);
        mf_placement_destroy(p1);
        return;
    }
    setup s = build(2, cut, two, "B", "S(0)", 2, MF_PIPELINE_1F1B);
    m = model();   /* everything on stage 0's ranks */
    ck_assert_ok(mf_module_to_global(m, p0, "B"));
    o.shards = 5;   /* 2 micro-batches x 1 rank per stage are 2 shards */
    ck_assert_fails(mf_pipeline_create(m, &o), MF_ERR_ARG, "5 deterministic shards over stage 0's 1 data-parallel rank(s)");
    o.shards = 2;
    const char *bcast[2] = {"B", "S(0)"};
    o.input_sbp = bcast;
    ck_assert_fails(mf_pipeline_create(m, &o), MF_ERR_ARG, "deterministic shards need data parallelism");
    o.input_sbp = ins;
    o.shards = 0;
    ck_assert_fails(mf_pipeline_create(m, &o), MF_ERR_ARG, "'3.weight' of layer 3 is on placement '0', not on stage 1's");
    const char *partial[2] = {"S(0)", "P"};
    o.input_sbp = partial;
    ck_assert_fails(mf_pipeline_create(m, &o), MF_ERR_ARG, "stage 1's input layout 'P' is partial");
    mf_module_destroy(m);

    mf_tensor *x[3], *y[3];
    double loss;
    batch(3, p0, p1, "S(0)", x, y);   /* rows 2, 2, 2: take micro-batches of 2 and 4 */
    mf_tensor *big = mf_concat(2, (mf_tensor *const[]){x[1], x[2]}, 0);
    mf_tensor *xs[2] = {x[0], big}, *ys[2] = {y[0], y[1]};
    ck_assert_fails(mf_pipeline_train_step(s.pipe, xs, ys, NULL, NULL, &loss), MF_ERR_ARG,
                    "micro-batch 1 has 4 rows and micro-batch 0 has 2", "must divide the batch");
    mf_tensor *wrong[2] = {y[0], y[1]};
    ck_assert_fails(mf_pipeline_train_step(s.pipe, wrong, y, NULL, NULL, &loss), MF_ERR_ARG,
                    "micro-batch 0's input must be global on stage 0's placement");
    /* found by the first step's probe on the last stage, reported on every rank */
    ck_assert_fails(mf_pipeline_train_step(s.pipe, x, y, not_scalar, NULL, &loss), MF_ERR_SHAPE, "not a scalar");
    mf_tensor *fy[2] = {mf_cast(y[0], MF_F32), mf_cast(y[1], MF_F32)};
    ck_assert_fails(mf_pipeline_train_step(s.pipe, x, fy, NULL, NULL, &loss), MF_ERR_DTYPE, "class indices");
    /* and the pipeline still works */
    ck_assert_ok(mf_pipeline_train_step(s.pipe, x, y, NULL, NULL, &loss));
    ck_assert(loss > 0 && loss < 10);
    mf_tensor_destroy(fy[0]);
    mf_tensor_destroy(fy[1]);
    mf_tensor_destroy(big);
    free_batch(3, x, y);
    teardown(&s);
    mf_placement_destroy(p0);
    mf_placement_destroy(p1);
}
END_TEST

static Suite *pipe_exec_suite(void)
{
    Suite *s = suite_create("pipeline executor");
    TCase *tc = tcase_create("pipeline executor");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_one_rank_per_stage_is_exact);
    tcase_add_test(tc, test_parallel_stages);
    tcase_add_test(tc, test_matches_plain_step);
    tcase_add_test(tc, test_errors);
    suite_add_tcase(s, tc);
    return s;
}

MF_TEST_MAIN(pipe_exec_suite)
