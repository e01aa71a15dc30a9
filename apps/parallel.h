/*
 * apps/parallel.h - mpiflow-train's --parallel modes: placements and SBP
 * choices for the model's parameters and the data (doc/design.md section 4).
 */
#ifndef MPIFLOW_APPS_PARALLEL_H
#define MPIFLOW_APPS_PARALLEL_H

#include "apps/train_opts.h"
#include "mpiflow.h"

typedef struct par {
    const char *mode;          /* "none", "dp", "mp", "hybrid", "2d", "plan" */
    mf_placement *p;           /* NULL for none; with a pipeline, this rank's stage's */
    mf_device_type dev;        /* the placements' device (--device) */
    const char *data_sbp;
    char data_buf[64];         /* data_sbp, from a plan */
    char what[300];            /* "--parallel dp", "--plan FILE": for messages */
    int mesh_r, mesh_c;
    int zero;                  /* a GPT's ZeRO-2 or -3 (parameters split S over the data-parallel ranks) */
    int shard_index, shard_count;   /* which rows of each batch (micro-batch) this rank loads */
    /* a pipeline (--pipeline-stages, --pipeline-cuts or --micro-batches) */
    int nstages, micro_batches;     /* 0: none */
    int shards;                     /* --deterministic: V virtual shards (0: off) */
    int loader_micro;               /* the training loader's micro-batch layout */
    const char *schedule;           /* "gpipe" or "1f1b" */
    int first[MF_MAX_STAGES + 1];
    mf_placement *stage[MF_MAX_STAGES];
    mf_pipeline *pipe;
} par;

/* Picks the mode and mesh, and makes the model's parameters global by
 * the plan's rules (the flags' plan, or --plan's; apps/plan_flags.h).
 * Collective. On bad flags returns MF_ERR_ARG with err filled. */
mf_status par_setup(par *pp, const train_opts *o, const mf_plan *plan, mf_module *model, char *err, size_t len);
/* Replaces the batch by global tensors: x and y hold this rank's shard
 * (the loader made only those rows) of a batch of `rows` samples. */
mf_status par_batch(const par *pp, int64_t rows, mf_tensor **x, mf_tensor **y);
/* With a pipeline: the micro-batches of a batch of `rows` samples whose
 * shards x and y hold (the loader's micro-batch layout), as global
 * tensors: mx[m] on stage 0, my[m] on the last stage. Borrows x, y.
 * shards (deterministic training): x and y hold this rank's consecutive
 * shards of the batch (the plain layout), and micro-batch m is the m-th
 * of them on each rank. */
mf_status par_micro_batches(const par *pp, int64_t rows, int n, bool shards, mf_tensor *x, mf_tensor *y,
                            mf_tensor **mx, mf_tensor **my);
/* "dp on 4 ranks (0-3)" */
void par_describe(const par *pp, char *buf, size_t len);
/* Writes every parameter, gathered, as text (rank 0). Collective. */
mf_status par_dump_params(mf_module *model, const char *path);
void par_destroy(par *pp);

#endif
