/*
 * lib/nn/gpt_pipeline.c - a GPT cut into pipeline stages
 * (doc/parallelism.md, "Transformers").
 *
 * The GPT's forward runs n_layer + 2 layers (gpt.c): 0 the token and
 * position embeddings, 1 .. n_layer the blocks, n_layer + 1 the final
 * LayerNorm. mf_gpt_layers gives them as a Sequential of modules that
 * run those same functions, each holding references to its parameters,
 * so the pipeline executor can cut, check and run them like any
 * Sequential; the GPT stays the module that the optimizer, checkpoints
 * and generation see. The head, with the loss, runs on the last stage
 * (mf_gpt_pipeline_loss). When the embeddings and the head are on
 * different stages, the last stage holds a copy of the token embedding
 * for the head, tied to the first stage's (mf_pipeline_tie): refreshed
 * every step, its gradient added to the embedding's before the
 * data-parallel sum. Tensor and sequence parallelism work inside each
 * stage, as on one placement.
 */
#include <stdio.h>
#include "lib/global/global_internal.h"
#include "lib/nn/nn_internal.h"

typedef struct layer_priv {
    mf_module *gpt;   /* borrowed: the GPT owns its layers */
    int k;            /* 0: embeddings, 1 + i: block i, n_layer + 1: the final LayerNorm */
} layer_priv;

static mf_tensor *layer_forward(mf_module *m, mf_tensor *x)
{
    const layer_priv *lp = m->priv;
    const int L = mf_gpt_config_of(lp->gpt)->n_layer;
    const bool tr = mf_module_is_training(m) && mf_module_is_training(lp->gpt);
    if (lp->k == 0) return mfi_gpt_embed(lp->gpt, x, tr);
    return lp->k <= L ? mfi_gpt_block(lp->gpt, lp->k - 1, x, tr) : mfi_gpt_final(lp->gpt, x);
}

static void layer_describe(const mf_module *m, char *buf, size_t size)
{
    const layer_priv *lp = m->priv;
    const int L = mf_gpt_config_of(lp->gpt)->n_layer;
    if (lp->k == 0) snprintf(buf, size, "the token and position embeddings");
    else if (lp->k <= L) snprintf(buf, size, "block %d", lp->k - 1);
    else snprintf(buf, size, "the final LayerNorm and the head");
}

static const mf_module_ops layer_ops = {"GPTLayer", layer_forward, NULL, NULL, layer_describe};

/* Registers the GPT's current parameters of layer k on m (after
 * dropping those registered before: placing a parameter replaces its
 * tensor), and the head's weight on the last layer. */
static mf_status bind(mf_module *m, mf_module *gpt, int k, mf_tensor *head)
{
    for (int i = 0; i < m->nparams; i++) {
        free(m->params[i].name);
        mf_tensor_destroy(m->params[i].t);
    }
    m->nparams = 0;
    const int L = mf_gpt_config_of(gpt)->n_layer;
    mf_tensor_list *l = mf_module_parameters(gpt);
    if (!l) return mf_last_status();
    mf_status st = MF_OK;
    for (int i = 0; i < l->n && st == MF_OK; i++) {
        if (mfi_gpt_layer_of(l->items[i].name, L) != k) continue;
        char name[256];
        snprintf(name, sizeof name, "%s", l->items[i].name);
        for (char *p = name; *p; p++)
            if (*p == '.') *p = '_';
        st = mf_module_register_parameter(m, name, l->items[i].tensor);
    }
    mf_tensor_list_destroy(l);
    if (st == MF_OK && k == L + 1 && head) st = mf_module_register_parameter(m, "head_weight", head);
    return st;
}

mf_module *mf_gpt_layers(mf_module *gpt)
{
    mfi_gpt_par *par = mfi_gpt_par_of(gpt);
    if (!par) {
        mfi_error(MF_ERR_ARG, "mf_gpt_layers: the module is not a GPT");
        return NULL;
    }
    const int L = mf_gpt_config_of(gpt)->n_layer;
    if (!par->layers) {
        mf_module *seq = mf_sequential_create();
        mf_status st = seq ? MF_OK : mf_last_status();
        for (int k = 0; k < L + 2 && st == MF_OK; k++) {
            mf_module *m = mfi_module_new(&layer_ops, sizeof(layer_priv));
            if (m) *(layer_priv *)m->priv = (layer_priv){gpt, k};
            char name[32];
            if (k == 0) snprintf(name, sizeof name, "embed");
            else if (k <= L) snprintf(name, sizeof name, "h%d", k - 1);
            else snprintf(name, sizeof name, "head");
            st = m ? mf_sequential_add(seq, name, m) : mf_last_status();
        }
        if (st != MF_OK) {
            mf_module_destroy(seq);
            return NULL;
        }
        par->layers = seq;
    }
    for (int k = 0; k < L + 2; k++)
        if (bind(mf_module_child_at(par->layers, k), gpt, k, par->head ? par->head : mf_module_get(gpt, "transformer.wte.weight")) != MF_OK)
            return NULL;
    return par->layers;
}

static mf_tensor *pipeline_loss(const char *fn, mf_tensor *hidden, mf_tensor *targets, void *gpt, mf_reduction r)
{
    mfi_gpt_par *par = mfi_gpt_par_of(gpt);
    if (!par) {
        mfi_error(MF_ERR_ARG, "%s: the user argument is not a GPT", fn);
        return NULL;
    }
    if (par->head) return mfi_gpt_head_loss(hidden, par->head, targets, r);
    /* the tied weight, gathered for this use under ZeRO (as mf_gpt_loss) */
    mf_module *t = mf_module_child(gpt, "transformer"), *we = t ? mf_module_child(t, "wte") : NULL;
    if (!we) {
        mfi_error(MF_ERR_ARG, "%s: the GPT has no transformer.wte", fn);
        return NULL;
    }
    mf_tensor *loss = mf_module_use_begin(we) == MF_OK
                          ? mfi_gpt_head_loss(hidden, mf_module_param(we, "weight"), targets, r) : NULL;
    mf_module_use_end(we);
    return loss;
}

mf_tensor *mf_gpt_pipeline_loss(mf_tensor *hidden, mf_tensor *targets, void *gpt)
{
    return pipeline_loss("mf_gpt_pipeline_loss", hidden, targets, gpt, MF_REDUCTION_MEAN);
}

mf_tensor *mf_gpt_pipeline_loss_sum(mf_tensor *hidden, mf_tensor *targets, void *gpt)
{
    return pipeline_loss("mf_gpt_pipeline_loss_sum", hidden, targets, gpt, MF_REDUCTION_SUM);
}

/* The head's copy of the token embedding on placement p, laid out as
 * the embedding (zeros; the pipeline fills it every step). */
static mf_tensor *head_copy(const mf_tensor *wte, mf_placement *p)
{
    char sbp[96];
    mf_nd_sbp_str(&wte->global->sbp, sbp, sizeof sbp);
    int64_t start[MF_MAX_DIMS], count[MF_MAX_DIMS];
    mf_status st = mf_global_piece_range(p, sbp, wte->ndim, wte->shape, start, count);
    mf_tensor *piece = st == MF_OK && mf_placement_index(p) >= 0 ? mf_zeros(wte->dtype, wte->ndim, count) : NULL;
    if (st != MF_OK || (mf_placement_index(p) >= 0 && !piece)) return NULL;
    mf_tensor *t = mf_global_from_piece(piece, wte->ndim, wte->shape, p, sbp);
    mf_tensor_destroy(piece);
    if (t && mf_tensor_set_requires_grad(t, true) != MF_OK) {
        mf_tensor_destroy(t);
        return NULL;
    }
    if (t) mf_tensor_set_name(t, "transformer.wte.weight (the head's copy)");
    return t;
}

/* the layout stage s takes its input in: the tokens (s = 0) or the
 * residual stream, split over the batch along the data-parallel
 * dimensions, B (or the sequence, S(1), with sequence parallelism)
 * along the tensor-parallel one */
static void input_sbp(const mf_placement *p, const mf_gpt_parallel *par, bool tokens, char *buf, size_t size)
{
    size_t k = 0;
    for (int d = 0; d < mf_placement_mesh_ndim(p); d++)
        k += (size_t)snprintf(buf + k, size - k, "%s%s", d ? "," : "",
                              d != par->tp_dim ? "S(0)" : par->sequence_parallel && !tokens ? "S(1)" : "B");
}

mf_pipeline *mf_gpt_pipeline_create(mf_module *gpt, const mf_gpt_pipeline_opts *o)
{
    const char *fn = "mf_gpt_pipeline_create";
    mfi_gpt_par *par = mfi_gpt_par_of(gpt);
    if (!par || !o) {
        mfi_error(MF_ERR_ARG, "%s: %s", fn, !par ? "the module is not a GPT" : "the options are NULL");
        return NULL;
    }
    const int L = mf_gpt_config_of(gpt)->n_layer, P = o->nstages;
    if (o->par.zero && P > 1) {
        mfi_error(MF_ERR_ARG, "%s: ZeRO-%d splits parameters over the data-parallel ranks; pipeline stages keep "
                  "theirs whole (ZeRO-1, mf_optim_set_zero, shards the optimizer state inside each stage)", fn,
                  o->par.zero);
        return NULL;
    }
    if (P < 1 || P > MF_MAX_STAGES || P > L + 2 || !o->placements) {
        mfi_error(MF_ERR_ARG, "%s: %d stages for a GPT of %d layers (its embeddings, %d blocks and its head: 1 .. %d "
                  "stages)", fn, P, L + 2, L, L + 2 < MF_MAX_STAGES ? L + 2 : MF_MAX_STAGES);
        return NULL;
    }
    for (int s = 0; s < P; s++) {
        const mf_placement *a = o->placements[0], *b = o->placements[s];
        bool same = a && b && mf_placement_mesh_ndim(a) == mf_placement_mesh_ndim(b);
        for (int d = 0; same && d < mf_placement_mesh_ndim(a); d++)
            same = mf_placement_mesh_dim(a, d) == mf_placement_mesh_dim(b, d);
        if (!same) {
            mfi_error(MF_ERR_ARG, "%s: stage %d's placement is %s; every stage needs a mesh of stage 0's shape", fn, s,
                      b ? "of another shape" : "NULL");
            return NULL;
        }
    }
    mf_module *layers = mf_gpt_layers(gpt);
    if (!layers) return NULL;
    int first[MF_MAX_STAGES + 1];
    if (o->first) memcpy(first, o->first, (size_t)(P + 1) * sizeof *first);
    else if (mf_pipeline_balance(layers, P, first) != MF_OK) return NULL;
    for (int s = 0; s < P; s++)
        if (first[s + 1] <= first[s] || first[0] != 0 || first[P] != L + 2) {
            mfi_error(MF_ERR_ARG, "%s: cuts %d .. %d of stage %d: the cuts must rise from layer 0 to %d, one layer at "
                      "least per stage", fn, first[s], first[s + 1], s, L + 2);
            return NULL;
        }
    int *stage_of = malloc((size_t)(L + 2) * sizeof *stage_of);
    if (!stage_of) {
        mfi_error(MF_ERR_NOMEM, "%s: out of memory", fn);
        return NULL;
    }
    for (int s = 0; s < P; s++)
        for (int k = first[s]; k < first[s + 1]; k++) stage_of[k] = s;
    const int last = stage_of[L + 1], emb = stage_of[0];
    if (o->shards && last != emb) {
        free(stage_of);
        mfi_error(MF_ERR_ARG, "%s: deterministic shards keep the GPT on one stage: with the head on stage %d and the "
                  "token embedding on stage %d, the tied weight's two gradients would meet outside the shards' order",
                  fn, last, emb);
        return NULL;
    }
    mf_status st = mfi_gpt_place(gpt, o->placements, stage_of, &o->par);
    free(stage_of);
    if (st != MF_OK) return NULL;
    mf_tensor *wte = mf_module_get(gpt, "transformer.wte.weight");
    mf_tensor_destroy(par->head);
    par->head = NULL;
    if (last != emb && !(par->head = head_copy(wte, o->placements[last]))) return NULL;
    if (!(layers = mf_gpt_layers(gpt))) return NULL;
    char sbp[MF_MAX_STAGES][64];
    const char *in[MF_MAX_STAGES];
    for (int s = 0; s < P; s++) {
        input_sbp(o->placements[s], &o->par, s == 0, sbp[s], sizeof sbp[s]);
        in[s] = sbp[s];
    }
    mf_pipeline_opts po = {P, first, o->placements, in, o->micro_batches, o->schedule, o->shards};
    mf_pipeline *pp = mf_pipeline_create(layers, &po);
    if (pp && par->head && mf_pipeline_tie(pp, wte, par->head) != MF_OK) {
        mf_pipeline_destroy(pp);
        return NULL;
    }
    return pp;
}
