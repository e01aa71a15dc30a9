/*
 * lib/nn/gpt_parallel.c - tensor and sequence parallelism for a GPT as
 * SBP (doc/parallelism.md, "Transformers"). Only the parameters'
 * placement and SBP are chosen here; the forward (gpt.c) names the
 * residual stream's layout, and the ops' signatures and the planner
 * derive the rest. Along the tensor-parallel mesh dimension, Megatron-LM's
 * layout:
 *   wte                 S(0)  vocabulary parallel: the lookup is P, and the
 *                             tied head's cross-entropy reduces its max and
 *                             sum of exp over the ranks
 *   attn.c_attn         S(1)  column parallel: whole heads of q, k and v
 *   mlp.c_fc            S(0)  column parallel
 *   attn.c_proj, mlp.c_proj   S(1) weight: row parallel, output P
 *   everything else     B     (LayerNorms, wpe, the row-parallel biases)
 * and B along every other dimension (data parallel). With ZeRO-2 or -3,
 * S(a) there instead, a the parameter's largest axis that tp leaves
 * whole (B for a vector that tp splits); each module's parameters are
 * gathered for its use (mf_module_use_begin). The split is a plan's rules (doc/plans.md,
 * mf_gpt_add_megatron_rules), applied by mf_plan_param_sbp.
 */
#include <stdio.h>
#include <stdlib.h>
#include "lib/nn/nn_internal.h"
#include "lib/plan/plan_internal.h"

/* Megatron-LM's split along mesh dimension tp, as plan rules, and the
 * activations' layout along it: each tensor-parallel region (the
 * attention and the MLP) takes its input B and gives its output in the
 * residual stream's layout (B, or S(1) with sequence parallelism: the
 * row-parallel partial sum reduce-scattered over the sequence); so does
 * the vocabulary-parallel embedding; the final LayerNorm gives the head
 * B. */
mf_status mf_gpt_add_megatron_rules(mf_plan *plan, const char *tp, bool sequence_parallel)
{
    static const struct {
        const char *pattern, *sbp;
    } rules[] = {
        {"*.wte.weight", "S(0)"},        {"*.attn.c_attn.*", "S(1)"},  {"*.attn.c_proj.weight", "S(1)"},
        {"*.mlp.c_fc.*", "S(0)"},        {"*.mlp.c_proj.weight", "S(1)"},
    };
    for (size_t i = 0; i < sizeof rules / sizeof *rules; i++) {
        char sbp[64];
        snprintf(sbp, sizeof sbp, "%s=%s", tp ? tp : "tp", rules[i].sbp);
        MF_TRY(mf_plan_add_rule(plan, rules[i].pattern, sbp));
    }
    char b[64], res[64];
    snprintf(b, sizeof b, "%s=B", tp ? tp : "tp");
    snprintf(res, sizeof res, "%s=%s", tp ? tp : "tp", sequence_parallel ? "S(1)" : "B");
    MF_TRY(mf_plan_add_activation(plan, "transformer.wte", true, res));
    MF_TRY(mf_plan_add_activation(plan, "transformer.h.*.attn", false, b));
    MF_TRY(mf_plan_add_activation(plan, "transformer.h.*.attn", true, res));
    MF_TRY(mf_plan_add_activation(plan, "transformer.h.*.mlp", false, b));
    MF_TRY(mf_plan_add_activation(plan, "transformer.h.*.mlp", true, res));
    return mf_plan_add_activation(plan, "transformer.ln_f", true, b);
}

int mfi_gpt_layer_of(const char *name, int n_layer)
{
    const char *h = strstr(name, "transformer.h.");
    if (h) return 1 + atoi(h + 14);
    return strstr(name, "ln_f.") ? n_layer + 1 : 0;
}

/* the plan of mf_gpt_parallelize's options on placement p: mesh
 * dimension d is "tp", the others "dp" (ZeRO's), "dp1", ... */
static mf_plan *gpt_plan(const mf_placement *p, int d, int tp, bool sp, int zero)
{
    const int nd = mf_placement_mesh_ndim(p);
    char names[MF_MAX_MESH][16];
    const char *np[MF_MAX_MESH];
    int sizes[MF_MAX_MESH], k = 0;
    for (int e = 0; e < nd; e++) {
        if (e == d) snprintf(names[e], sizeof names[e], "tp");
        else if (k++) snprintf(names[e], sizeof names[e], "dp%d", k - 1);
        else snprintf(names[e], sizeof names[e], "dp");
        np[e] = names[e];
        sizes[e] = mf_placement_mesh_dim(p, e);
    }
    mf_plan *plan = mf_plan_create();
    mf_status st = plan ? mf_plan_set_mesh(plan, nd, np, sizes) : mf_last_status();
    if (st == MF_OK && tp > 1) st = mf_gpt_add_megatron_rules(plan, "tp", sp);
    if (st == MF_OK && zero >= 2 && mf_plan_mesh_find(plan, "dp") >= 0) st = mf_plan_set_zero(plan, zero, "dp");
    if (st != MF_OK) {
        mf_plan_destroy(plan);
        return NULL;
    }
    return plan;
}

mf_status mfi_gpt_place(mf_module *gpt, mf_placement *const *pl, const int *stage_of, const mf_gpt_parallel *o)
{
    const mf_gpt_config *c = mf_gpt_config_of(gpt);
    mfi_gpt_par *par = mfi_gpt_par_of(gpt);
    if (!c || !par) MF_FAIL(MF_ERR_ARG, "mf_gpt_parallelize: the module is not a GPT");
    if (!pl || !pl[0] || !o) MF_FAIL(MF_ERR_ARG, "mf_gpt_parallelize: no placement or options");
    const mf_placement *p = pl[0];
    const int nd = mf_placement_mesh_ndim(p), d = o->tp_dim;
    char ps[128];
    mf_placement_str(p, ps, sizeof ps);
    if (d < -1 || d >= nd)
        MF_FAIL(MF_ERR_ARG, "mf_gpt_parallelize: tensor-parallel mesh dimension %d, but placement '%s' has %d", d, ps, nd);
    if (o->sequence_parallel && d < 0)
        MF_FAIL(MF_ERR_ARG, "mf_gpt_parallelize: sequence parallelism splits the sequence over the tensor-parallel "
                "ranks; it needs a tensor-parallel dimension");
    const int tp = d >= 0 ? mf_placement_mesh_dim(p, d) : 1;
    if (c->n_head % tp)
        MF_FAIL(MF_ERR_ARG, "mf_gpt_parallelize: %d heads do not split over %d tensor-parallel ranks (mesh dimension "
                "%d of '%s'); pick a degree that divides the head count", c->n_head, tp, d, ps);
    if (o->zero < 0 || o->zero > 3)
        MF_FAIL(MF_ERR_ARG, "mf_gpt_parallelize: ZeRO stage %d (0 to 3; 1 is the optimizer's, mf_optim_set_zero)", o->zero);
    mf_plan *plan = gpt_plan(p, d, tp, o->sequence_parallel, o->zero);
    mf_tensor_list *l = plan ? mf_module_parameters(gpt) : NULL;
    if (!l) {
        mf_plan_destroy(plan);
        return mf_last_status();
    }
    mf_status st = MF_OK;
    for (int i = 0; i < l->n && st == MF_OK; i++) {
        const char *name = l->items[i].name;
        st = mfi_plan_place(plan, gpt, pl[stage_of ? stage_of[mfi_gpt_layer_of(name, c->n_layer)] : 0], name);
    }
    mf_tensor_list_destroy(l);
    if (st == MF_OK) st = mf_plan_apply_activations(plan, gpt);
    mf_plan_destroy(plan);
    MF_TRY(st);
    par->tp_dim = tp > 1 ? d : -1;
    par->tp = tp;
    par->sp = o->sequence_parallel && tp > 1;
    return MF_OK;
}

mf_status mf_gpt_parallelize(mf_module *gpt, const mf_placement *p, const mf_gpt_parallel *o)
{
    mf_placement *one = (mf_placement *)p;
    return mfi_gpt_place(gpt, &one, NULL, o);
}
