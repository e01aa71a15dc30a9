/*
 * apps/plan_search.c - every plan of a model on N ranks, each predicted
 * by running its training step as its ranks would (the meta device in a
 * simulated world: apps/train_run.c's run and step, unchanged), then
 * ranked by predicted step time among those that fit (doc/planning.md).
 *
 * A plan is a set of mpiflow-train flags: pipeline stages and
 * micro-batches, tensor parallel (inside a node) with or without
 * sequence parallel, ZeRO over the data-parallel ranks, recompute. Each
 * is simulated on the first rank of each pipeline stage (past 8 stages:
 * the first, a middle and the last); its memory is the largest of
 * theirs, its time the slowest stage's with the schedule's bubble.
 */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "apps/plan_flags.h"
#include "apps/plan_search.h"
#include "apps/train_gpt.h"
#include "apps/train_run.h"

/* the options of candidate c on top of base's */
void plan_apply_candidate(train_opts *o, const candidate *c)
{
    o->plan_text = c->plan_json[0] ? c->plan_json : NULL;
    if (o->plan_text) {   /* the plan says it all */
        o->tensor_parallel = 0;
        o->sequence_parallel = false;
        o->zero = 0;
        o->recompute = NULL;
        o->pipeline_stages = 0;
        o->micro_batches = 0;
        return;
    }
    o->tensor_parallel = c->tp > 1 ? c->tp : 0;
    o->sequence_parallel = c->sp;
    o->zero = c->zero;
    o->recompute = c->recompute;
    o->pipeline_stages = c->pp > 1 ? c->pp : 0;
    o->micro_batches = c->micro_batches;
}

/* -------------------------------------------------------------- layout */
/* The layout search for tensor parallel tp with rows per data-parallel
 * rank (mpiflow/layout.h), on the model traced at one rank; cached. */
typedef struct layout_entry {
    int tp, dp, nodes;
    int64_t rows;
    char summary[240], rules[640];
    bool megatron, split;   /* Megatron-LM's layout; anything split at all */
} layout_entry;

static layout_entry layout_cache[32];
static int layout_cached;
static mf_layout *layout_last;   /* the last search, for --explain */

static bool role_is(const mf_layout *l, const char *suffix, const char *role)
{
    int i = mf_layout_find(l, suffix);
    return i >= 0 && !strcmp(mf_layout_role(l, i), role);
}

static const layout_entry *layout_for(const train_opts *base, int tp, int dp, int dp_nodes, const mf_calibration *cal,
                                      bool keep)
{
    int64_t rows = base->batch_size / (dp > 0 ? dp : 1);
    for (int i = 0; i < layout_cached && !keep; i++)
        if (layout_cache[i].tp == tp && layout_cache[i].dp == dp && layout_cache[i].rows == rows &&
            layout_cache[i].nodes == dp_nodes)
            return &layout_cache[i];
    static layout_entry fresh;
    layout_entry *e = layout_cached < 32 ? &layout_cache[layout_cached] : &fresh;
    memset(e, 0, sizeof *e);
    e->tp = tp;
    e->dp = dp;
    e->rows = rows;
    e->nodes = dp_nodes;
    const bool gpt = !strcmp(base->model, "gpt");
    mf_gpt_config gc;
    char err[256];
    mf_device_type was = mf_default_device();
    mf_set_default_device(MF_DEV_META);
    mf_module *m = NULL;
    if (gpt) {
        if (gpt_config(base, &gc, err, sizeof err) == MF_OK) m = mf_model_gpt(&gc);
    } else {
        m = mf_model_create(base->model, 1, 28, 28, 10);
    }
    mf_tensor *x = !m ? NULL : gpt ? mf_zeros(MF_I64, 2, (int64_t[]){rows, gc.seq_len})
                                   : mf_zeros(MF_F32, 4, (int64_t[]){rows, 1, 28, 28});
    mf_tensor *y = gpt || !m ? NULL : mf_zeros(MF_I64, 1, &rows);
    mf_graph *g = NULL;
    if (x && (gpt || y) && mf_graph_begin(m) == MF_OK) {
        mf_tensor *out = gpt ? NULL : mf_module_forward(m, x);
        mf_tensor *loss = gpt ? mf_gpt_loss(m, x, x) : out ? mf_cross_entropy(out, y, MF_REDUCTION_MEAN) : NULL;
        g = mf_graph_end();
        mf_tensor_destroy(loss);
        mf_tensor_destroy(out);
    }
    mf_layout *l = g ? mf_layout_from_graph(g, cal, tp) : NULL;
    mf_layout_env env = {.tp = tp, .tp_nodes = 1, .dp = dp, .dp_nodes = dp_nodes, .cal = cal};
    if (l && mf_layout_search(l, &env) == MF_OK) {
        size_t k = 0, r = 0;
        bool tokens = false;
        for (int i = 0; i < mf_layout_num_ops(l); i++) {
            tokens |= mf_layout_out(l, i) == MF_LS_TOKENS;
            mf_layout_sbp ps = mf_layout_param(l, i);
            if (ps == MF_LS_NONE) continue;
            e->split |= ps != MF_LS_B;
        }
        if (gpt) {
            e->megatron = role_is(l, "attn.c_attn mf_linear", "column parallel") &&
                          role_is(l, "attn.c_proj mf_linear", "row parallel") &&
                          role_is(l, "mlp.c_fc mf_linear", "column parallel") &&
                          role_is(l, "mlp.c_proj mf_linear", "row parallel") &&
                          role_is(l, "wte mf_linear_cross_entropy", "vocabulary parallel");
        } else if (!strcmp(base->model, "vit")) {
            e->megatron = role_is(l, "attn.q mf_linear", "column parallel") && role_is(l, "attn.proj mf_linear", "row parallel") &&
                          role_is(l, "mlp.fc mf_linear", "column parallel") && role_is(l, "mlp.proj mf_linear", "row parallel");
        }
        if (e->megatron)
            k += (size_t)snprintf(e->summary, sizeof e->summary, "Megatron-LM's: QKV and MLP-in column parallel, "
                                  "projections row parallel, %s%s", gpt ? "the head vocabulary parallel, " : "",
                                  tokens ? "the residual split over tokens (sequence parallel)" : "the residual whole");
        /* the linears one by one, and the rules that make them */
        for (int i = 0; i < mf_layout_num_ops(l) && !e->megatron; i++) {
            mf_layout_sbp ps = mf_layout_param(l, i);
            if (ps == MF_LS_NONE) continue;
            char opname[200];   /* the op's module: its name up to the space */
            snprintf(opname, sizeof opname, "%s", mf_layout_op_name(l, i));
            char *sp = strchr(opname, ' ');
            if (sp) *sp = 0;
            if (k < sizeof e->summary)
                k += (size_t)snprintf(e->summary + k, sizeof e->summary - k, "%s%s %s", k ? ", " : "", opname,
                                      mf_layout_role(l, i));
            if (ps != MF_LS_B && r < sizeof e->rules)
                r += (size_t)snprintf(e->rules + r, sizeof e->rules - r,
                                      "%s{\"match\": \"%s%s\", \"sbp\": {\"tp\": \"%s\"}}", r ? ", " : "", opname,
                                      ps == MF_LS_FEATURES ? ".*" : ".weight", ps == MF_LS_FEATURES ? "S(0)" : "S(1)");
        }
        if (k >= sizeof e->summary || r >= sizeof e->rules) e->split = false;   /* too long to say: not offered */
    }
    if (keep) {
        mf_layout_destroy(layout_last);
        layout_last = l;
    } else {
        mf_layout_destroy(l);
    }
    mf_graph_destroy(g);
    mf_tensor_destroy(x);
    mf_tensor_destroy(y);
    mf_module_destroy(m);
    mf_set_default_device(was);
    mf_clear_error();
    if (e != &fresh && !keep) layout_cached++;
    return e;
}

/* ------------------------------------------------------------- predict */
/* the bytes of a tensor's local piece, as the allocator rounds them */
/* the peak's activations and temporaries: what the other parts leave */
static void candidate_rest(candidate *c)
{
    c->other = c->peak - c->params - c->grads_peak - c->optim - c->gather - c->comm - c->logits - c->slack;
}

static int64_t piece(mf_tensor *t)
{
    mf_tensor *l = t && mf_tensor_is_global(t) ? mf_to_local(t) : mf_tensor_retain(t);
    int64_t b = l ? mf_tensor_nbytes(l) : 0;
    mf_tensor_destroy(l);
    return b;
}

/* One rank of the plan c, simulated: its memory and the graph of its
 * second step (the first makes the optimizer's state). */
/* --explain: the step's entries, each with its signature and time */
static void explain(const mf_graph *g, const mf_calibration *cal, int rank)
{
    static const char *const phase[] = {"fwd", "bwd", "upd"};
    printf("rank %d's step, entry by entry: phase, module, op or collective, signature (inputs -> output) or "
           "message, predicted time\n", rank);
    for (int i = 0; i < mf_graph_num_ops(g); i++) {
        const mf_graph_op *o = mf_graph_get_op(g, i);
        double us = mf_predict_entry(o, cal) * 1e6;
        if (o->comm_kind >= 0)
            printf("%5d %s %-30s %-26s %.0f B over %d rank(s), %s%s  %.1f us\n", i, phase[o->phase],
                   *o->module ? o->module : "-", o->name, (double)o->comm_bytes, o->comm_ranks,
                   mf_coll_algo_name(o->comm_algo), o->comm_async ? ", overlapped" : "", us);
        else if (o->kernels)
            printf("%5d %s %-30s %-26s %-30s  %.1f us\n", i, phase[o->phase], *o->module ? o->module : "-", o->name,
                   o->sbp, us);
    }
}

/* The gradient buckets' buffers, which mf_optim_zero_grad makes before
 * the first backward: the bytes they take (rounded to size classes) and
 * the slack of that. One buffer per bucket of up to 25 MiB of the whole
 * model's gradients, so unlike the rest of the memory they do not grow
 * block by block. */
static mf_status bucket_memory(mf_optim *o, int64_t *bytes, int64_t *slack)
{
    *bytes = *slack = 0;
    if (!o) return MF_OK;
    mf_memory_breakdown a, b;
    mf_memory_stats sa, sb;
    mf_memory_get_total_stats(&sa);
    mf_memory_get_breakdown(&a, NULL);
    mf_status st = mf_optim_zero_grad(o);
    mf_memory_get_total_stats(&sb);
    mf_memory_get_breakdown(&b, NULL);
    *bytes = sb.in_use - sa.in_use;
    *slack = b.slack - a.slack;
    return st;
}

/* build_only: the model and its buckets, no step (out->bucket_bytes and
 * bucket_slack only). */
static mf_status simulate_rank(const train_opts *base, const candidate *c, int ranks, int per_node, int rank,
                               const mf_calibration *cal, candidate *out, char *why, size_t len, bool show,
                               bool build_only)
{
    run r;
    memset(&r, 0, sizeof r);
    r.o = *base;
    plan_apply_candidate(&r.o, c);
    r.o.prefetch = 0;
    r.gpt = !strcmp(r.o.model, "gpt");
    r.task = train_task_of(r.o.model);
    mf_status st = mf_simulate_begin(ranks, rank, per_node);
    if (st != MF_OK) return st;
    mf_memory_stats ms;
    mf_memory_get_total_stats(&ms);
    const int64_t before = ms.in_use;
    mf_memory_breakdown b0, b1, bp;
    mf_memory_get_breakdown(&b0, NULL);
    st = mf_set_default_device(MF_DEV_META);
    int64_t shape[3] = {1, 28, 28};
    if (st == MF_OK && r.gpt) st = gpt_config(&r.o, &r.gc, r.err, sizeof r.err);
    if (st == MF_OK) st = run_build_model(&r, shape, 10, "the simulated data");
    if (st != MF_OK) snprintf(why, len, "%.250s", r.err[0] ? r.err : mf_last_error());
    /* this rank's rows of a batch */
    const int64_t B = r.o.batch_size, T = r.gpt ? r.gc.seq_len : 0;
    int64_t rows = B;
    if (st == MF_OK && r.par.shard_count > 1) {
        if (B % r.par.shard_count) {
            snprintf(why, len, "--batch-size %lld does not divide into %d data-parallel rows", (long long)B,
                     r.par.shard_count);
            st = MF_ERR_ARG;
        }
        rows = B / (r.par.shard_count > 0 ? r.par.shard_count : 1);
    }
    int64_t bbytes = 0, bslack = 0;
    if (st == MF_OK) {
        st = bucket_memory(r.optim, &bbytes, &bslack);
        if (st != MF_OK) snprintf(why, len, "the buckets: %.240s", mf_last_error());
    }
    if (build_only) {
        out->bucket_bytes = bbytes;
        out->bucket_slack = bslack;
    }
    mf_graph *g = NULL;
    double t_peak = 0;
    for (int step = 0; step < 2 && st == MF_OK && !build_only; step++) {
        /* the batch in the memory the model computes in (the meta device):
         * its micro-batches are views of it, as on the host */
        mf_tensor *x = r.gpt ? mf_zeros(MF_I64, 2, (int64_t[]){rows, T}) : mf_zeros(MF_F32, 4, (int64_t[]){rows, 1, 28, 28});
        mf_tensor *y = r.gpt ? mf_zeros(MF_I64, 2, (int64_t[]){rows, T}) : mf_zeros(MF_I64, 1, &rows);
        if (!x || !y) {
            mf_tensor_destroy(x);
            mf_tensor_destroy(y);
            st = mf_last_status();
            break;
        }
        mf_memory_reset_peak();
        if (step == 1) st = mf_graph_begin(r.model);
        double loss;
        if (st == MF_OK) st = run_step(&r, x, y, B, &loss);
        if (step == 1 && mf_graph_recording()) g = mf_graph_end();
        if (st != MF_OK) snprintf(why, len, "the step failed: %s", mf_last_error());
        mf_memory_get_total_stats(&ms);
        t_peak = (double)(ms.peak - before);
        mf_memory_get_breakdown(NULL, &bp);
    }
    if (st == MF_OK && g && show) explain(g, cal, rank);
    if (st == MF_OK && g) {
        mf_step_time t;
        mf_predict_step(g, cal, &t);
        if (t.step > out->time.step) out->time = t;
        out->comm_bytes = 0;
        for (int k = 0; k < MF_COMM_KINDS; k++) out->comm_bytes += mf_graph_comm_bytes(g, (mf_comm_kind)k);
        if ((int64_t)t_peak > out->peak) {
            out->peak = (int64_t)t_peak;
            out->peak_rank = rank;
            out->bucket_bytes = bbytes;
            out->bucket_slack = bslack;
            int64_t p = 0, gr = 0;
            for (int i = 0; r.params && i < r.params->n; i++) {
                mf_tensor *w = r.params->items[i].tensor;
                p += piece(w);
                gr += piece(mf_tensor_grad(w));   /* borrowed */
            }
            mf_memory_get_breakdown(&b1, NULL);
            out->params = p;
            out->grads = gr;
            /* the gradients alive at the peak: fewer than after the step
             * when the peak comes before backward has made them all */
            out->grads_peak = bp.bytes[MF_MEM_GRADS] - b0.bytes[MF_MEM_GRADS];
            /* the tensors still held after the step that are neither */
            const int64_t held = b1.bytes[MF_MEM_TENSORS] + b1.bytes[MF_MEM_GRADS] - b0.bytes[MF_MEM_TENSORS] -
                                 b0.bytes[MF_MEM_GRADS];
            out->optim = held - p - gr > 0 ? held - p - gr : 0;
            out->gather = bp.bytes[MF_MEM_ZERO_GATHER] - b0.bytes[MF_MEM_ZERO_GATHER];
            out->comm = bp.bytes[MF_MEM_COMM] - b0.bytes[MF_MEM_COMM];
            out->logits = bp.bytes[MF_MEM_LOGITS] - b0.bytes[MF_MEM_LOGITS];
            out->slack = bp.slack - b0.slack;
            candidate_rest(out);
        }
    }
    mf_graph_destroy(g);
    run_cleanup(&r);
    mf_set_default_device(MF_DEV_CPU);
    mf_simulate_end();
    mf_clear_error();
    return st;
}

/* the first rank of each stage (of the first, a middle and the last one
 * past 8 stages): the slowest stage sets the pace */
static mf_status simulate_stages(const train_opts *base, candidate *c, int ranks, int per_node,
                                 const mf_calibration *cal)
{
    for (int s = 0; s < c->pp; s++) {
        if (c->pp > 8 && s != 0 && s != c->pp / 2 && s != c->pp - 1) continue;
        mf_status st = simulate_rank(base, c, ranks, per_node, s * (ranks / c->pp), cal, c, c->why, sizeof c->why,
                                     c->explain && s == 0, false);
        if (st != MF_OK) return st;
    }
    return MF_OK;
}

void plan_predict(const train_opts *base, int ranks, int per_node, const mf_calibration *cal, candidate *c)
{
    c->ok = false;
    c->peak = 0;
    memset(&c->time, 0, sizeof c->time);
    if (c->tp > 1) {   /* the SBP of every op along tp: the layout search */
        int nodes = ranks / (per_node > 0 ? per_node : ranks), dp_nodes = nodes / c->pp > 1 ? nodes / c->pp : 1;
        const layout_entry *e = layout_for(base, c->tp, c->dp, dp_nodes, cal, false);
        snprintf(c->layout, sizeof c->layout, "%s", e->summary);
        const bool fused = !strcmp(base->model, "gpt") || !strcmp(base->model, "vit");
        if (fused && !e->megatron)   /* still a plan: the flags run Megatron-LM's layout, simulated as it runs */
            snprintf(c->layout, sizeof c->layout, "the search prefers %.120s to Megatron-LM's layout at this size",
                     e->summary[0] ? e->summary : "no split");
        if (!fused && !e->split) {
            snprintf(c->why, sizeof c->why, "the layout search splits no layer over %d ranks: data parallel does "
                     "the same with less", c->tp);
            return;
        }
        if (!fused) {
            size_t k = (size_t)snprintf(c->plan_json, sizeof c->plan_json,
                                        "{\"mesh\": {\"names\": [\"dp\", \"tp\"], \"shape\": [-1, %d]}, "
                                        "\"params\": [%s]", c->tp, e->rules);
            if (c->zero && k < sizeof c->plan_json)
                k += (size_t)snprintf(c->plan_json + k, sizeof c->plan_json - k, ", \"zero\": {\"stage\": %d}", c->zero);
            if (c->recompute && k < sizeof c->plan_json)
                k += (size_t)snprintf(c->plan_json + k, sizeof c->plan_json - k, ", \"recompute\": [\"%s\"]", c->recompute);
            if (k < sizeof c->plan_json) snprintf(c->plan_json + k, sizeof c->plan_json - k, "}");
        }
    }
    /* A GPT's blocks are alike: its step with one block per stage and
     * with two gives the cost of a block, and the full depth is the first
     * plus the rest at that cost (doc/planning.md, "Repeated blocks").
     * --explain, and shallow models, simulate every block. */
    mf_gpt_config gc;
    char err[256];
    const int L = !strcmp(base->model, "gpt") && gpt_config(base, &gc, err, sizeof err) == MF_OK ? gc.n_layer : 0;
    if (L && !c->explain && L % c->pp == 0 && L / c->pp >= 4) {
        candidate one = *c, two = *c;
        train_opts o1 = *base, o2 = *base;
        o1.n_layer = c->pp;
        o2.n_layer = 2 * c->pp;
        if (simulate_stages(&o1, &one, ranks, per_node, cal) != MF_OK ||
            simulate_stages(&o2, &two, ranks, per_node, cal) != MF_OK) {
            snprintf(c->why, sizeof c->why, "%s", one.why[0] ? one.why : two.why);
            return;
        }
        const double k = L / c->pp - 1;
#define LIN(f) (one.f + (two.f - one.f) * k)
#define LINB(f) ((int64_t)llround(LIN(f)))   /* bytes */
        c->time.compute = LIN(time.compute);
        c->time.comm = LIN(time.comm);
        c->time.exposed_comm = LIN(time.exposed_comm);
        c->time.pipe_wait = LIN(time.pipe_wait);
        c->time.step = c->time.compute + c->time.exposed_comm;
        c->peak = LINB(peak);
        c->params = LINB(params);
        c->grads = LINB(grads);
        c->grads_peak = LINB(grads_peak);
        c->optim = LINB(optim);
        c->gather = LINB(gather);
        c->comm = LINB(comm);
        c->logits = LINB(logits);
        c->slack = LINB(slack);
        /* the buckets' buffers hold the whole model's gradients: at full
         * depth their bytes and slack are those of the full model's buckets */
        candidate full = *c;
        if (simulate_rank(base, c, ranks, per_node, two.peak_rank, cal, &full, c->why, sizeof c->why, false, true) !=
            MF_OK)
            return;
        const int64_t fix = full.bucket_bytes - LINB(bucket_bytes), fix_slack = full.bucket_slack - LINB(bucket_slack);
        c->peak += fix;
        c->slack += fix_slack;
        c->comm += fix - fix_slack;
        c->peak_rank = two.peak_rank;
        c->bucket_bytes = full.bucket_bytes;
        c->bucket_slack = full.bucket_slack;
        candidate_rest(c);
        c->comm_bytes = LIN(comm_bytes);
#undef LIN
#undef LINB
    } else if (simulate_stages(base, c, ranks, per_node, cal) != MF_OK) {
        return;
    }
    if (c->pp > 1) mf_predict_pipeline(&c->time, c->pp, c->micro_batches);
    c->ok = true;
}

/* ---------------------------------------------------------- candidates */
static const char *recompute_of(const char *model)
{
    return !strcmp(model, "gpt") ? "block" : !strcmp(model, "vit") ? "block*" : !strcmp(model, "lenet") ? "conv*" : NULL;
}

static void describe(candidate *c)
{
    size_t k = 0;
    c->flags[0] = 0;
#define ADD(...) (k += k < sizeof c->flags ? (size_t)snprintf(c->flags + k, sizeof c->flags - k, __VA_ARGS__) : 0)
    if (c->pp > 1) ADD("--pipeline-stages %d --micro-batches %d ", c->pp, c->micro_batches);
    if (c->tp > 1 && !c->fused) ADD("(searched layout, tp %d) ", c->tp);
    if (c->tp > 1 && c->fused) ADD("--tensor-parallel %d %s", c->tp, c->sp ? "--sequence-parallel " : "");
    if (c->zero) ADD("--zero %d ", c->zero);
    if (c->recompute) ADD("--recompute '%s' ", c->recompute);
#undef ADD
    if (k && k < sizeof c->flags) c->flags[k - 1] = 0;
    if (!c->flags[0]) snprintf(c->flags, sizeof c->flags, c->dp > 1 ? "(data parallel)" : "(one rank)");
}

candidate *plan_candidates(const train_opts *base, int ranks, int per_node, int *n, char *err, size_t len)
{
    int cap = 512;
    candidate *c = calloc((size_t)cap, sizeof *c);
    *n = 0;
    if (!c) {
        snprintf(err, len, "out of memory");
        return NULL;
    }
    const bool fused = !strcmp(base->model, "gpt") || !strcmp(base->model, "vit");
    const char *rc = recompute_of(base->model);
    /* a GPT's heads bound tensor parallel and its layers the stages: the
     * plans past them are not even tried (the others say why they fail) */
    mf_gpt_config gc;
    char gerr[256];
    const bool gpt = !strcmp(base->model, "gpt") && gpt_config(base, &gc, gerr, sizeof gerr) == MF_OK;
    for (int pp = 1; pp <= ranks && pp <= 64; pp *= 2) {
        if (ranks % pp) continue;
        if (gpt && pp > gc.n_layer + 2) continue;
        for (int tp = 1; tp <= ranks / pp && tp <= per_node; tp *= 2) {
            /* the MLP's and LeNet's tensor parallel is the layout search's plan: no pipeline beside it */
            if ((ranks / pp) % tp || (tp > 1 && !fused && pp > 1) || (gpt && gc.n_head % tp)) continue;
            int dp = ranks / pp / tp;
            for (int sp = 0; sp <= (tp > 1 && fused); sp++)
                for (int zero = 0; zero <= (dp > 1 ? (pp > 1 ? 1 : 3) : 0); zero++)
                    for (int r = 0; r <= (rc != NULL); r++)
                        for (int m = pp > 1 ? pp : 0; m <= (pp > 1 ? 2 * pp : 0); m = m ? m * 2 : 1) {
                            if (*n == cap) break;
                            /* every micro-batch needs a row on each data-parallel rank */
                            if (m && (base->batch_size % dp || (base->batch_size / dp) % m)) continue;
                            candidate *k = &c[(*n)++];
                            *k = (candidate){.dp = dp, .tp = tp, .pp = pp, .zero = zero, .sp = sp,
                                             .micro_batches = m, .recompute = r ? rc : NULL, .fused = fused};
                            describe(k);
                            if (!m) break;
                        }
        }
    }
    if (*n == 0) {
        snprintf(err, len, "no plan fits %d ranks", ranks);
        free(c);
        return NULL;
    }
    return c;
}

static int64_t rank_memory;

static int by_time(const void *a, const void *b)
{
    const candidate *x = a, *y = b;
    bool fx = x->ok && (!rank_memory || x->peak <= rank_memory), fy = y->ok && (!rank_memory || y->peak <= rank_memory);
    if (fx != fy) return fx ? -1 : 1;
    if (x->ok != y->ok) return x->ok ? -1 : 1;
    if (!fx && x->ok) return (x->peak > y->peak) - (x->peak < y->peak);   /* over budget: the smallest first */
    return (x->time.step > y->time.step) - (x->time.step < y->time.step);
}

void plan_rank(candidate *c, int n, int64_t memory)
{
    rank_memory = memory;
    qsort(c, (size_t)n, sizeof *c, by_time);
}

int plan_write_best(const train_opts *base, const candidate *c, int ranks, const char *path)
{
    train_opts o = *base;
    plan_apply_candidate(&o, c);
    char err[512] = "";
    mf_status st = mf_simulate_begin(ranks, 0, ranks);
    mf_gpt_config gc;
    mf_module *m = NULL;
    if (st == MF_OK) st = mf_set_default_device(MF_DEV_META);
    if (st == MF_OK && !strcmp(o.model, "gpt")) st = gpt_config(&o, &gc, err, sizeof err);
    if (st == MF_OK) m = !strcmp(o.model, "gpt") ? mf_model_gpt(&gc) : mf_model_create(o.model, 1, 28, 28, 10);
    mf_plan *plan = !m ? NULL : c->plan_json[0] ? mf_plan_parse(c->plan_json, strlen(c->plan_json), "the searched plan")
                                                : plan_of_flags(&o, m, ranks, err, sizeof err);
    FILE *f = plan ? fopen(path, "w") : NULL;
    bool ok = f && mf_plan_write(plan, f) == MF_OK;
    if (f && fclose(f) != 0) ok = false;
    if (!ok)
        fprintf(stderr, "mpiflow-plan: error: --write %s: %s\n", path, !plan ? (err[0] ? err : mf_last_error())
                                                                              : "cannot write the file");
    else
        printf("wrote %s: mpiflow-train --plan %s runs it%s%s%s\n", path, path, c->plan_json[0] ? "" : " (the same as ",
               c->plan_json[0] ? "" : c->flags, c->plan_json[0] ? "" : ")");
    mf_plan_destroy(plan);
    mf_module_destroy(m);
    mf_set_default_device(MF_DEV_CPU);
    mf_simulate_end();
    return ok ? 0 : 2;
}

/* --------------------------------------------------------------- table */
static void human(int64_t b, char *buf, size_t size)
{
    double v = (double)b;
    if (v >= 1073741824.0) snprintf(buf, size, "%.2f GiB", v / 1073741824.0);
    else if (v >= 1048576.0) snprintf(buf, size, "%.1f MiB", v / 1048576.0);
    else snprintf(buf, size, "%.0f KiB", v / 1024.0);
}

/* a size as --memory reads it, rounded up: "19.9MiB" */
static void flag_size(int64_t b, char *buf, size_t size)
{
    double v = (double)b;
    if (v >= 1073741824.0) snprintf(buf, size, "%.1fGiB", ceil(v / 1073741824.0 * 10) / 10);
    else if (v >= 1048576.0) snprintf(buf, size, "%.1fMiB", ceil(v / 1048576.0 * 10) / 10);
    else snprintf(buf, size, "%.0fKiB", ceil(v / 1024.0));
}

static void seconds(double s, char *buf, size_t size)
{
    if (s >= 1) snprintf(buf, size, "%.2f s", s);
    else if (s >= 1e-3) snprintf(buf, size, "%.1f ms", s * 1e3);
    else snprintf(buf, size, "%.0f us", s * 1e6);
}

static void print_row(int i, const candidate *c)
{
    char st[24], cp[24], ex[24], bu[24], pk[24], pa[24], gr[24], op[24], ot[24], ga[24], cm[24], lg[24], sl[24];
    seconds(c->time.step, st, sizeof st);
    seconds(c->time.compute, cp, sizeof cp);
    seconds(c->time.exposed_comm, ex, sizeof ex);
    seconds(c->time.bubble, bu, sizeof bu);
    human(c->peak, pk, sizeof pk);
    human(c->params, pa, sizeof pa);
    human(c->grads_peak, gr, sizeof gr);
    human(c->optim, op, sizeof op);
    human(c->other, ot, sizeof ot);
    human(c->gather, ga, sizeof ga);
    human(c->comm, cm, sizeof cm);
    human(c->logits, lg, sizeof lg);
    human(c->slack, sl, sizeof sl);
    printf("%3d  %-62s %3dx%dx%d  %9s %9s %9s %9s  %10s  %9s %9s %9s %9s %9s %9s %9s %10s\n", i, c->flags, c->dp, c->tp,
           c->pp, st, cp, ex, bu, pk, pa, gr, op, ga, cm, lg, sl, ot);
}

int plan_search_main(const search_opts *so)
{
    int ranks = so->ranks ? so->ranks : mf_world_size(), per_node = so->per_node ? so->per_node : ranks;
    if (per_node > ranks) per_node = ranks;
    if (ranks % per_node) {
        fprintf(stderr, "mpiflow-plan: error: --ranks %d is not divisible by --ranks-per-node %d; give a rank count "
                "that fills whole nodes\n", ranks, per_node);
        return 2;
    }
    if (so->tuning && mf_coll_tuning_load(so->tuning) != MF_OK) {
        fprintf(stderr, "mpiflow-plan: error: --tuning: %s\n", mf_last_error());
        return 2;
    }
    mf_calibration *cal = so->calibration ? mf_calibration_load(so->calibration) : mf_calibration_default();
    if (!cal) {
        fprintf(stderr, "mpiflow-plan: error: --calibration: %s\n", mf_last_error());
        return 2;
    }
    char err[256];
    int n = 0;
    candidate *c = plan_candidates(&so->base, ranks, per_node, &n, err, sizeof err);
    if (!c) {
        fprintf(stderr, "mpiflow-plan: error: %s\n", err);
        mf_calibration_destroy(cal);
        return 2;
    }
    double t0 = mf_time();
    for (int i = 0; i < n; i++) plan_predict(&so->base, ranks, per_node, cal, &c[i]);
    double took = mf_time() - t0;
    plan_rank(c, n, so->memory);
    int fit = 0, runnable = 0;
    for (int i = 0; i < n; i++) {
        runnable += c[i].ok;
        fit += c[i].ok && (!so->memory || c[i].peak <= so->memory);
    }
    int code = 0;
    if (so->tsv) {   /* for scripts: every plan, in rank order */
        for (int i = 0; i < n; i++)
            printf("%s\t%d\t%d\t%d\t%d\t%.6g\t%lld\t%lld\t%lld\t%lld\t%lld\t%lld\t%lld\t%lld\t%lld\t%s\n", c[i].flags, c[i].dp,
                   c[i].tp, c[i].pp, c[i].ok, c[i].ok ? c[i].time.step : 0.0, (long long)c[i].peak,
                   (long long)c[i].params, (long long)c[i].grads, (long long)c[i].optim, (long long)c[i].gather,
                   (long long)c[i].comm, (long long)c[i].logits, (long long)c[i].slack, (long long)c[i].grads_peak,
                   c[i].plan_json);
        free(c);
        mf_calibration_destroy(cal);
        return 0;
    }
    char mem[32] = "no limit";
    if (so->memory) human(so->memory, mem, sizeof mem);
    printf("mpiflow-plan: %s%s%s, batch %lld, on %d rank(s) in node(s) of %d, memory %s per rank\n", so->base.model,
           !strcmp(so->base.model, "gpt") ? " " : "", !strcmp(so->base.model, "gpt") ? so->base.preset : "",
           (long long)so->base.batch_size, ranks, per_node, mem);
    printf("mpiflow-plan: %d plans, %d can run, %d fit; predicted in %.2f s (rates: %s)\n", n, runnable, fit, took,
           mf_calibration_source(cal));
    if (!runnable) {
        fprintf(stderr, "mpiflow-plan: error: no plan can run: %s\n", c[0].why);
        code = 2;
    } else if (!fit) {
        char need[32], flag[32];
        human(c[0].peak, need, sizeof need);   /* sorted: the smallest over budget first */
        flag_size(c[0].peak, flag, sizeof flag);
        fprintf(stderr, "mpiflow-plan: error: no plan fits in %s per rank; the smallest needs %s (%s): give --memory "
                "%s or more, more ranks, or a smaller batch\n", mem, need, c[0].flags, flag);
        code = 2;
    }
    if (fit || so->all)
        printf("%3s  %-62s %-8s  %9s %9s %9s %9s  %10s  %9s %9s %9s %9s %9s %9s %9s %10s\n", "#",
               "plan (mpiflow-train flags)", "dp x tp x pp", "step", "compute", "exp.comm", "bubble", "peak/rank", "params",
               "grads", "optimizer", "gathers", "comm.buf", "logits", "slack", "activ.+tmp");
    int shown = 0;
    for (int i = 0; i < n && (so->all || shown < so->top); i++) {
        bool fits = c[i].ok && (!so->memory || c[i].peak <= so->memory);
        if (!so->all && !fits) continue;
        if (c[i].ok) print_row(++shown, &c[i]);
        else printf("  -  %-62s %3dx%dx%d  cannot run: %s\n", c[i].flags, c[i].dp, c[i].tp, c[i].pp, c[i].why);
        if (so->all && c[i].ok && !fits) printf("     (over the memory)\n");
    }
    if (fit >= 2 && mf_rank() == 0) {   /* why the next lose */
        printf("best: %s; the next is %.0f %% slower", c[0].flags, 100.0 * (c[1].time.step / c[0].time.step - 1));
        if (c[1].time.exposed_comm > c[0].time.exposed_comm * 1.1)
            printf(" (more communication exposed: %.1f ms against %.1f ms)", c[1].time.exposed_comm * 1e3,
                   c[0].time.exposed_comm * 1e3);
        else if (c[1].time.compute > c[0].time.compute * 1.05)
            printf(" (more compute: recompute or smaller pieces, %.1f ms against %.1f ms)", c[1].time.compute * 1e3,
                   c[0].time.compute * 1e3);
        else if (c[1].time.bubble > c[0].time.bubble)
            printf(" (a pipeline bubble of %.1f ms)", c[1].time.bubble * 1e3);
        printf("\n");
    }
    for (int i = 0; i < n && code == 0; i++)   /* the best tensor-parallel plan's layout */
        if (c[i].ok && c[i].tp > 1 && c[i].layout[0]) {
            printf("layout search, tensor parallel %d (%s): %s\n", c[i].tp, c[i].flags, c[i].layout);
            if (so->explain) {
                int nodes = ranks / per_node, dpn = nodes / c[i].pp > 1 ? nodes / c[i].pp : 1;
                layout_for(&so->base, c[i].tp, c[i].dp, dpn, cal, true);
                if (layout_last) mf_layout_print(layout_last, stdout);
            }
            break;
        }
    if (code == 0 && so->explain) {   /* the best again, entry by entry */
        candidate e = c[0];
        e.explain = true;
        plan_predict(&so->base, ranks, per_node, cal, &e);
    }
    if (code == 0 && so->write) code = plan_write_best(&so->base, &c[0], ranks, so->write);
    free(c);
    mf_calibration_destroy(cal);
    mf_layout_destroy(layout_last);
    layout_last = NULL;
    return code;
}

int plan_auto(train_opts *o, candidate *best, candidate **lead, int *nlead)
{
    *lead = NULL;
    *nlead = 0;
    int ranks = mf_world_size(), per_node = mf_local_size(), n = 0, code = 0;
    mf_calibration *cal = o->calibration ? mf_calibration_load(o->calibration) : mf_calibration_default();
    if (!cal) {
        if (mf_rank() == 0) fprintf(stderr, "mpiflow-train: error: --calibration: %s\n", mf_last_error());
        return 2;
    }
    char err[256];
    train_opts base = *o;
    base.plan = NULL;
    candidate *c = plan_candidates(&base, ranks, per_node, &n, err, sizeof err);
    if (!c) {
        if (mf_rank() == 0) fprintf(stderr, "mpiflow-train: error: --plan auto: %s\n", err);
        mf_calibration_destroy(cal);
        return 2;
    }
    double t0 = mf_time();
    for (int i = 0; i < n; i++) plan_predict(&base, ranks, per_node, cal, &c[i]);
    double took = mf_time() - t0;
    plan_rank(c, n, o->memory);
    bool fits = c[0].ok && (!o->memory || c[0].peak <= o->memory);
    if (!fits) {
        char need[32], mem[32], flag[32];
        human(c[0].peak, need, sizeof need);
        human(o->memory, mem, sizeof mem);
        flag_size(c[0].peak, flag, sizeof flag);
        if (mf_rank() == 0) {
            if (!c[0].ok) fprintf(stderr, "mpiflow-train: error: --plan auto: no plan can run: %s\n", c[0].why);
            else fprintf(stderr, "mpiflow-train: error: --plan auto: no plan fits in %s per rank; the smallest needs "
                         "%s (%s): give --memory %s or more, more ranks, or a smaller batch\n", mem, need, c[0].flags, flag);
        }
        code = 2;
    } else {
        *best = c[0];
        if (mf_rank() == 0) {
            char st[24], pk[24];
            seconds(c[0].time.step, st, sizeof st);
            human(c[0].peak, pk, sizeof pk);
            printf("mpiflow-train: --plan auto: %s (%dx%dx%d), predicted %s a step and %s per rank; the best of %d "
                   "plans, predicted in %.2f s (rates: %s)\n", c[0].flags, c[0].dp, c[0].tp, c[0].pp, st, pk, n, took,
                   mf_calibration_source(cal));
            fflush(stdout);
        }
        plan_apply_candidate(o, best);
        o->plan = NULL;
        int k = o->plan_trials > 1 ? o->plan_trials : 0;
        *lead = k ? malloc((size_t)k * sizeof **lead) : NULL;
        for (int i = 0; *lead && i < n && *nlead < k; i++)
            if (c[i].ok && (!o->memory || c[i].peak <= o->memory) && c[i].time.step <= PLAN_TRIAL_SPAN * c[0].time.step)
                (*lead)[(*nlead)++] = c[i];
    }
    free(c);
    mf_calibration_destroy(cal);
    return code;
}
