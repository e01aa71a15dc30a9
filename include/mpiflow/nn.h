/*
 * mpiflow/nn.h - modules with PyTorch names, shapes and initialisation.
 *
 * A module owns its parameters, buffers and children. Parameter names are
 * PyTorch state_dict keys ("hidden.weight", "layers.0.bias") and they
 * iterate in state_dict order: a module's own parameters, then its
 * buffers, then each child in the order it was added.
 *
 * Initial values follow PyTorch's defaults (kaiming-uniform for Linear
 * and Conv2d) and are drawn from Philox keyed by (seed, parameter name,
 * element index): mf_module_reset_parameters(root, seed) gives the same
 * values on any number of ranks.
 */
#ifndef MPIFLOW_NN_H
#define MPIFLOW_NN_H

#include "mpiflow/tensor.h"
#include "mpiflow/ops.h"
#include "mpiflow/global.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mf_module mf_module;

/* What a module type supplies. forward borrows x and returns a new
 * reference. reset draws initial values for the module's own parameters;
 * prefix is its dotted name ("" at the root). destroy frees priv. */
typedef struct mf_module_ops {
    const char *type;
    mf_tensor *(*forward)(mf_module *m, mf_tensor *x);
    mf_status (*reset)(mf_module *m, const char *prefix, uint64_t seed);
    void (*destroy)(mf_module *m);
    /* One-line description for mf_module_print, e.g. "784 -> 512". */
    void (*describe)(const mf_module *m, char *buf, size_t size);
} mf_module_ops;

/* A custom module. */
MF_API mf_module *mf_module_create(const mf_module_ops *ops, void *priv);
MF_API void *mf_module_priv(const mf_module *m);
MF_API const char *mf_module_type(const mf_module *m);
/* Registers t under name (takes a new reference). */
MF_API mf_status mf_module_register_parameter(mf_module *m, const char *name, mf_tensor *t);
MF_API mf_status mf_module_register_buffer(mf_module *m, const char *name, mf_tensor *t);
/* Adds a child and takes ownership of it. */
MF_API mf_status mf_module_add_child(mf_module *m, const char *name, mf_module *child);
/* A parameter, buffer or child of this module by local name (borrowed). */
MF_API mf_tensor *mf_module_param(const mf_module *m, const char *name);
MF_API mf_tensor *mf_module_buffer(const mf_module *m, const char *name);
MF_API mf_module *mf_module_child(const mf_module *m, const char *name);
MF_API int mf_module_num_children(const mf_module *m);
MF_API mf_module *mf_module_child_at(const mf_module *m, int i);

MF_API mf_tensor *mf_module_forward(mf_module *m, mf_tensor *x);
/* Activation recompute for any module (doc/plans.md): in training, its
 * forward keeps only its input, and backward runs the forward again
 * from it with the first run's random state (mf_recompute). The same
 * numbers, less memory, one more forward. BatchNorm's running
 * statistics are updated once, by the first run. A module whose input
 * needs no gradient (a first layer's) runs as usual: its backward keeps
 * nothing more than that input and its weights. */
MF_API mf_status mf_module_set_recompute(mf_module *m, bool on);
MF_API bool mf_module_recomputes(const mf_module *m);
/* Parameters ready for use (doc/plans.md, "ZeRO"). Under a plan's
 * ZeRO-2 or -3, a parameter lives split over the data-parallel ranks;
 * between mf_module_use_begin(m) and mf_module_use_end(m), m's own
 * parameters (not its children's) are whole: gathered, with each use's
 * gradient reduce-scattered back into the split. mf_module_forward does
 * this around every module's forward; a model whose forward reads its
 * children's parameters itself brackets each child's use. Nothing to do,
 * and MF_OK, for a module with no such parameter. Calls nest. */
MF_API mf_status mf_module_use_begin(mf_module *m);
MF_API void mf_module_use_end(mf_module *m);
/* Activation layouts (doc/plans.md, "Activations"): t (consumed) boxed
 * to the SBP a plan gives m's input (output) along the mesh dimensions
 * it names; t itself when there is none or it already has it.
 * mf_module_forward applies both; a model whose forward runs its
 * children itself calls them at the children's boundaries. NULL stays
 * NULL (after an earlier error). */
MF_API mf_tensor *mf_module_input_layout(mf_module *m, mf_tensor *t);
MF_API mf_tensor *mf_module_output_layout(mf_module *m, mf_tensor *t);
/* Seconds ZeRO-3's gathers ran and seconds forwards waited for them
 * (the rest ran behind computation), summed over all modules since the
 * last reset. */
MF_API void mf_module_use_stats(double *gather_s, double *wait_s, bool reset);
/* The name child i was added under, or NULL. */
MF_API const char *mf_module_child_name(const mf_module *m, int i);
MF_API void mf_module_destroy(mf_module *m);
/* Train or eval mode, for the module and all its children. */
MF_API void mf_module_train(mf_module *m, bool training);
MF_API bool mf_module_is_training(const mf_module *m);
MF_API mf_status mf_module_reset_parameters(mf_module *m, uint64_t seed);
/* A parameter or buffer by dotted name (borrowed), or NULL. */
MF_API mf_tensor *mf_module_get(const mf_module *m, const char *dotted);
MF_API int64_t mf_module_num_parameters(const mf_module *m);   /* elements */
/* A tree with types, shapes and parameter counts. */
MF_API void mf_module_print(const mf_module *m, FILE *f);

/* A list of named tensors: each entry holds one reference. */
typedef enum mf_entry_kind { MF_ENTRY_PARAM, MF_ENTRY_BUFFER, MF_ENTRY_STATE } mf_entry_kind;
typedef struct mf_named_tensor {
    char *name;
    mf_tensor *tensor;
    mf_entry_kind kind;
} mf_named_tensor;
typedef struct mf_tensor_list {
    int n;
    mf_named_tensor *items;
} mf_tensor_list;
MF_API mf_tensor_list *mf_module_parameters(const mf_module *m);   /* trainable, state_dict order */
MF_API mf_tensor_list *mf_module_state_dict(const mf_module *m);   /* parameters and buffers */
MF_API void mf_tensor_list_destroy(mf_tensor_list *l);

/* ---- global parameters (doc/design.md section 4): like OneFlow's model.to_global.
 * Initialise first (mf_module_reset_parameters works on local values).
 * mf_module_param_to_global gives one parameter or buffer its own SBP
 * (e.g. "hidden.weight" "S(0)" for model parallel); mf_module_to_global
 * gives every one still local the SBP sbp (e.g. "B" for data parallel).
 * A split must leave every rank a non-empty piece. Collective. */
MF_API mf_status mf_module_param_to_global(mf_module *m, const char *dotted, const mf_placement *p, const char *sbp);
MF_API mf_status mf_module_to_global(mf_module *m, const mf_placement *p, const char *sbp);

/* ---- layers (PyTorch semantics and default initialisation) */
MF_API mf_module *mf_linear_create(int64_t in_features, int64_t out_features, bool bias);
MF_API mf_module *mf_conv2d_create(int64_t in_ch, int64_t out_ch, int kernel, int stride, int padding);
MF_API mf_module *mf_conv2d_create_ex(int64_t in_ch, int64_t out_ch, int kh, int kw,
                                      const mf_conv2d_params *p, bool bias);
MF_API mf_module *mf_max_pool2d_create(int kernel, int stride);
MF_API mf_module *mf_avg_pool2d_create(int kernel, int stride);
MF_API mf_module *mf_pool2d_create_ex(bool is_max, const mf_pool2d_params *p);
MF_API mf_module *mf_adaptive_avg_pool2d_create(int out_h, int out_w);
MF_API mf_module *mf_relu_create(void);
MF_API mf_module *mf_gelu_create(void);
MF_API mf_module *mf_sigmoid_create(void);
MF_API mf_module *mf_tanh_create(void);
MF_API mf_module *mf_dropout_create(double p);
MF_API mf_module *mf_flatten_create(int start_dim, int end_dim);
MF_API mf_module *mf_batch_norm2d_create(int64_t num_features);   /* eps 1e-5, momentum 0.1 */
MF_API mf_module *mf_layer_norm_create(int nnorm, const int64_t *normalized_shape);
MF_API mf_module *mf_embedding_create(int64_t num_embeddings, int64_t dim);
/* Sequential: children run in order; a NULL name is the index ("0"). */
MF_API mf_module *mf_sequential_create(void);
MF_API mf_status mf_sequential_add(mf_module *seq, const char *name, mf_module *child);

#ifdef __cplusplus
}
#endif
#endif
