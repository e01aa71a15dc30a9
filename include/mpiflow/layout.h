/*
 * mpiflow/layout.h - the SBP of every op along a tensor-parallel mesh
 * dimension, searched (doc/planning.md, "The layout search").
 *
 * A layout graph is a model's forward, op by op: each op a kind whose
 * SBP signatures are known (a linear layer replicated, column parallel
 * or row parallel; a norm replicated or split over tokens; ...), the
 * values between ops with their bytes, and the time each op takes whole
 * and on 1/n of its work. The search picks one signature per op, the
 * same for ops that repeat (a transformer's blocks: one decision for
 * all of them), so that compute plus the boxing between ops, forward
 * and backward, plus the data-parallel gradient sync, is least, within
 * a memory budget. OneFlow's auto-parallel does this over its SBP
 * signatures; Megatron-LM's layout (column-parallel QKV and MLP-in,
 * row-parallel projections, a vocabulary-parallel head) is what the
 * search finds for a GPT, and sequence parallelism is the residual
 * stream split over tokens.
 *
 *   mf_layout *l = mf_layout_from_graph(g, cal, 2);   // g: a 1-rank forward on meta
 *   mf_layout_env env = {.tp = 2, .tp_nodes = 1, .dp = 4, .dp_nodes = 1, .cal = cal};
 *   mf_layout_search(l, &env);
 *   mf_layout_print(l, stdout);
 */
#ifndef MPIFLOW_LAYOUT_H
#define MPIFLOW_LAYOUT_H

#include <stdio.h>
#include "mpiflow/graph.h"
#include "mpiflow/predict.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mf_layout_kind {
    MF_LAYOUT_LINEAR,      /* y = x W^T (+ b), W [out, in] */
    MF_LAYOUT_EMBEDDING,   /* rows of a table [vocab, width] */
    MF_LAYOUT_HEAD,        /* a linear to the vocabulary and the cross-entropy (one loss out) */
    MF_LAYOUT_NORM,        /* over the last dimension */
    MF_LAYOUT_POINTWISE,   /* one input, element by element (or a softmax over an attention's keys) */
    MF_LAYOUT_ADD,         /* two inputs summed */
    MF_LAYOUT_ATTENTION,   /* heads apart: [.., 3, width] -> [.., width] */
    MF_LAYOUT_MATMUL,      /* two inputs multiplied, batched over heads (an attention's scores) */
    MF_LAYOUT_OTHER,       /* anything else: replicated only */
    MF_LAYOUT_KINDS
} mf_layout_kind;

/* A value's SBP along the searched dimension. */
typedef enum mf_layout_sbp {
    MF_LS_B,          /* whole on every rank */
    MF_LS_P,          /* partial sums */
    MF_LS_TOKENS,     /* split over tokens (rows): sequence parallel */
    MF_LS_FEATURES,   /* split over the features (a linear's outputs; inside an attention, its heads) */
    MF_LS_NONE        /* no parameter */
} mf_layout_sbp;

typedef struct mf_layout mf_layout;

/* What the search weighs. */
typedef struct mf_layout_env {
    int tp, tp_nodes;             /* the searched dimension's ranks and the nodes they span */
    int dp, dp_nodes;             /* the data-parallel ranks a parameter's gradient is synchronised over */
    const mf_calibration *cal;    /* collective times */
    double memory;                /* bytes per rank the layout's parameters, their gradients and optimizer
                                     state and the kept activations may take (0: no limit) */
} mf_layout_env;

MF_API mf_layout *mf_layout_create(void);
MF_API void mf_layout_destroy(mf_layout *l);
/* Adds an op; its index, or -1 with the error. key: ops with the same key
 * take the same signature (repeats of one block); in: the producing ops
 * of its n_in inputs (-1: the data, whole on every rank) and in_bytes
 * their sizes; param: the parameter's name (NULL: none) of param_bytes;
 * time_whole and time_split: seconds forward and backward on the whole
 * op and on 1/tp of it; tokens: its rows (for the vocabulary-parallel
 * cross-entropy's statistics). */
MF_API int mf_layout_add_op(mf_layout *l, mf_layout_kind kind, const char *key, const char *name, int n_in,
                            const int *in, const double *in_bytes, double out_bytes, const char *param,
                            double param_bytes, double time_whole, double time_split, double tokens);
/* The layout graph of a forward recorded on one rank (mf_graph_begin
 * around a model's forward and loss, usually on the meta device), with
 * times from the calibration for tp ranks. NULL with the error. */
MF_API mf_layout *mf_layout_from_graph(const mf_graph *g, const mf_calibration *cal, int tp);

/* Searches: the least cost and the choice per op. MF_ERR_ARG for a bad
 * environment, MF_ERR_STATE when no layout fits the memory. */
MF_API mf_status mf_layout_search(mf_layout *l, const mf_layout_env *env);
/* The same by trying every combination of the tied decisions (for
 * checking the search on small graphs). */
MF_API mf_status mf_layout_search_exhaustive(mf_layout *l, const mf_layout_env *env);

MF_API int mf_layout_num_ops(const mf_layout *l);
/* After a search: the cost (seconds a step), its parts, and the memory. */
MF_API double mf_layout_cost(const mf_layout *l, double *compute, double *comm, double *memory);
/* Op i's choice: its output's SBP, its parameter's (MF_LS_NONE: none;
 * a linear's MF_LS_FEATURES is split over its outputs, column parallel,
 * MF_LS_TOKENS over its inputs, row parallel; a table's or a head's
 * MF_LS_FEATURES over the vocabulary), and its input's. */
MF_API mf_layout_sbp mf_layout_out(const mf_layout *l, int i);
MF_API mf_layout_sbp mf_layout_param(const mf_layout *l, int i);
MF_API mf_layout_sbp mf_layout_in(const mf_layout *l, int i, int input);
/* Op i's name: its module and op ("transformer.h.0.attn.c_attn mf_linear"). */
MF_API const char *mf_layout_op_name(const mf_layout *l, int i);
/* The first op whose name ends with suffix (-1: none). */
MF_API int mf_layout_find(const mf_layout *l, const char *suffix);
/* "column parallel", "row parallel", "replicated", "vocabulary parallel", ... */
MF_API const char *mf_layout_role(const mf_layout *l, int i);
/* One line per decision: the op, its signature, and the boxing before it. */
MF_API mf_status mf_layout_print(const mf_layout *l, FILE *f);
MF_API const char *mf_layout_sbp_name(mf_layout_sbp s);

#ifdef __cplusplus
}
#endif
#endif
