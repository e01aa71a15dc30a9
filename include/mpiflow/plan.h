/*
 * mpiflow/plan.h - a parallel plan: how a model is spread over ranks, as
 * data (doc/plans.md). A plan names
 *   - a mesh of named dimensions ("dp", "tp", ...), outermost first, the
 *     innermost kept inside a node; one size may be -1: what the rank
 *     count leaves;
 *   - parameter rules: ordered (name pattern -> SBP per mesh dimension),
 *     the first that matches a parameter wins, a parameter no rule
 *     matches is B on every dimension, and a rule that matches no
 *     parameter is an error;
 *   - ZeRO stage 0-3 over one mesh dimension (by default "dp");
 *   - the modules to recompute (name patterns), activation layouts at
 *     modules' inputs and outputs, the data's layout, and a pipeline
 *     (stages, cuts, micro-batches, schedule).
 * Its text form is JSON:
 *
 *   {"mesh": {"names": ["dp", "tp"], "shape": [-1, 2]},
 *    "params": [{"match": "*.attn.c_attn.*", "sbp": {"tp": "S(1)"}},
 *               {"match": "*.mlp.c_proj.weight", "sbp": {"tp": "S(1)"}}],
 *    "zero": {"stage": 3, "dim": "dp"},
 *    "recompute": ["transformer.h.*"],
 *    "activations": [{"module": "transformer.h.*", "input": {"tp": "S(1)"}}],
 *    "pipeline": {"stages": 2, "micro_batches": 8, "schedule": "1f1b"}}
 *
 * A pattern is the whole dotted name ("transformer.h.0.attn.c_attn.weight"),
 * with '*' for any run of characters (dots included) and '?' for one.
 * An SBP is an object by dimension name (the others are B) or a string
 * with one entry per mesh dimension ("B,S(1)").
 */
#ifndef MPIFLOW_PLAN_H
#define MPIFLOW_PLAN_H

#include <stdio.h>
#include "mpiflow/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mf_plan mf_plan;

/* An empty plan: a 1-D mesh "dp" of every rank, no rules (data parallel). */
MF_API mf_plan *mf_plan_create(void);
MF_API void mf_plan_destroy(mf_plan *plan);
/* Reads a plan's JSON text; what names it in messages (a file name).
 * NULL with MF_ERR_FORMAT (malformed JSON: line and column) or
 * MF_ERR_ARG (a key or value that is not a plan's) naming the fault. */
MF_API mf_plan *mf_plan_parse(const char *text, size_t len, const char *what);
/* mf_plan_parse of a file's contents. */
MF_API mf_plan *mf_plan_load(const char *path);
/* Writes the plan as the JSON that mf_plan_parse reads. */
MF_API mf_status mf_plan_write(const mf_plan *plan, FILE *f);

/* ---- building a plan in code (what mf_plan_parse does) */
/* Replaces the mesh: ndim dimensions, outermost first; at most one size
 * may be -1 (the rank count's remainder). */
MF_API mf_status mf_plan_set_mesh(mf_plan *plan, int ndim, const char *const *names, const int *sizes);
/* Appends a parameter rule. sbp: "B,S(1)" (one per mesh dimension) or
 * "tp=S(1)" / "tp=S(1),dp=B" (by name, the rest B). */
MF_API mf_status mf_plan_add_rule(mf_plan *plan, const char *pattern, const char *sbp);
/* ZeRO stage 0-3 over mesh dimension dim (NULL: "dp"). 1 splits the
 * optimizer state, 2 also the gradients and 3 also the parameters
 * between uses. */
MF_API mf_status mf_plan_set_zero(mf_plan *plan, int stage, const char *dim);
/* Appends a module-name pattern to recompute in backward. */
MF_API mf_status mf_plan_add_recompute(mf_plan *plan, const char *pattern);
/* Appends an activation layout: the SBP a matching module's input (or
 * output) is redistributed to ("tp=S(1)": along tp only). */
MF_API mf_status mf_plan_add_activation(mf_plan *plan, const char *module, bool output, const char *sbp);
/* The data's layout (default: S(0) along the ZeRO dimension, B elsewhere). */
MF_API mf_status mf_plan_set_data(mf_plan *plan, const char *sbp);
/* A pipeline of stages (1: none); cuts: NULL (balanced) or "4,8" or
 * module names "transformer.h.6,transformer.h.12"; micro_batches 0:
 * the default; schedule "gpipe" or "1f1b" (NULL: 1f1b). */
MF_API mf_status mf_plan_set_pipeline(mf_plan *plan, int stages, const char *cuts, int micro_batches,
                                      const char *schedule);

/* ---- reading a plan */
MF_API int mf_plan_mesh_ndim(const mf_plan *plan);
MF_API const char *mf_plan_mesh_name(const mf_plan *plan, int d);
/* The size of dimension d on nranks ranks (a -1 resolved; -1 when the
 * rank count does not fit the mesh). */
MF_API int mf_plan_mesh_size(const mf_plan *plan, int d, int nranks);
/* The index of the dimension called name, or -1. */
MF_API int mf_plan_mesh_find(const mf_plan *plan, const char *name);
MF_API int mf_plan_zero_stage(const mf_plan *plan);
/* The ZeRO dimension's index, or -1 when the mesh has none of its name. */
MF_API int mf_plan_zero_dim(const mf_plan *plan);
MF_API int mf_plan_num_rules(const mf_plan *plan);
MF_API int mf_plan_pipeline_stages(const mf_plan *plan);
MF_API int mf_plan_micro_batches(const mf_plan *plan);
MF_API const char *mf_plan_pipeline_cuts(const mf_plan *plan);   /* NULL: balanced */
MF_API const char *mf_plan_schedule(const mf_plan *plan);
MF_API int mf_plan_num_recompute(const mf_plan *plan);
MF_API const char *mf_plan_recompute(const mf_plan *plan, int i);
/* Whether module name (dotted) matches a recompute pattern. */
MF_API bool mf_plan_recomputes(const mf_plan *plan, const char *module);
/* The data's nd-SBP text on the plan's mesh ("S(0),B"). */
MF_API mf_status mf_plan_data_sbp(const mf_plan *plan, char *buf, size_t size);
/* Whether name matches pattern ('*' any run, '?' one character). */
MF_API bool mf_plan_match(const char *pattern, const char *name);

/* ---- applying a plan to a model */
/* The placement of a stage's mesh on world ranks first .. first+n-1
 * (n = the mesh's rank count), on device dev. Checks that n ranks fit
 * the mesh: MF_ERR_ARG naming both otherwise. */
MF_API mf_placement *mf_plan_placement(const mf_plan *plan, int first, int nranks, mf_device_type dev);
/* The nd-SBP text parameter `name` of shape gets on placement p, and the
 * index of the rule that gave it (-1: no rule matched, B). ZeRO 2 and 3
 * then split the ZeRO dimension's B along the parameter's largest axis
 * that the rule leaves whole. A split need not divide the axis (the
 * pieces are balanced, as a GPT's vocabulary over tp); MF_ERR_ARG when it
 * would leave a rank nothing (naming the rule, the parameter and both
 * sizes), or makes a parameter P. */
MF_API mf_status mf_plan_param_sbp(const mf_plan *plan, const mf_placement *p, const char *name, int ndim,
                                   const int64_t *shape, char *sbp, size_t size, int *rule);
/* Makes every parameter and buffer of model global on p by the rules
 * (mf_module_param_to_global) and gives the modules the plan's
 * activation layouts (mf_plan_apply_activations); MF_ERR_ARG naming a
 * rule or layout that matches nothing. Collective. */
MF_API mf_status mf_plan_apply(const mf_plan *plan, mf_module *model, const mf_placement *p);
/* The same for a pipeline: the parameters under children first[s] ..
 * first[s+1]-1 of seq on stages[s] (the root's own on stage 0). */
MF_API mf_status mf_plan_apply_pipeline(const mf_plan *plan, mf_module *seq, int nstages, const int *first,
                                        mf_placement *const *stages);
/* Turns recompute on (mf_module_set_recompute) for every module whose
 * dotted name ("conv2", "transformer.h.3") matches a recompute pattern,
 * outermost first ("block*" also matches block0.attn, which block0's
 * recompute runs again already); MF_ERR_ARG naming a pattern that
 * matches no module. */
MF_API mf_status mf_plan_apply_recompute(const mf_plan *plan, mf_module *model);
/* Gives every module whose dotted name matches an activation pattern
 * that layout for its input or output (mf_module_input_layout), along
 * the mesh dimensions the SBP names (the others keep theirs); MF_ERR_ARG
 * naming a pattern that matches no module. */
MF_API mf_status mf_plan_apply_activations(const mf_plan *plan, mf_module *model);
/* MF_ERR_ARG naming the first rule that matches no parameter of model,
 * or whose parameters an earlier rule takes. */
MF_API mf_status mf_plan_check_rules(const mf_plan *plan, const mf_module *model);
/* The printed form: the mesh, then every parameter with its shape, the
 * SBP it gets on p and the rule that gave it, then each activation
 * layout and recompute pattern with the modules it names. */
MF_API mf_status mf_plan_print(const mf_plan *plan, const mf_module *model, const mf_placement *p, FILE *f);

#ifdef __cplusplus
}
#endif
#endif
