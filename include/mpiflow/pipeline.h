/*
 * mpiflow/pipeline.h - pipeline parallelism: a Sequential model cut into
 * stages, each on its own placement (DESIGN.md section 4).
 *
 *   int first[P + 1];
 *   mf_pipeline_balance(model, P, first);      // stage s runs children first[s] .. first[s+1]-1
 *   mf_pipeline_parse_cuts(model, "4,8", &P, first);   // or given explicitly
 *
 * The schedules (GPipe, 1F1B) that run micro-batches through the stages
 * come with the rest of the pipeline work.
 */
#ifndef MPIFLOW_PIPELINE_H
#define MPIFLOW_PIPELINE_H

#include "mpiflow/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most stages a model may be cut into. */
#define MF_MAX_STAGES 64

/* Cuts the children of a Sequential into nstages contiguous, non-empty
 * stages with the largest stage's parameter count as small as possible
 * (ties: the fewest children in the largest stage, then the earliest
 * cut). first gets nstages + 1 entries: stage s runs children
 * first[s] .. first[s+1]-1; first[0] = 0, first[nstages] = the number of
 * children. MF_ERR_ARG when nstages is not in 1 .. children. */
MF_API mf_status mf_pipeline_balance(const mf_module *seq, int nstages, int *first);
/* Explicit cuts: "4,8" starts stage 1 at child 4 and stage 2 at child 8
 * (so 3 stages). *nstages and first as mf_pipeline_balance. MF_ERR_ARG,
 * naming the cut, for cuts that are not increasing or not inside the
 * model. */
MF_API mf_status mf_pipeline_parse_cuts(const mf_module *seq, const char *cuts, int *nstages, int *first);

#ifdef __cplusplus
}
#endif
#endif
