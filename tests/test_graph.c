/*
 * tests/test_graph.c - the step graph (mpiflow/graph.h) and the meta
 * device: a training step recorded on MF_DEV_META, where nothing is
 * computed, costs what the same step run on the CPU costs by the
 * profiler (FLOPs and bytes per kernel class, calls per kernel), and its
 * allocator sees the same requests; the graph names modules and
 * parameters and pairs each backward op with its forward op.
 */
#include <math.h>
#include <stdio.h>
#include "test_util.h"

typedef struct step_cost {
    double flops[MF_PROF_COUNT], bytes[MF_PROF_COUNT];
    int64_t calls[64];
    int64_t peak;   /* the allocator's peak over the step, above its start */
    mf_graph *g;
} step_cost;

typedef enum { M_MLP, M_LENET, M_GPT, M_VIT } model_kind;

static mf_module *make_model(model_kind k)
{
    switch (k) {
    case M_MLP: return mf_model_mlp(784, 64, 10);
    case M_LENET: return mf_model_lenet(1, 28, 28, 10);
    case M_VIT: {
        mf_vit_config vc = {.image = 28, .channels = 1, .patch = 7, .dim = 32, .heads = 2, .depth = 2,
                            .mlp_dim = 64, .classes = 10};
        return mf_model_vit(&vc);
    }
    case M_GPT: {
        mf_gpt_config c = {.vocab_size = 96, .seq_len = 16, .n_layer = 2, .n_head = 2, .n_embd = 32};
        return mf_model_gpt(&c);
    }
    }
    return NULL;
}

/* One Adam step of model kind k on device dev with a batch of 8; its
 * profile and, when record, its graph. The data are made on the host
 * and uploaded before the step, as a loader's batch would be. */
static void run_step(model_kind k, mf_device_type dev, bool record, step_cost *out)
{
    memset(out, 0, sizeof *out);
    ck_assert_ok(mf_set_default_device(dev));
    mf_manual_seed(5);
    mf_module *m = make_model(k);
    ck_assert_nonnull(m);
    mf_tensor_list *params = mf_module_parameters(m);
    mf_adam_opts ao = mf_adamw_defaults();
    mf_optim *opt = mf_adamw_create(params, &ao);
    ck_assert_nonnull(opt);
    mf_tensor *xh, *yh;
    int64_t tok[64], lab[64];
    for (int i = 0; i < 64; i++) tok[i] = (i * 37 + 11) % 96, lab[i] = (i * 53 + 5) % 96;
    ck_assert_ok(mf_set_default_device(MF_DEV_CPU));
    if (k == M_GPT) {
        xh = mf_from_data(MF_I64, 2, (int64_t[]){4, 16}, tok);
        yh = mf_from_data(MF_I64, 2, (int64_t[]){4, 16}, lab);
    } else {
        xh = k == M_MLP ? mf_randn(MF_F32, 2, (int64_t[]){8, 784}) : mf_randn(MF_F32, 4, (int64_t[]){8, 1, 28, 28});
        for (int i = 0; i < 8; i++) lab[i] %= 10;
        yh = mf_from_data(MF_I64, 1, (int64_t[]){8}, lab);
    }
    ck_assert_ok(mf_set_default_device(dev));
    ck_assert_nonnull(xh);
    mf_tensor *x = mf_to_device(xh, dev), *y = mf_to_device(yh, dev);
    ck_assert_nonnull(x);
    ck_assert_nonnull(y);
    mf_memory_stats ms;
    mf_memory_get_stats_on(dev, &ms);
    int64_t start = ms.in_use;
    mf_memory_reset_peak();
    int64_t calls0[64];
    for (int i = 0; i < 64 && mf_kernel_name(i); i++) calls0[i] = mf_kernel_calls(dev, mf_kernel_name(i));
    mf_profile_reset();
    mf_profile_enable(true);
    if (record) ck_assert_ok(mf_graph_begin(m));

    mf_optim_zero_grad(opt);
    mf_tensor *loss = k == M_GPT ? mf_gpt_loss(m, x, y)
                                 : mf_cross_entropy(mf_module_forward(m, x), y, MF_REDUCTION_MEAN);
    ck_assert_nonnull(loss);
    ck_assert_ok(mf_backward(loss));
    ck_assert_ok(mf_optim_step(opt));
    mf_tensor_destroy(loss);

    if (record) {
        out->g = mf_graph_end();
        ck_assert_nonnull(out->g);
    }
    mf_profile_enable(false);
    for (int c = 0; c < MF_PROF_COUNT; c++) {
        out->flops[c] = mf_profile_flops((mf_prof_class)c);
        out->bytes[c] = mf_profile_bytes((mf_prof_class)c);
    }
    for (int i = 0; i < 64 && mf_kernel_name(i); i++) out->calls[i] = mf_kernel_calls(dev, mf_kernel_name(i)) - calls0[i];
    mf_memory_get_stats_on(dev, &ms);
    out->peak = ms.peak - start;
    mf_optim_destroy(opt);
    mf_tensor_list_destroy(params);
    mf_tensor_destroy(x);
    mf_tensor_destroy(y);
    mf_tensor_destroy(xh);
    mf_tensor_destroy(yh);
    mf_module_destroy(m);
    ck_assert_ok(mf_set_default_device(MF_DEV_CPU));
}

/* the step on meta costs what it costs on the CPU, kernel by kernel */
static void check_model(model_kind k, const char *what)
{
    step_cost cpu, meta;
    run_step(k, MF_DEV_CPU, false, &cpu);
    run_step(k, MF_DEV_META, true, &meta);
    for (int i = 0; i < 64 && mf_kernel_name(i); i++) {
        ck_assert_msg(cpu.calls[i] == meta.calls[i], "%s: kernel %s ran %lld times on the cpu, %lld on meta", what,
                      mf_kernel_name(i), (long long)cpu.calls[i], (long long)meta.calls[i]);
        ck_assert_msg(mf_graph_kernel_calls(meta.g, mf_kernel_name(i)) == meta.calls[i],
                      "%s: the graph counts %lld calls of %s, the device %lld", what,
                      (long long)mf_graph_kernel_calls(meta.g, mf_kernel_name(i)), mf_kernel_name(i),
                      (long long)meta.calls[i]);
    }
    double total = 0;
    for (int c = 0; c < MF_PROF_COUNT; c++) {
        mf_prof_class pc = (mf_prof_class)c;
        ck_assert_msg(cpu.flops[c] == meta.flops[c] && cpu.bytes[c] == meta.bytes[c],
                      "%s: class %s: cpu %.6g flop %.6g B, meta %.6g flop %.6g B", what, mf_profile_class_name(pc),
                      cpu.flops[c], cpu.bytes[c], meta.flops[c], meta.bytes[c]);
        ck_assert_msg(mf_graph_flops(meta.g, pc) == meta.flops[c] && mf_graph_bytes(meta.g, pc) == meta.bytes[c],
                      "%s: class %s: the graph's totals differ from the profiler's", what, mf_profile_class_name(pc));
        total += cpu.flops[c];
    }
    ck_assert_msg(total > 0, "%s: the step counted no flops", what);
    /* the ops' own costs add up to the totals */
    double sum = 0;
    for (int i = 0; i < mf_graph_num_ops(meta.g); i++) sum += mf_graph_get_op(meta.g, i)->flops;
    ck_assert_msg(fabs(sum - total) <= 1e-9 * total, "%s: ops sum to %.6g flop, totals %.6g", what, sum, total);
    /* the same requests, so the same peak, as far as the CPU engine's own
     * buffers allow: meta has none */
    ck_assert_msg(meta.peak > 0 && meta.peak <= cpu.peak, "%s: peak %lld on meta, %lld on the cpu", what,
                  (long long)meta.peak, (long long)cpu.peak);
    printf("%s: %d ops, %.4g flop, meta peak %lld B, cpu peak %lld B\n", what, mf_graph_num_ops(meta.g), total,
           (long long)meta.peak, (long long)cpu.peak);
    mf_graph_destroy(meta.g);
}

START_TEST(mlp_costs) { check_model(M_MLP, "mlp"); }
END_TEST

START_TEST(lenet_costs) { check_model(M_LENET, "lenet"); }
END_TEST

START_TEST(vit_costs) { check_model(M_VIT, "vit"); }
END_TEST

START_TEST(gpt_costs) { check_model(M_GPT, "gpt"); }
END_TEST

/* the graph's structure: modules, parameters, backward pairs */
START_TEST(gpt_structure)
{
    step_cost meta;
    run_step(M_GPT, MF_DEV_META, true, &meta);
    mf_graph *g = meta.g;
    int n = mf_graph_num_ops(g), fwd = 0, bwd = 0, upd = 0, attn = 0, cattn = 0;
    for (int i = 0; i < n; i++) {
        const mf_graph_op *o = mf_graph_get_op(g, i);
        if (o->phase == MF_GRAPH_FORWARD) fwd++;
        if (o->phase == MF_GRAPH_UPDATE) upd++;
        if (o->phase == MF_GRAPH_BACKWARD) {
            bwd++;
            ck_assert_msg(o->forward_of >= 0 && o->forward_of < i, "op %d (%s): backward of %d", i, o->name,
                          o->forward_of);
            ck_assert_int_eq(mf_graph_get_op(g, o->forward_of)->phase, MF_GRAPH_FORWARD);
        }
        if (!strncmp(o->module, "transformer.h.1.attn.", 21)) attn++;
        for (int k = 0; k < o->n_in; k++)
            if (o->param[k] && !strcmp(o->param[k], "transformer.h.0.attn.c_attn.weight")) {
                cattn++;
                int64_t numel = 1;   /* the weight, or a view of it */
                for (int d = 0; d < o->in[k].ndim; d++) numel *= o->in[k].shape[d];
                ck_assert_msg(numel == 96 * 32, "%s reads c_attn.weight as %lld elements", o->name, (long long)numel);
            }
    }
    ck_assert_msg(fwd > 20 && bwd > 10 && upd >= 1, "forward %d, backward %d, update %d ops", fwd, bwd, upd);
    ck_assert_msg(attn >= 2, "%d ops ran in the modules of transformer.h.1.attn", attn);
    ck_assert_msg(cattn >= 1, "no op read transformer.h.0.attn.c_attn.weight");
    mf_graph_destroy(g);
}
END_TEST

/* a graph of GPT-2 small at its full size, recorded in moments and in no memory */
START_TEST(big_on_meta)
{
    mf_gpt_config c;
    ck_assert_ok(mf_gpt_preset("gpt2", &c));
    ck_assert_ok(mf_set_default_device(MF_DEV_META));
    mf_module *m = mf_model_gpt(&c);
    ck_assert_nonnull(m);
    mf_tensor *x = mf_zeros(MF_I64, 2, (int64_t[]){8, 1024});
    ck_assert_nonnull(x);
    double t0 = mf_time();
    ck_assert_ok(mf_graph_begin(m));
    mf_tensor *loss = mf_gpt_loss(m, x, x);
    ck_assert_nonnull(loss);
    ck_assert_ok(mf_backward(loss));
    mf_graph *g = mf_graph_end();
    ck_assert_nonnull(g);
    double t = mf_time() - t0;
    /* forward and backward of 124M parameters on 8192 tokens: about 6 N T
     * for the matrices, plus attention */
    double fl = 0;
    for (int k = 0; k < MF_PROF_COUNT; k++) fl += mf_graph_flops(g, (mf_prof_class)k);
    double approx = 6.0 * 124e6 * 8192;
    ck_assert_msg(fl > 0.8 * approx && fl < 1.6 * approx, "%.4g flop, about %.4g expected", fl, approx);
    ck_assert_msg(mf_graph_peak(g) > (int64_t)4 << 30, "peak %lld B: the activations alone are over 4 GiB",
                  (long long)mf_graph_peak(g));
    ck_assert_msg(t < 10, "recording took %.1f s", t);
    printf("gpt2 on meta: %d ops, %.4g flop, peak %.2f GiB, recorded in %.2f s\n", mf_graph_num_ops(g), fl,
           mf_graph_peak(g) / 1073741824.0, t);
    mf_graph_destroy(g);
    mf_tensor_destroy(loss);
    mf_tensor_destroy(x);
    mf_module_destroy(m);
    ck_assert_ok(mf_set_default_device(MF_DEV_CPU));
}
END_TEST

/* ---- a simulated world: each rank simulates itself and must see what
 * it saw for real: the same peak over a step (every allocator together)
 * and the same communication, call by call and byte by byte */
typedef struct sim_result {
    int64_t peak;   /* over the second step, above its start */
    mf_comm_tally t;
    double graph_comm[MF_COMM_KINDS];
} sim_result;

static void plan_step(const char *plan_text, bool sim, sim_result *r)
{
    memset(r, 0, sizeof *r);
    mf_device_type dev = sim ? MF_DEV_META : MF_DEV_CPU;
    if (sim) {
        ck_assert_ok(mf_simulate_begin(mf_world_size(), mf_rank(), 2));
        ck_assert_ok(mf_set_default_device(MF_DEV_META));
    }
    mf_manual_seed(1);
    mf_plan *plan = mf_plan_parse(plan_text, strlen(plan_text), "test");
    ck_assert_nonnull(plan);
    mf_placement *pl = mf_plan_placement(plan, 0, mf_world_size(), dev);
    ck_assert_nonnull(pl);
    mf_gpt_config c = {.vocab_size = 96, .seq_len = 16, .n_layer = 2, .n_head = 4, .n_embd = 64};
    mf_module *m = mf_model_gpt(&c);
    ck_assert_nonnull(m);
    ck_assert_ok(mf_plan_apply(plan, m, pl));
    ck_assert_ok(mf_plan_apply_recompute(plan, m));
    char dsbp[32];
    ck_assert_ok(mf_plan_data_sbp(plan, dsbp, sizeof dsbp));
    mf_tensor_list *params = mf_module_parameters(m);
    mf_adam_opts ao = mf_adamw_defaults();
    mf_optim *opt = mf_adamw_create(params, &ao);
    ck_assert_nonnull(opt);
    int64_t tok[8 * 16];
    for (int i = 0; i < 8 * 16; i++) tok[i] = (i * 7) % 96;
    ck_assert_ok(mf_set_default_device(MF_DEV_CPU));
    mf_tensor *xh = mf_from_data(MF_I64, 2, (int64_t[]){8, 16}, tok);
    ck_assert_ok(mf_set_default_device(dev));
    mf_tensor *x = mf_global_from_full(xh, pl, dsbp);
    ck_assert_nonnull(x);
    mf_graph *g = NULL;
    for (int step = 0; step < 2; step++) {   /* the first makes the optimizer's state */
        mf_memory_reset_peak();
        mf_comm_tally_reset();
        mf_memory_stats ms;
        mf_memory_get_total_stats(&ms);
        int64_t start = ms.in_use;
        if (step == 1) ck_assert_ok(mf_graph_begin(m));
        mf_optim_zero_grad(opt);
        mf_tensor *loss = mf_gpt_loss(m, x, x);
        ck_assert_nonnull(loss);
        ck_assert_ok(mf_backward(loss));
        ck_assert_ok(mf_optim_step(opt));
        double v = mf_tensor_item(loss);   /* read, as a progress line does: a collective too */
        ck_assert_msg(sim || isfinite(v), "the loss is %g", v);
        mf_tensor_destroy(loss);
        if (step == 1) g = mf_graph_end();
        mf_memory_get_total_stats(&ms);
        r->peak = ms.peak - start;
        mf_comm_tally_get(&r->t);
    }
    ck_assert_nonnull(g);
    for (int k = 0; k < MF_COMM_KINDS; k++) r->graph_comm[k] = mf_graph_comm_bytes(g, (mf_comm_kind)k);
    mf_graph_destroy(g);
    mf_optim_destroy(opt);
    mf_tensor_list_destroy(params);
    mf_tensor_destroy(x);
    mf_tensor_destroy(xh);
    mf_module_destroy(m);
    mf_placement_destroy(pl);
    mf_plan_destroy(plan);
    ck_assert_ok(mf_set_default_device(MF_DEV_CPU));
    if (sim) mf_simulate_end();
}

START_TEST(simulated_ranks)
{
    static const char *const plans[] = {
        "{}",
        "{\"zero\": {\"stage\": 2}}",
        "{\"zero\": {\"stage\": 3}, \"recompute\": [\"transformer.h.*\"]}",
        "{\"mesh\": {\"names\": [\"dp\", \"tp\"], \"shape\": [-1, 2]}, \"params\": ["
        "{\"match\": \"*.wte.weight\", \"sbp\": {\"tp\": \"S(0)\"}}, {\"match\": \"*.attn.c_attn.*\", \"sbp\": {\"tp\": \"S(1)\"}},"
        "{\"match\": \"*.attn.c_proj.weight\", \"sbp\": {\"tp\": \"S(1)\"}}, {\"match\": \"*.mlp.c_fc.*\", \"sbp\": {\"tp\": \"S(0)\"}},"
        "{\"match\": \"*.mlp.c_proj.weight\", \"sbp\": {\"tp\": \"S(1)\"}}], \"activations\": ["
        "{\"module\": \"transformer.wte\", \"output\": {\"tp\": \"S(1)\"}},"
        "{\"module\": \"transformer.h.*.attn\", \"input\": {\"tp\": \"B\"}},"
        "{\"module\": \"transformer.h.*.attn\", \"output\": {\"tp\": \"S(1)\"}},"
        "{\"module\": \"transformer.h.*.mlp\", \"input\": {\"tp\": \"B\"}},"
        "{\"module\": \"transformer.h.*.mlp\", \"output\": {\"tp\": \"S(1)\"}},"
        "{\"module\": \"transformer.ln_f\", \"output\": {\"tp\": \"B\"}}], \"zero\": {\"stage\": 3}}",
    };
    for (size_t i = 0; i < sizeof plans / sizeof *plans; i++) {
        if (i == 3 && mf_world_size() % 2) continue;   /* tp 2 */
        sim_result real, sim;
        plan_step(plans[i], false, &real);
        plan_step(plans[i], true, &sim);
        ck_assert_msg(sim.peak == real.peak, "plan %zu, rank %d of %d: simulated peak %lld B, real %lld B", i,
                      mf_rank(), mf_world_size(), (long long)sim.peak, (long long)real.peak);
        for (int k = 0; k < MF_COMM_KINDS; k++) {
            ck_assert_msg(sim.t.calls[k] == real.t.calls[k] && sim.t.bytes[k] == real.t.bytes[k],
                          "plan %zu, rank %d: %s: simulated %lld calls %lld B, real %lld calls %lld B", i, mf_rank(),
                          mf_comm_kind_name((mf_comm_kind)k), (long long)sim.t.calls[k], (long long)sim.t.bytes[k],
                          (long long)real.t.calls[k], (long long)real.t.bytes[k]);
            ck_assert_msg(sim.graph_comm[k] == (double)sim.t.bytes[k], "plan %zu: the graph's %s bytes %.0f, the tally's %lld",
                          i, mf_comm_kind_name((mf_comm_kind)k), sim.graph_comm[k], (long long)sim.t.bytes[k]);
        }
        if (mf_rank() == 0)
            printf("plan %zu on %d rank(s): peak %lld B and %lld allreduce, %lld reduce-scatter, %lld allgather bytes, "
                   "simulated and real alike\n", i, mf_world_size(), (long long)real.peak,
                   (long long)real.t.bytes[MF_COMM_ALLREDUCE], (long long)real.t.bytes[MF_COMM_REDUCE_SCATTER],
                   (long long)real.t.bytes[MF_COMM_ALLGATHER]);
    }
}
END_TEST

START_TEST(simulation_errors)
{
    int rank = mf_rank(), size = mf_world_size();
    ck_assert_fails(mf_simulate_begin(4, 4, 2), MF_ERR_ARG, "0 <= rank < size");
    ck_assert_fails(mf_simulate_begin(0, 0, 2), MF_ERR_ARG, "simulated world");
    ck_assert_ok(mf_simulate_begin(8, 3, 4));
    ck_assert_int_eq(mf_world_size(), 8);
    ck_assert_int_eq(mf_rank(), 3);
    ck_assert_int_eq(mf_node_count(), 2);
    ck_assert_fails(mf_simulate_begin(8, 3, 4), MF_ERR_STATE, "on already");
    /* a simulated world's placements are on meta */
    ck_assert_fails(mf_placement_create(2, (int[]){0, 1}, 1, (int[]){2}, MF_DEV_CPU), MF_ERR_ARG, "meta device");
    mf_simulate_end();
    ck_assert_int_eq(mf_rank(), rank);   /* the real world again */
    ck_assert_int_eq(mf_world_size(), size);
    ck_assert_fails(mf_placement_create(1, (int[]){0}, 1, (int[]){1}, MF_DEV_META), MF_ERR_ARG, "simulated world");
}
END_TEST

START_TEST(recorder_errors)
{
    ck_assert_fails(mf_graph_end(), MF_ERR_STATE, "no recording is open");
    ck_assert_ok(mf_graph_begin(NULL));
    ck_assert_fails(mf_graph_begin(NULL), MF_ERR_STATE, "open already");
    mf_graph *g = mf_graph_end();
    ck_assert_nonnull(g);
    ck_assert_int_eq(mf_graph_num_ops(g), 0);
    mf_graph_destroy(g);
}
END_TEST

static Suite *graph_suite(void)
{
    Suite *s = suite_create("graph");
    TCase *tc = tcase_create("graph");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, mlp_costs);
    tcase_add_test(tc, lenet_costs);
    tcase_add_test(tc, vit_costs);
    tcase_add_test(tc, gpt_costs);
    tcase_add_test(tc, gpt_structure);
    tcase_add_test(tc, big_on_meta);
    tcase_add_test(tc, recorder_errors);
    tcase_add_test(tc, simulated_ranks);
    tcase_add_test(tc, simulation_errors);
    suite_add_tcase(s, tc);
    return s;
}

MF_TEST_MAIN(graph_suite)
