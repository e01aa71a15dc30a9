/*
 * lib/nn/nn_internal.h - the module struct shared by lib/nn/ files.
 */
#ifndef MPIFLOW_LIB_NN_INTERNAL_H
#define MPIFLOW_LIB_NN_INTERNAL_H

#include "lib/internal.h"

typedef struct mfi_named {
    char *name;
    mf_tensor *t;
} mfi_named;

typedef struct mfi_child {
    char *name;
    mf_module *m;
} mfi_child;

struct mf_module {
    const mf_module_ops *ops;
    void *priv;
    bool training;
    bool recompute;   /* mf_module_set_recompute: forward under mf_recompute */
    struct mfi_use_state *use;   /* parameters gathered for use (param_use.c), or NULL */
    struct mfi_layout *layout[2];   /* input and output activation layouts (layout.c), or NULL */
    int nparams, nbuffers, nchildren;
    mfi_named *params, *buffers;
    mfi_child *children;
};

/* Joins prefix and name with a dot ("" prefix gives name). */
char *mfi_join_name(const char *prefix, const char *name, char *buf, size_t size);
/* Fills t with U(-bound, bound) keyed by the dotted name. */
mf_status mfi_init_uniform(mf_tensor *t, double bound, uint64_t seed, const char *prefix, const char *name);
/* Initial values at creation, keyed by the global seed and a creation
 * number (same on every rank of an SPMD program); the model's
 * mf_module_reset_parameters later re-keys them by dotted name. */
mf_status mfi_module_init_fresh(mf_module *m);
/* ZeRO-2/3 (param_use.c): parameter `index` of m is gathered to `to`
 * for each use (stage 3: freed after, gathered again for backward);
 * and the state freed with the module. */
mf_status mfi_module_set_use(mf_module *m, int index, int stage, const mf_nd_sbp *to);
void mfi_module_use_free(mf_module *m);
/* An activation layout (layout.c): m's input (output) boxed to s along
 * the mesh dimensions d with given[d]; and the layouts freed. */
mf_status mfi_module_set_layout(mf_module *m, bool output, const mf_nd_sbp *s, const bool *given);
void mfi_module_layout_free(mf_module *m);
/* Whether dotted names a parameter of root (not a buffer). */
bool mfi_module_is_param(mf_module *root, const char *dotted);
/* mf_module_param_to_global, and for ZeRO-2/3 (stage >= 2) a parameter
 * that sbp splits along mesh dimension zd is gathered to B there for
 * each use (mfi_module_set_use). */
mf_status mfi_module_place(mf_module *root, const char *dotted, const mf_placement *p, const char *sbp, int stage,
                           int zd);
/* The module that holds the dotted name's last part (*leaf), or NULL. */
mf_module *mfi_module_owner(const mf_module *m, const char *dotted, const char **leaf);
/* A GPT's tensor parallelism (gpt_parallel.c). */
typedef struct mfi_gpt_par {
    int tp_dim;   /* the mesh dimension; -1: none (or of size 1) */
    int tp;       /* its size */
    bool sp;      /* sequence parallel */
    mf_module *layers;          /* its layers as a Sequential (gpt_pipeline.c), or NULL */
    mf_tensor *head;            /* a pipeline's last-stage copy of wte for the head, or NULL */
} mfi_gpt_par;
/* The GPT's (mutable), or NULL for another module. */
mfi_gpt_par *mfi_gpt_par_of(mf_module *m);
/* The GPT's layers (gpt.c), as its forward and a pipeline of it
 * (gpt_pipeline.c) run them: 0 the embeddings of tokens idx, 1 + i
 * block i, n_layer + 1 the final LayerNorm (x borrowed); tr: training. */
mf_tensor *mfi_gpt_embed(mf_module *gpt, mf_tensor *idx, bool tr);
mf_tensor *mfi_gpt_block(mf_module *gpt, int i, mf_tensor *x, bool tr);
mf_tensor *mfi_gpt_final(mf_module *gpt, mf_tensor *x);
/* The mean cross-entropy of hidden states h [B, T, C] against targets
 * [B, T] through the head weight w [V, C]. */
mf_tensor *mfi_gpt_head_loss(mf_tensor *h, mf_tensor *w, mf_tensor *targets, mf_reduction r);
/* Places the GPT's parameters (gpt_parallel.c): layer k's (numbered as
 * above) on pl[stage_of[k]], each split as o says; the GPT's
 * parallelism is set from o. Collective. */
mf_status mfi_gpt_place(mf_module *gpt, mf_placement *const *pl, const int *stage_of, const mf_gpt_parallel *o);
/* The layer (numbered as above) a GPT parameter's dotted name is in. */
int mfi_gpt_layer_of(const char *name, int n_layer);
/* A module with a private struct of `size` bytes (zeroed), or NULL. */
mf_module *mfi_module_new(const mf_module_ops *ops, size_t priv_size);

#endif
