/*
 * lib/plan/plan_internal.h - the plan's fields (include/mpiflow/plan.h,
 * doc/plans.md), shared by its builder, its JSON form and its use.
 */
#ifndef MPIFLOW_LIB_PLAN_INTERNAL_H
#define MPIFLOW_LIB_PLAN_INTERNAL_H

#include "lib/internal.h"
#include "mpiflow/plan.h"

enum { PLAN_NAME = 32 };

/* An SBP as the user wrote it: positional ("B,S(1)": one entry per mesh
 * dimension) or by name ("tp=S(1),dp=B": the rest B). */
typedef struct plan_rule {
    char *pattern, *sbp;
} plan_rule;

typedef struct plan_act {
    char *module, *sbp;
    bool output;
} plan_act;

struct mf_plan {
    int ndim;
    char names[MF_MAX_MESH][PLAN_NAME];
    int sizes[MF_MAX_MESH];   /* -1: what the rank count leaves */
    int nrules;
    plan_rule *rules;
    int zero;
    char zero_dim[PLAN_NAME];
    int nrecompute;
    char **recompute;
    int nacts;
    plan_act *acts;
    char *data;               /* NULL: S(0) along the ZeRO dimension */
    int stages, micro_batches;
    char *cuts;               /* NULL: balanced */
    char schedule[8];
};

/* Resolves an SBP spec to the plan's mesh: MF_ERR_ARG naming the fault
 * (a dimension the mesh lacks, the wrong count). */
mf_status mfi_plan_resolve(const mf_plan *plan, const char *spec, mf_nd_sbp *out);
/* The same, and given[d] says whether spec names dimension d (every
 * dimension for the positional form); given may be NULL. */
mf_status mfi_plan_resolve_given(const mf_plan *plan, const char *spec, mf_nd_sbp *out, bool *given);
/* Checks the plan as a whole: every spec resolves, the ZeRO dimension
 * exists when ZeRO is on. what: the plan's name for messages. */
mf_status mfi_plan_check(const mf_plan *plan, const char *what);
/* Places the model's parameter or buffer `name` on pl by the plan's
 * rules; a parameter ZeRO-2/3 splits is gathered for each use
 * (mf_module_use_begin). */
mf_status mfi_plan_place(const mf_plan *plan, mf_module *model, const mf_placement *pl, const char *name);

#endif
