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
 * whole (B for a vector that tp splits); the forward gathers each one
 * for its use (gpt.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include "lib/nn/nn_internal.h"

/* the tensor-parallel SBP of a GPT parameter, by its name's ending */
static const char *tp_sbp(const char *name)
{
    static const struct {
        const char *end, *sbp;
    } rules[] = {
        {"wte.weight", "S(0)"},          {"attn.c_attn.weight", "S(1)"}, {"attn.c_attn.bias", "S(1)"},
        {"attn.c_proj.weight", "S(1)"},  {"mlp.c_fc.weight", "S(0)"},    {"mlp.c_fc.bias", "S(0)"},
        {"mlp.c_proj.weight", "S(1)"},
    };
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof rules / sizeof *rules; i++) {
        size_t k = strlen(rules[i].end);
        if (n >= k && !strcmp(name + n - k, rules[i].end) && (n == k || name[n - k - 1] == '.')) return rules[i].sbp;
    }
    return "B";
}

int mfi_gpt_layer_of(const char *name, int n_layer)
{
    const char *h = strstr(name, "transformer.h.");
    if (h) return 1 + atoi(h + 14);
    return strstr(name, "ln_f.") ? n_layer + 1 : 0;
}

/* the nd-SBP of parameter t (tensor-parallel SBP ts) on an nd-D mesh of
 * `ranks` ranks whose dimension d is tensor parallel of degree tp */
static void param_sbp(const mf_tensor *t, const char *ts, int nd, int d, int ranks, int tp, int zero, char *sbp,
                      size_t size)
{
    char dps[16] = "B";
    if (zero >= 2) {   /* the largest axis tp leaves whole, if every rank gets some of it */
        int tax = ts[0] == 'S' ? ts[2] - '0' : -1, best = -1;
        for (int a = 0; a < mf_tensor_ndim(t); a++)
            if (a != tax && (best < 0 || mf_tensor_shape(t)[a] > mf_tensor_shape(t)[best])) best = a;
        if (best >= 0 && mf_tensor_shape(t)[best] >= ranks / tp) snprintf(dps, sizeof dps, "S(%d)", best);
    }
    size_t k = 0;
    for (int e = 0; e < nd; e++) k += (size_t)snprintf(sbp + k, size - k, "%s%s", e ? "," : "", e == d ? ts : dps);
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
    mf_tensor_list *l = mf_module_parameters(gpt);
    if (!l) return mf_last_status();
    mf_status st = MF_OK;
    for (int i = 0; i < l->n && st == MF_OK; i++) {
        const char *name = l->items[i].name;
        char sbp[96];
        param_sbp(l->items[i].tensor, tp > 1 ? tp_sbp(name) : "B", nd, d, mf_placement_size(p), tp, o->zero, sbp,
                  sizeof sbp);
        st = mf_module_param_to_global(gpt, name, pl[stage_of ? stage_of[mfi_gpt_layer_of(name, c->n_layer)] : 0],
                                       sbp);
    }
    mf_tensor_list_destroy(l);
    MF_TRY(st);
    par->zero = o->zero;
    par->tp_axis = d;
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
