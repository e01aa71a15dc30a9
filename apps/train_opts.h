/*
 * apps/train_opts.h - the command line of mpiflow-train.
 */
#ifndef MPIFLOW_APPS_TRAIN_OPTS_H
#define MPIFLOW_APPS_TRAIN_OPTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define TRAIN_MAX_PIECES 16

typedef struct train_opts {
    const char *model, *dataset, *data_dir, *optimizer, *metrics, *schedule;
    int64_t epochs, steps;            /* one of them is > 0 */
    int64_t batch_size, eval_batch_size, log_every;
    int64_t synthetic_train, synthetic_test;
    int64_t warmup, step_size;        /* warmup -1: 5 % of the steps */
    double lr, momentum, weight_decay, gamma, lr_min, clip_grad;
    int npieces;                      /* piecewise schedule */
    int64_t boundaries[TRAIN_MAX_PIECES];
    double values[TRAIN_MAX_PIECES + 1];
    uint64_t seed;
    int threads;
    int progress;                     /* -1 auto (bar on a terminal), 0 lines, 1 bar */
    bool eval;
    bool profile;                     /* print time per kernel class at the end */
    int prefetch;                     /* -1 auto (when a core is spare), 0 off, 1 on */
    const char *parallel;             /* NULL: none on 1 rank, dp on more */
    int mesh_r, mesh_c;               /* --mesh RxC, 0 if not given */
    const char *dump_params;
    const char *checkpoint, *resume;  /* --checkpoint PATH, --resume PATH */
    int64_t save_every;               /* 0: only at the end (with --checkpoint) */
    int64_t keep_last;                /* checkpoints kept (PATH, PATH.1, ...) */
    bool fletcher32;                  /* HDF5 Fletcher32 on each checkpoint piece */
    double bucket_mb;                 /* gradient bucket size (0: no buckets) */
    int zero;                         /* ZeRO stage: 0 or 1 */
    const char *trace;                /* --trace FILE.json */
    int pipeline_stages;              /* 0: not given */
    const char *pipeline_cuts;        /* --pipeline-cuts 4,8, or NULL */
    int micro_batches;                /* 0: not given */
    const char *pipeline_schedule;    /* --schedule gpipe|1f1b */
    const char *device;               /* "cpu" or "cuda" */
    const char *precision;            /* "fp32" or "bf16" */
    int shards;                       /* --deterministic: virtual shards per step (0: off) */
    /* --model gpt (doc/gpt.md) */
    const char *preset;               /* --preset NAME; the sizes below override it */
    int n_layer, n_head, n_embd, seq_len, vocab_size;   /* 0: the preset's */
    double dropout;                   /* < 0: the preset's */
    int64_t val_every, val_batches;   /* validation loss every K steps (0: at the end only), on N batches */
    int tensor_parallel;              /* --tensor-parallel N (0: not given) */
    bool sequence_parallel;
    const char *recompute;            /* --recompute none|block|attn, NULL: none */
    bool shuffle;                     /* false: --no-shuffle, windows in order */
    const char *plan;                 /* --plan FILE.json or "auto", or NULL: the flags' plan */
    const char *plan_text;            /* a plan as JSON text (a searched layout), before --plan and the flags */
    int64_t memory;                   /* --plan auto: bytes per rank (0: no limit) */
    const char *calibration;          /* --plan auto: a calibration file, or NULL: built-in */
    int plan_trials;                  /* --plan auto: leading plans to try for real (-1: not given, 4) */
    bool print_plan;                  /* --print-plan: print the plan and exit */
} train_opts;

/* 0: run; 1: --help or --version was printed; 2: bad input (err says
 * what). */
int train_opts_parse(int argc, char **argv, train_opts *o, char *err, size_t errlen);
void train_opts_usage(FILE *f);
/* "80GiB", "512MiB", "6G", "100000K", "123": 0, or -1 for text that is
 * not a size (binary units). */
int parse_size(const char *s, int64_t *bytes);

#endif
