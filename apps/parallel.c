/*
 * apps/parallel.c - mpiflow-train's --parallel modes. Each is only a
 * choice of placement and SBPs; the library derives the communication.
 *   dp      parameters B, data S(0)
 *   mp      Linear weights and biases S(0) (output features), data B
 *           (S(0) for a model with convolutions, which stay data parallel)
 *   hybrid  data S(0), parameters B, the last Linear S(0)
 *   2d      mesh R x C: Linear (B,S(0)), other parameters (B,B), data (S(0),B)
 *   tp      a GPT on a mesh dp x tp: Megatron-LM's split along tp
 *           (mf_gpt_parallelize), data (S(0),B); tp+sp adds sequence
 *           parallelism
 * Conv layers keep B parameters in every mode. Each mode is a plan
 * (apps/plan_flags.c, doc/plans.md): its mesh, the data's SBP and the
 * parameters' rules are read from it, as from a --plan file.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "apps/parallel.h"

/* The mesh and the data's layout of plan on k ranks (a stage's, with a
 * pipeline): a 2-D mesh R x C, or 1-D. */
static mf_status plan_mesh(par *pp, const mf_plan *plan, int k, char *err, size_t len)
{
    int nd = mf_plan_mesh_ndim(plan);
    int size[2] = {mf_plan_mesh_size(plan, 0, k), nd > 1 ? mf_plan_mesh_size(plan, 1, k) : 1};
    if (nd > 2 || size[0] < 1 || size[1] < 1) {
        snprintf(err, len, "%s: the mesh does not fit the %d rank(s) %s", pp->what, k,
                 pp->nstages > 1 ? "of each pipeline stage" : "of the job");
        return MF_ERR_ARG;
    }
    pp->mesh_r = nd == 2 ? size[0] : 0;
    pp->mesh_c = nd == 2 ? size[1] : 0;
    if (mf_plan_data_sbp(plan, pp->data_buf, sizeof pp->data_buf) != MF_OK) {
        snprintf(err, len, "%s: %s", pp->what, mf_last_error());
        return MF_ERR_ARG;
    }
    pp->data_sbp = pp->data_buf;
    mf_nd_sbp d;
    int splits = 0;
    if (mf_nd_sbp_parse(pp->data_sbp, &d) == MF_OK)
        for (int e = 0; e < d.ndim; e++) splits += d.d[e].kind == MF_SBP_S ? 1 + (d.d[e].axis != 0) * 99 : 0;
    if (splits > 1) {
        snprintf(err, len, "%s: data %s: mpiflow-train splits the batch (S(0)) along one mesh dimension at most",
                 pp->what, pp->data_sbp);
        return MF_ERR_ARG;
    }
    return MF_OK;
}

/* a ViT's heads split whole over the plan's "tp" dimension (its
 * Megatron-style rules split q, k and v by output features) */
static mf_status check_heads(const par *pp, const mf_plan *plan, const mf_module *model, int k, char *err, size_t len)
{
    int d = mf_plan_mesh_find(plan, "tp"), H = mf_vit_heads(model), tp = d >= 0 ? mf_plan_mesh_size(plan, d, k) : 1;
    if (H < 1 || tp < 2 || H % tp == 0) return MF_OK;
    snprintf(err, len, "%s: the ViT's %d heads do not split over %d tensor-parallel ranks; pick a degree that "
             "divides the head count", pp->what, H, tp);
    return MF_ERR_ARG;
}

/* a plan that is data parallel only: 1-D, no rules, the batch split */
static bool plan_is_dp(const mf_plan *plan)
{
    char d[64];
    return mf_plan_mesh_ndim(plan) == 1 && mf_plan_num_rules(plan) == 0 && mf_plan_data_sbp(plan, d, sizeof d) == MF_OK &&
           !strcmp(d, "S(0)");
}

/* this rank's shard of each batch, from its place in p: its coordinate
 * along the mesh dimension where the data is S(0) */
static void shard_of(par *pp)
{
    int idx = mf_placement_index(pp->p);
    mf_nd_sbp d;
    if (idx < 0 || mf_nd_sbp_parse(pp->data_sbp, &d) != MF_OK) return;
    int nd = mf_placement_mesh_ndim(pp->p), coord[MF_MAX_MESH];
    for (int e = nd - 1; e >= 0; e--) {   /* row-major: the last dimension varies fastest */
        coord[e] = idx % mf_placement_mesh_dim(pp->p, e);
        idx /= mf_placement_mesh_dim(pp->p, e);
    }
    for (int e = 0; e < nd && e < d.ndim; e++)
        if (d.d[e].kind == MF_SBP_S) {
            pp->shard_index = coord[e];
            pp->shard_count = mf_placement_mesh_dim(pp->p, e);
        }
}

static mf_placement *mesh_placement(const par *pp, int n, const int *ranks)
{
    return pp->mesh_r ? mf_placement_create(n, ranks, 2, (const int[]){pp->mesh_r, pp->mesh_c}, pp->dev)
                      : mf_placement_create(n, ranks, 1, &n, pp->dev);
}

/* the largest divisor of the batch that is at most 4 P */
static int default_micro_batches(int64_t batch, int P)
{
    int m = 4 * P;
    while (m > 1 && batch % m) m--;
    return m;
}

/* --pipeline-stages / --pipeline-cuts / --micro-batches: P equal groups
 * of consecutive ranks, the mode inside each. */
static mf_status pipe_setup(par *pp, const train_opts *o, const mf_plan *plan, mf_module *model, char *err, size_t len)
{
    int n = mf_world_size(), P = 0;
    bool gpt = mf_gpt_config_of(model) != NULL;
    mf_module *layers = gpt ? mf_gpt_layers(model) : model;   /* a GPT's embeddings, blocks and head */
    mf_status st;
    if (!layers) return mf_last_status();
    if (o->pipeline_cuts) {
        st = mf_pipeline_parse_cuts(layers, o->pipeline_cuts, &P, pp->first);
        if (st == MF_OK && o->pipeline_stages && o->pipeline_stages != P) {
            snprintf(err, len, "--pipeline-cuts %s makes %d stages but --pipeline-stages is %d", o->pipeline_cuts, P,
                     o->pipeline_stages);
            return MF_ERR_ARG;
        }
    } else {
        P = o->pipeline_stages ? o->pipeline_stages : 1;
        st = mf_pipeline_balance(layers, P, pp->first);
    }
    if (st != MF_OK) {
        snprintf(err, len, "%s: %s%s", o->pipeline_cuts ? "--pipeline-cuts" : "--pipeline-stages", mf_last_error(),
                 gpt ? "; a GPT's layers are its embeddings, each block, and the final LayerNorm with the head" : "");
        return st;
    }
    if (P > n || n % P) {
        snprintf(err, len, "--pipeline-stages %d: the job's %d rank(s) %s", P, n,
                 P > n ? "are fewer than the stages (each stage needs its own ranks)"
                       : "cannot be cut into equal groups, one per stage");
        return MF_ERR_ARG;
    }
    int k = n / P, tp = o->tensor_parallel ? o->tensor_parallel : 1;
    int kdp = k % tp == 0 ? k / tp : k;   /* a stage's data-parallel ranks */
    pp->nstages = P;
    pp->zero = o->zero >= 2 ? o->zero : 0;
    pp->schedule = o->pipeline_schedule;
    pp->micro_batches = o->micro_batches ? o->micro_batches : default_micro_batches(o->batch_size, P);
    pp->loader_micro = pp->micro_batches;
    pp->mode = tp > 1 ? (o->sequence_parallel ? "tp+sp" : "tp") : o->parallel ? o->parallel : "dp";
    if (o->shards) {   /* one shard per data-parallel rank in each micro-batch */
        if (strcmp(pp->mode, "dp") && strcmp(pp->mode, "none") && strncmp(pp->mode, "tp", 2) &&
            !(!strcmp(pp->mode, "plan") && plan_is_dp(plan))) {
            snprintf(err, len, "--deterministic: %s; the shards' sums cover data parallelism (dp, also "
                     "inside pipeline stages)", pp->what);
            return MF_ERR_ARG;
        }
        if (o->shards % kdp || (o->micro_batches && (o->shards / kdp) % o->micro_batches)) {
            snprintf(err, len, "--deterministic=%d: the shards do not split evenly over %d data-parallel rank(s) per "
                     "stage%s", o->shards, kdp, o->micro_batches && o->shards % kdp == 0 ? " and --micro-batches" : "");
            return MF_ERR_ARG;
        }
        pp->shards = o->shards;
        pp->micro_batches = o->shards / kdp;
        pp->loader_micro = 1;   /* each rank loads its consecutive shards */
    }
    if (!strcmp(pp->mode, "none")) {
        if (k > 1) {
            snprintf(err, len, "--parallel none: each of the %d stages has %d ranks; pick dp, mp, hybrid or 2d", P, k);
            return MF_ERR_ARG;
        }
        pp->mode = "dp";
    }
    if (k % tp) {
        snprintf(err, len, "--tensor-parallel %d: each of the %d stages has %d rank(s), which do not form groups of %d",
                 tp, P, k, tp);
        return MF_ERR_ARG;
    }
    if (gpt) {   /* a mesh (k/tp) x tp in each stage, as gpt_tp_setup */
        pp->mode = o->sequence_parallel ? "tp+sp" : tp > 1 ? "tp" : "dp";
        pp->mesh_r = k / tp;
        pp->mesh_c = tp;
        pp->data_sbp = "S(0),B";
    } else if ((st = plan_mesh(pp, plan, k, err, len)) != MF_OK || (st = check_heads(pp, plan, model, k, err, len))) {
        return st;
    }
    int *ranks = malloc((size_t)k * sizeof *ranks);
    if (!ranks) return MF_ERR_NOMEM;
    for (int s = 0; s < P && (s == 0 || pp->stage[s - 1]); s++) {
        for (int i = 0; i < k; i++) ranks[i] = s * k + i;
        pp->stage[s] = mesh_placement(pp, k, ranks);
    }
    free(ranks);
    if (!pp->stage[P - 1]) return mf_last_status();
    pp->p = mf_placement_retain(pp->stage[mf_rank() / k]);
    shard_of(pp);
    if (gpt) {
        mf_gpt_pipeline_opts go = {P, pp->first, pp->stage, {1, o->sequence_parallel, o->zero >= 2 ? o->zero : 0}, pp->micro_batches,
                                   MF_PIPELINE_1F1B, pp->shards};
        if (mf_pipeline_schedule_parse(o->pipeline_schedule, &go.schedule) == MF_OK)
            pp->pipe = mf_gpt_pipeline_create(model, &go);
        if (!pp->pipe) snprintf(err, len, "--pipeline-stages: %s", mf_last_error());
        return pp->pipe ? MF_OK : mf_last_status();
    }
    st = mf_plan_apply_pipeline(plan, model, P, pp->first, pp->stage);
    if (st != MF_OK) {
        snprintf(err, len, "%s: %s", pp->what, mf_last_error());
        return st;
    }
    const char *in_sbp[MF_MAX_STAGES];
    for (int s = 0; s < P; s++) in_sbp[s] = pp->data_sbp;
    mf_pipeline_opts po = {P, pp->first, pp->stage, in_sbp, pp->micro_batches, MF_PIPELINE_1F1B, pp->shards};
    if (mf_pipeline_schedule_parse(o->pipeline_schedule, &po.schedule) == MF_OK) pp->pipe = mf_pipeline_create(model, &po);
    if (!pp->pipe) {
        snprintf(err, len, "--pipeline-stages: %s", mf_last_error());
        return mf_last_status();
    }
    return MF_OK;
}

/* all n ranks as the mode's mesh, and this rank's shard of the data */
static mf_status world_placement(par *pp, int n)
{
    int *all = malloc((size_t)n * sizeof *all);
    if (!all) return MF_ERR_NOMEM;
    for (int i = 0; i < n; i++) all[i] = i;
    pp->p = mesh_placement(pp, n, all);
    free(all);
    if (!pp->p) return mf_last_status();
    shard_of(pp);
    return MF_OK;
}

/* --tensor-parallel N for a GPT: a mesh (ranks/N) x N, data parallel
 * over its rows, Megatron-LM's split along its columns */
static mf_status gpt_tp_setup(par *pp, const train_opts *o, mf_module *model, char *err, size_t len)
{
    int n = mf_world_size(), tp = o->tensor_parallel ? o->tensor_parallel : 1;
    if (o->parallel && strcmp(o->parallel, "dp")) {
        snprintf(err, len, "--tensor-parallel: --parallel %s; tensor parallelism combines with dp only", o->parallel);
        return MF_ERR_ARG;
    }
    if (n % tp) {
        snprintf(err, len, "--tensor-parallel %d: the job's %d rank(s) do not form groups of %d", tp, n, tp);
        return MF_ERR_ARG;
    }
    pp->mode = o->sequence_parallel ? "tp+sp" : tp > 1 ? "tp" : "dp";
    pp->zero = o->zero >= 2 ? o->zero : 0;
    pp->mesh_r = n / tp;
    pp->mesh_c = tp;
    pp->data_sbp = "S(0),B";
    mf_status st = world_placement(pp, n);
    if (st != MF_OK) return st;
    mf_gpt_parallel gp = {1, o->sequence_parallel, o->zero >= 2 ? o->zero : 0};
    st = mf_gpt_parallelize(model, pp->p, &gp);
    if (st != MF_OK) snprintf(err, len, "--tensor-parallel %d: %s", tp, mf_last_error());
    return st;
}

mf_status par_setup(par *pp, const train_opts *o, const mf_plan *plan, mf_module *model, char *err, size_t len)
{
    int n = mf_world_size();
    memset(pp, 0, sizeof *pp);
    pp->dev = mf_simulating() ? MF_DEV_META : strcmp(o->device, "cuda") ? MF_DEV_CPU : MF_DEV_CUDA;   /* a simulated rank: meta */
    if (o->plan_text) snprintf(pp->what, sizeof pp->what, "the searched plan");
    else if (o->plan) snprintf(pp->what, sizeof pp->what, "--plan %s", o->plan);
    else if (o->tensor_parallel) snprintf(pp->what, sizeof pp->what, "--tensor-parallel %d", o->tensor_parallel);
    else snprintf(pp->what, sizeof pp->what, "--parallel %s", o->parallel ? o->parallel : "dp");
    if (o->pipeline_stages || o->pipeline_cuts || o->micro_batches || o->shards)
        return pipe_setup(pp, o, plan, model, err, len);
    if (mf_gpt_config_of(model) && (o->tensor_parallel || o->zero >= 2)) return gpt_tp_setup(pp, o, model, err, len);
    pp->mode = o->tensor_parallel ? (o->sequence_parallel ? "tp+sp" : "tp") : o->parallel ? o->parallel : n > 1 ? "dp" : "none";
    if (!strcmp(pp->mode, "none")) return MF_OK;
    mf_status st = plan_mesh(pp, plan, n, err, len);
    if (st == MF_OK) st = check_heads(pp, plan, model, n, err, len);
    pp->zero = mf_plan_zero_stage(plan) >= 2 ? mf_plan_zero_stage(plan) : 0;
    if (st == MF_OK) st = world_placement(pp, n);
    if (st != MF_OK) return st;
    st = mf_plan_apply(plan, model, pp->p);
    if (st != MF_OK) snprintf(err, len, "%s: %s", pp->what, mf_last_error());
    return st;
}

mf_status par_batch(const par *pp, int64_t rows, mf_tensor **x, mf_tensor **y)
{
    if (!pp->p) {   /* one rank, local tensors: onto the device */
        if (pp->dev == MF_DEV_CPU) return MF_OK;
        mf_tensor *dx = mf_to_device(*x, pp->dev), *dy = dx ? mf_to_device(*y, pp->dev) : NULL;
        mf_tensor_destroy(*x);
        mf_tensor_destroy(*y);
        *x = dx;
        *y = dy;
        if (!dy) {
            mf_tensor_destroy(dx);
            *x = NULL;
            return mf_last_status();
        }
        return MF_OK;
    }
    mf_tensor *gx, *gy;
    if (pp->shard_count > 1) {
        int64_t xs[MF_MAX_DIMS];
        int nd = mf_tensor_ndim(*x);
        memcpy(xs, mf_tensor_shape(*x), (size_t)nd * sizeof *xs);
        xs[0] = rows;
        gx = mf_global_from_piece(*x, nd, xs, pp->p, pp->data_sbp);
        int ny = mf_tensor_ndim(*y);   /* labels [B], or a language model's targets [B, T] */
        int64_t ys[MF_MAX_DIMS];
        memcpy(ys, mf_tensor_shape(*y), (size_t)ny * sizeof *ys);
        ys[0] = rows;
        gy = gx ? mf_global_from_piece(*y, ny, ys, pp->p, pp->data_sbp) : NULL;
    } else {
        gx = mf_global_from_full(*x, pp->p, pp->data_sbp);
        gy = gx ? mf_global_from_full(*y, pp->p, pp->data_sbp) : NULL;
    }
    mf_tensor_destroy(*x);
    mf_tensor_destroy(*y);
    *x = gx;
    *y = gy;
    if (!gy) {
        mf_tensor_destroy(gx);
        *x = NULL;
        return mf_last_status();
    }
    return MF_OK;
}

mf_status par_micro_batches(const par *pp, int64_t rows, int n, bool shards, mf_tensor *x, mf_tensor *y,
                            mf_tensor **mx, mf_tensor **my)
{
    int last = pp->nstages - 1, nd = mf_tensor_ndim(x);
    int64_t off = 0, gs[MF_MAX_DIMS];
    memcpy(gs, mf_tensor_shape(x), (size_t)nd * sizeof *gs);
    for (int m = 0; m < n; m++) mx[m] = my[m] = NULL;
    mf_status st = MF_OK;
    for (int m = 0; m < n && st == MF_OK; m++) {
        int64_t bm = rows / n + (m < rows % n);   /* the loader's balanced split into micro-batches */
        int64_t piece;
        if (shards) {   /* one shard of rows / (n k) rows on each of the stage's k data-parallel ranks */
            int64_t k = pp->shard_count > 0 ? pp->shard_count : 1;
            piece = rows / ((int64_t)n * k);
            bm = piece * k;
            gs[0] = bm;
        } else {
            gs[0] = bm;
            /* this rank's rows of it: its block in its own stage (all stages have one layout) */
            int64_t start[MF_MAX_DIMS], count[MF_MAX_DIMS];
            st = mf_global_piece_range(pp->p, pp->data_sbp, nd, gs, start, count);
            if (st != MF_OK) break;
            piece = count[0];
        }
        /* other ranks' pieces only give the dtype: every rank loads its
         * rows the same way, so they have the right shape too */
        mf_tensor *px = mf_narrow(x, 0, off, piece);
        mf_tensor *py = mf_narrow(y, 0, off, piece);
        mf_tensor *cx = px ? mf_contiguous(px) : NULL;
        mx[m] = mf_global_from_piece(cx, nd, gs, pp->stage[0], pp->data_sbp);
        int64_t ys[MF_MAX_DIMS];   /* labels [rows], or a language model's targets [rows, T] */
        memcpy(ys, mf_tensor_shape(y), (size_t)mf_tensor_ndim(y) * sizeof *ys);
        ys[0] = bm;
        my[m] = mf_global_from_piece(py, mf_tensor_ndim(y), ys, pp->stage[last], pp->data_sbp);
        if (!mx[m] || !my[m]) st = mf_last_status();
        mf_tensor_destroy(px);
        mf_tensor_destroy(cx);
        mf_tensor_destroy(py);
        off += piece;
    }
    return st;
}

static const char *zero_words(int zero)
{
    return zero == 3 ? ", ZeRO-3: parameters split, gathered for each module's forward and freed after"
           : zero == 2 ? ", ZeRO-2: parameters split, gathered for each module's forward" : "";
}

void par_describe(const par *pp, char *buf, size_t len)
{
    char pl[128];
    if (pp->nstages) {
        size_t k = (size_t)snprintf(buf, len, "pipeline of %d stage(s) x %s on %d rank(s) each, %s schedule, %d micro-batches",
                                    pp->nstages, pp->mode, mf_placement_size(pp->stage[0]), pp->schedule,
                                    pp->micro_batches);
        if (!strncmp(pp->mode, "tp", 2) && k < len)
            k += (size_t)snprintf(buf + k, len - k, ", %d data-parallel x %d tensor-parallel ranks per stage%s", pp->mesh_r,
                                  pp->mesh_c, strcmp(pp->mode, "tp+sp") ? "" : ", sequence parallel");
        if (pp->shards && k < len)
            k += (size_t)snprintf(buf + k, len - k, ", deterministic: %d shards summed in order%s", pp->shards,
                                  zero_words(pp->zero));
        for (int s = 0; s < pp->nstages && k < len; s++)
            k += (size_t)snprintf(buf + k, len - k, "; stage %d: layers %d-%d on %s", s, pp->first[s],
                                  pp->first[s + 1] - 1, mf_placement_str(pp->stage[s], pl, sizeof pl));
        return;
    }
    if (!pp->p) snprintf(buf, len, "none (local tensors)");
    else if (pp->mesh_r && (!strncmp(pp->mode, "tp", 2) || pp->zero))
        snprintf(buf, len, "%s: %d data-parallel x %d tensor-parallel ranks%s%s (%s)", pp->mode, pp->mesh_r, pp->mesh_c,
                 strcmp(pp->mode, "tp+sp") ? "" : ", sequence parallel",
                 zero_words(pp->zero),
                 mf_placement_str(pp->p, pl, sizeof pl));
    else if (pp->mesh_r) snprintf(buf, len, "%s on mesh %dx%d (%s)%s", pp->mode, pp->mesh_r, pp->mesh_c,
                                  mf_placement_str(pp->p, pl, sizeof pl), zero_words(pp->zero));
    else snprintf(buf, len, "%s on ranks %s%s", pp->mode, mf_placement_str(pp->p, pl, sizeof pl), zero_words(pp->zero));
}

mf_status par_dump_params(mf_module *model, const char *path)
{
    mf_tensor_list *l = mf_module_parameters(model);
    if (!l) return mf_last_status();
    FILE *f = mf_rank() == 0 ? fopen(path, "w") : NULL;
    mf_status st = MF_OK;
    if (mf_rank() == 0 && !f) {
        fprintf(stderr, "mpiflow-train: error: --dump-params: cannot write %s\n", path);
        st = MF_ERR_IO;
    }
    for (int i = 0; i < l->n && st == MF_OK; i++) {
        mf_tensor *t = l->items[i].tensor;
        mf_tensor *full = mf_tensor_is_global(t) ? mf_global_gather(t) : mf_tensor_retain(t);
        if (!full) {
            st = mf_last_status();
            break;
        }
        int64_t cnt = mf_tensor_numel(full);
        float *v = f ? malloc((size_t)(cnt + 1) * sizeof *v) : NULL;
        if (f && v && mf_tensor_copy_out(full, MF_F32, v, cnt) == MF_OK) {
            char sh[128];
            fprintf(f, "# %s %s\n", l->items[i].name, mf_tensor_shape_str(full, sh, sizeof sh));
            for (int64_t k = 0; k < cnt; k++) fprintf(f, "%.9g\n", v[k]);
        }
        free(v);
        mf_tensor_destroy(full);
    }
    if (f && fclose(f) != 0) st = MF_ERR_IO;
    mf_tensor_list_destroy(l);
    return mf_agree(st);
}

void par_destroy(par *pp)
{
    mf_pipeline_destroy(pp->pipe);
    for (int s = 0; s < pp->nstages; s++) mf_placement_destroy(pp->stage[s]);
    mf_placement_destroy(pp->p);
}
