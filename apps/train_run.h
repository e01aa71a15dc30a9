/*
 * apps/train_run.h - one training run of mpiflow-train: its data, model,
 * plan, optimizer and loader (apps/train_run.c), and the step every
 * model and plan share. mpiflow-plan builds the same run on the meta
 * device in a simulated world to predict a plan's memory and time.
 */
#ifndef MPIFLOW_APPS_TRAIN_RUN_H
#define MPIFLOW_APPS_TRAIN_RUN_H

#include <stdio.h>
#include "apps/parallel.h"
#include "apps/plan_search.h"
#include "apps/train_opts.h"
#include "apps/train_task.h"
#include "mpiflow.h"

typedef struct run {
    train_opts o;
    mf_plan *plan;               /* the parallel layout: --plan's, or the flags' */
    mf_dataset *train, *test;    /* gpt: test is the validation split */
    bool gpt;
    const train_task *task;      /* classify or language model: its loss, metric and units */
    mf_gpt_config gc;
    mf_loader *loader;
    mf_module *model;
    mf_tensor_list *params;
    mf_optim *optim;
    mf_lr_schedule *sched;
    FILE *metrics;
    double mean, std;
    int64_t total_steps, steps_per_epoch, total_epochs;
    bool bar;
    par par;
    char err[512];           /* a setup message for every rank */
    int64_t start_step;      /* > 0 when resumed */
    int64_t sample_tokens;   /* tokens per sample (1 for images: progress counts samples) */
    int64_t mem_base;        /* bytes in use before the model was built */
    mf_memory_breakdown mem_base_parts;   /* and what they were for */
    bool autoplan;           /* --plan auto chose the layout: */
    candidate predicted;     /* what it predicted */
} run;

/* The datasets of --dataset (and the GPT's configuration); r->err holds
 * a message for every rank where the input is at fault. */
mf_status run_load_data(run *r);
/* The model for samples of shape [C, H, W] in `classes` classes (the
 * GPT's from r->gc), the plan, the parallel layout and the optimizer;
 * source names the data in messages. With --print-plan it stops after
 * the layout. */
mf_status run_build_model(run *r, const int64_t *shape, int classes, const char *source);
/* run_build_model for r->train's samples, then the loader, the learning
 * rate schedule and the metrics file. */
mf_status run_build(run *r);
/* One training step, for every model and plan, of the batch x, y (rows
 * samples, taken): laid out as the plan says, then the task's loss
 * through the whole model and its backward, or the pipeline's schedule
 * over the micro-batches; clipping and the optimizer. */
mf_status run_step(run *r, mf_tensor *x, mf_tensor *y, int64_t rows, double *loss_out);
/* run_step of the loader's next batch. */
mf_status run_train_step(run *r, double *loss_out);
void run_destroy_all(int n, mf_tensor **t);
void run_cleanup(run *r);

#endif
