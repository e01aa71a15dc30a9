/*
 * apps/plan_flags.c - mpiflow-train's parallel flags as a plan
 * (doc/plans.md), and back. The image models' modes become rules on
 * their Linear layers; --tensor-parallel becomes the ViT's or the GPT's
 * Megatron-style rules; the GPT's flags become Megatron-LM's rules,
 * ZeRO over dp, sequence parallelism as the blocks' input layout and
 * recompute as block patterns. A --plan file for an image model is run
 * as it is; one for the GPT must be one its flags can say.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "apps/plan_flags.h"

/* the mesh R x C of --parallel 2d on k ranks (checked against --mesh) */
static int mesh_2d(const train_opts *o, int k, int *r, int *c, char *err, size_t len)
{
    *r = o->mesh_r ? o->mesh_r : k % 2 == 0 ? 2 : k;
    *c = o->mesh_c ? o->mesh_c : k % 2 == 0 ? k / 2 : 1;
    if (*r * *c != k) {
        snprintf(err, len, "--mesh %dx%d has %d ranks but %s %d", *r, *c, *r * *c,
                 o->pipeline_stages || o->pipeline_cuts ? "each stage has" : "the job has", k);
        return 2;
    }
    return 0;
}

static int stages_of(const train_opts *o)
{
    if (o->pipeline_cuts) {   /* N cuts, N + 1 stages */
        int n = 2;
        for (const char *p = o->pipeline_cuts; *p; p++) n += *p == ',';
        return n;
    }
    return o->pipeline_stages ? o->pipeline_stages : 1;
}

/* the rules of an image model's mode, on its top-level Linear layers
 * (found by their parameters' names: "hidden.weight" is layer hidden) */
static mf_status image_rules(mf_plan *plan, const char *mode, mf_module *model)
{
    const char *sbp = !strcmp(mode, "2d") ? "tp=S(0)" : !strcmp(mode, "mp") || !strcmp(mode, "hybrid") ? "S(0)" : NULL;
    bool has_conv = false;
    for (int i = 0; i < mf_module_num_children(model); i++)
        has_conv |= !strcmp(mf_module_type(mf_module_child_at(model, i)), "Conv2d");
    if (!strcmp(mode, "mp") && mf_plan_set_data(plan, has_conv ? "S(0)" : "B") != MF_OK) return mf_last_status();
    if (!sbp) return MF_OK;
    mf_tensor_list *l = mf_module_state_dict(model);
    if (!l) return mf_last_status();
    char layers[16][128];
    int n = 0;
    for (int i = 0; i < l->n && n < 16; i++) {
        const char *dot = strchr(l->items[i].name, '.');
        if (!dot || dot - l->items[i].name >= 128) continue;
        char head[128];
        snprintf(head, sizeof head, "%.*s", (int)(dot - l->items[i].name), l->items[i].name);
        mf_module *c = mf_module_child(model, head);
        if (!c || strcmp(mf_module_type(c), "Linear") || (n && !strcmp(layers[n - 1], head))) continue;
        snprintf(layers[n++], sizeof layers[0], "%s", head);
    }
    mf_tensor_list_destroy(l);
    mf_status st = MF_OK;
    for (int i = !strcmp(mode, "hybrid") ? n - 1 : 0; i >= 0 && i < n && st == MF_OK; i++) {
        char pattern[140];
        snprintf(pattern, sizeof pattern, "%s.*", layers[i]);
        st = mf_plan_add_rule(plan, pattern, sbp);
    }
    return st;
}

mf_plan *plan_of_flags(const train_opts *o, mf_module *model, int n, char *err, size_t len)
{
    bool gpt = mf_gpt_config_of(model) != NULL;
    int P = stages_of(o), k = P > 0 && n % P == 0 ? n / P : n;
    bool pipe = o->pipeline_stages || o->pipeline_cuts || o->micro_batches;
    mf_plan *plan = mf_plan_create();
    if (!plan) goto fail;
    const char *mode = o->parallel && strcmp(o->parallel, "none") ? o->parallel : "dp";
    const char *dim = "dp";
    if (gpt) {
        int tp = o->tensor_parallel ? o->tensor_parallel : 1;
        if (o->tensor_parallel || o->zero >= 2 || pipe) {
            if (mf_plan_set_mesh(plan, 2, (const char *const[]){"dp", "tp"}, (const int[]){-1, tp}) != MF_OK) goto fail;
        }
        if (tp > 1 && mf_gpt_add_megatron_rules(plan, "tp", o->sequence_parallel) != MF_OK) goto fail;
        if (o->recompute && strcmp(o->recompute, "none") &&
            mf_plan_add_recompute(plan, !strcmp(o->recompute, "block") ? "transformer.h.*" : "transformer.h.*.attn") != MF_OK)
            goto fail;
    } else if (o->recompute && strcmp(o->recompute, "none") && mf_plan_add_recompute(plan, o->recompute) != MF_OK) {
        goto fail;
    }
    if (gpt) {
        /* the GPT's rules are above */
    } else if (o->tensor_parallel) {   /* the model's Megatron-style rules (checked: the ViT's) */
        if (mf_plan_set_mesh(plan, 2, (const char *const[]){"dp", "tp"}, (const int[]){-1, o->tensor_parallel}) != MF_OK ||
            mf_vit_add_megatron_rules(plan, "tp", o->sequence_parallel) != MF_OK)
            goto fail;
    } else if (!strcmp(mode, "2d")) {
        int r, c;
        if (mesh_2d(o, k, &r, &c, err, len)) {
            mf_plan_destroy(plan);
            return NULL;
        }
        if (mf_plan_set_mesh(plan, 2, (const char *const[]){"dp", "tp"}, (const int[]){r, c}) != MF_OK) goto fail;
        if (image_rules(plan, mode, model) != MF_OK) goto fail;
    } else {
        if (!strcmp(mode, "mp")) {
            dim = "mp";
            if (mf_plan_set_mesh(plan, 1, (const char *const[]){"mp"}, (const int[]){-1}) != MF_OK) goto fail;
        }
        if (image_rules(plan, mode, model) != MF_OK) goto fail;
    }
    if (o->zero && mf_plan_set_zero(plan, o->zero, dim) != MF_OK) goto fail;
    if (pipe && mf_plan_set_pipeline(plan, P, o->pipeline_cuts, o->micro_batches, o->pipeline_schedule) != MF_OK)
        goto fail;
    return plan;
fail:
    snprintf(err, len, "the flags' plan: %s", mf_last_error());
    mf_plan_destroy(plan);
    return NULL;
}

/* the GPT's flags that a plan stands for: what plan_of_flags would make
 * of them must give every parameter the same SBP */
static int gpt_flags(const mf_plan *plan, mf_module *model, int n, train_opts *o, char *err, size_t len)
{
    int tpd = mf_plan_mesh_find(plan, "tp"), dpd = mf_plan_mesh_find(plan, "dp");
    int k = n / mf_plan_pipeline_stages(plan);
    if (mf_plan_mesh_ndim(plan) != (tpd >= 0 ? 2 : 1) || dpd != 0 || (tpd >= 0 && tpd != 1)) {
        snprintf(err, len, "--plan %s: a GPT's mesh is [\"dp\"] or [\"dp\", \"tp\"]", o->plan);
        return 2;
    }
    if (tpd >= 0) o->tensor_parallel = mf_plan_mesh_size(plan, tpd, k);
    if (tpd >= 0 && o->tensor_parallel < 1) {
        snprintf(err, len, "--plan %s: the mesh does not fit the %d ranks %s", o->plan, k,
                 k == n ? "of the job" : "of each pipeline stage");
        return 2;
    }
    if (mf_plan_zero_stage(plan) && mf_plan_zero_dim(plan) != dpd) {
        snprintf(err, len, "--plan %s: a GPT's ZeRO is over dp", o->plan);
        return 2;
    }
    o->zero = mf_plan_zero_stage(plan);
    int nr = mf_plan_num_recompute(plan);
    const char *r = nr ? mf_plan_recompute(plan, 0) : NULL;
    if (nr > 1 || (r && strcmp(r, "transformer.h.*") && strcmp(r, "transformer.h.*.attn"))) {
        snprintf(err, len, "--plan %s: a GPT recomputes its blocks (\"transformer.h.*\") or their attention "
                 "(\"transformer.h.*.attn\")", o->plan);
        return 2;
    }
    o->recompute = !r ? NULL : !strcmp(r, "transformer.h.*") ? "block" : "attn";
    /* sequence parallelism: the blocks' input split over the sequence on tp */
    bool sp = false;
    for (int attempt = 0; attempt < 2; attempt++) {
        train_opts t = *o;
        t.sequence_parallel = attempt == 1;
        t.parallel = NULL;
        t.plan = NULL;
        mf_plan *want = plan_of_flags(&t, model, n, err, len);
        FILE *a = tmpfile(), *b = tmpfile();
        bool same = false;
        if (want && a && b && mf_plan_write(want, a) == MF_OK && mf_plan_write(plan, b) == MF_OK) {
            long la = ftell(a), lb = ftell(b);
            char *x = malloc((size_t)la + 1), *y = malloc((size_t)lb + 1);
            rewind(a);
            rewind(b);
            same = x && y && la == lb && fread(x, 1, (size_t)la, a) == (size_t)la && fread(y, 1, (size_t)lb, b) == (size_t)lb &&
                   !memcmp(x, y, (size_t)la);
            free(x);
            free(y);
        }
        if (a) fclose(a);
        if (b) fclose(b);
        mf_plan_destroy(want);
        if (same) {
            sp = attempt == 1;
            break;
        }
        if (attempt == 1) {
            snprintf(err, len, "--plan %s: for a GPT, mpiflow-train runs the layouts its flags can say (Megatron-LM's "
                     "rules over \"tp\", ZeRO over \"dp\", the blocks' input split over the sequence); --print-plan "
                     "with --tensor-parallel, --sequence-parallel, --zero and --recompute shows them", o->plan);
            return 2;
        }
    }
    o->sequence_parallel = sp;
    return 0;
}

int plan_to_flags(const mf_plan *plan, mf_module *model, int n, train_opts *o, char *err, size_t len)
{
    bool gpt = mf_gpt_config_of(model) != NULL;
    int P = mf_plan_pipeline_stages(plan);
    static char cuts[512];
    const char *c = mf_plan_pipeline_cuts(plan);
    if (c) {   /* module names to child indices */
        mf_module *layers = gpt ? mf_gpt_layers(model) : model;
        size_t k = 0;
        char buf[512];
        snprintf(buf, sizeof buf, "%s", c);
        for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            char *end;
            long v = strtol(t, &end, 10);
            int idx = *end ? -1 : (int)v;
            for (int i = 0; *end && layers && i < mf_module_num_children(layers); i++)
                if (mf_module_child(layers, t) == mf_module_child_at(layers, i)) idx = i;
            if (idx < 0) {
                snprintf(err, len, "--plan %s: pipeline cut '%s' names no layer of the model", o->plan, t);
                return 2;
            }
            k += (size_t)snprintf(cuts + k, k < sizeof cuts ? sizeof cuts - k : 0, "%s%d", k ? "," : "", idx);
        }
        o->pipeline_cuts = cuts;
    }
    if (P > 1 && !c) o->pipeline_stages = P;
    o->micro_batches = mf_plan_micro_batches(plan);
    if (P > 1 || o->micro_batches) o->pipeline_schedule = mf_plan_schedule(plan);
    if (gpt) return gpt_flags(plan, model, n, o, err, len);
    o->zero = mf_plan_zero_stage(plan);
    if (mf_plan_mesh_ndim(plan) > 2) {
        snprintf(err, len, "--plan %s: mpiflow-train runs 1- and 2-D meshes", o->plan);
        return 2;
    }
    o->parallel = "plan";
    return 0;
}

mf_plan *plan_for_run(train_opts *o, mf_module *model, int n, char *err, size_t len)
{
    const bool given = o->plan || o->plan_text;
    mf_plan *plan = o->plan_text ? mf_plan_parse(o->plan_text, strlen(o->plan_text), "the searched plan")
                    : o->plan ? mf_plan_load(o->plan) : plan_of_flags(o, model, n, err, len);
    if (!plan && given) snprintf(err, len, "--plan: %s", mf_last_error());
    if (!plan || (given && plan_to_flags(plan, model, n, o, err, len))) {
        mf_plan_destroy(plan);
        return NULL;
    }
    /* recompute for a model other than the GPT (whose blocks recompute by mf_gpt_set_recompute) */
    if (!mf_gpt_config_of(model) && mf_plan_apply_recompute(plan, model) != MF_OK) {
        snprintf(err, len, "%s: %s", o->plan ? o->plan : o->plan_text ? "the searched plan" : "--recompute", mf_last_error());
        mf_plan_destroy(plan);
        return NULL;
    }
    return plan;
}

mf_status plan_print_all(const mf_plan *plan, const mf_module *model, const mf_placement *p)
{
    mf_status st = MF_OK;
    mf_placement *own = p ? NULL : mf_plan_placement(plan, 0, mf_world_size(), MF_DEV_CPU);
    if (!p) p = own;
    if (mf_rank() == 0) {
        st = mf_plan_write(plan, stdout);
        if (st == MF_OK && p) st = mf_plan_print(plan, model, p, stderr);
        fflush(stdout);
    }
    mf_placement_destroy(own);
    return mf_agree(st);
}
