/*
 * apps/plan_flags.h - mpiflow-train's parallel flags as a plan
 * (doc/plans.md), and a --plan file's settings back onto the options.
 */
#ifndef MPIFLOW_APPS_PLAN_FLAGS_H
#define MPIFLOW_APPS_PLAN_FLAGS_H

#include "apps/train_opts.h"
#include "mpiflow.h"

/* The plan the flags describe for model on n ranks (--parallel, --mesh,
 * --tensor-parallel, --sequence-parallel, --zero, --recompute and the
 * pipeline's). NULL with err filled on flags that do not fit. */
mf_plan *plan_of_flags(const train_opts *o, mf_module *model, int n, char *err, size_t len);
/* A --plan file read: the settings the training loop takes from options
 * (ZeRO, the pipeline; for a GPT, tensor and sequence parallelism and
 * recompute) set in o. 0, or 2 with err filled (the plan is not one
 * mpiflow-train can run). */
int plan_to_flags(const mf_plan *plan, mf_module *model, int n, train_opts *o, char *err, size_t len);

/* The run's plan: --plan's (with plan_to_flags applied to o), or the
 * flags' (plan_of_flags). NULL with err filled. */
mf_plan *plan_for_run(train_opts *o, mf_module *model, int n, char *err, size_t len);
/* --print-plan: rank 0 writes the plan as JSON on stdout and its printed
 * form on p (NULL: the world) on stderr. Collective. */
mf_status plan_print_all(const mf_plan *plan, const mf_module *model, const mf_placement *p);

#endif
