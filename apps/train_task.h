/*
 * apps/train_task.h - what differs between the tasks mpiflow-train runs
 * (apps/train_task.c): a classifier of images and a language model. The
 * training step, the evaluation and the reports are one path for every
 * model and plan; they ask the task for its loss, its metric and its
 * units.
 */
#ifndef MPIFLOW_APPS_TRAIN_TASK_H
#define MPIFLOW_APPS_TRAIN_TASK_H

#include "mpiflow.h"

typedef struct train_task {
    const char *name;          /* "classify", "language model" */
    const char *units;         /* what the rate counts: "samples", "tokens" */
    const char *csv_header;    /* the --metrics file's first line */
    bool accuracy;             /* whether the metric counts right answers */
    /* the mean loss of a batch through the whole model */
    mf_tensor *(*loss)(mf_module *model, mf_tensor *x, mf_tensor *y);
    /* the last pipeline stage's loss of a micro-batch: the mean, and the
     * sum over its rows for deterministic shards (NULL: the pipeline's
     * cross-entropy of the output) */
    mf_pipeline_loss_fn stage_loss, stage_loss_sum;
    /* evaluation: {the summed loss, the right answers} of a batch through
     * the whole model, and of a micro-batch on the last stage */
    mf_status (*eval)(mf_module *model, mf_tensor *x, mf_tensor *y, double *vals);
    mf_pipeline_metric_fn stage_eval;
} train_task;

/* The task of --model NAME: the GPT is a language model, the others classify. */
const train_task *train_task_of(const char *model);

#endif
