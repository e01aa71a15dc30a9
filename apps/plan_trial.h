/*
 * apps/plan_trial.h - --plan auto's trial: the leading plans trained a
 * few steps each for real, the fastest measured kept (doc/planning.md,
 * "Trying the leading plans").
 */
#ifndef MPIFLOW_APPS_PLAN_TRIAL_H
#define MPIFLOW_APPS_PLAN_TRIAL_H

#include "apps/train_run.h"

/* Trains each of the n candidates on r's data (loaded; nothing built
 * yet) a few steps, in two rounds, and copies the one with the lowest
 * median step to *chosen. r is left as it was. MF_OK, or the error of a
 * candidate that failed to build or step. */
mf_status plan_trial(run *r, const candidate *lead, int n, candidate *chosen);

#endif
