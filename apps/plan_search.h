/*
 * apps/plan_search.h - plans predicted and ranked (apps/plan_search.c,
 * doc/planning.md): what mpiflow-plan prints and what mpiflow-train
 * --plan auto runs.
 */
#ifndef MPIFLOW_APPS_PLAN_SEARCH_H
#define MPIFLOW_APPS_PLAN_SEARCH_H

#include <stdbool.h>
#include "apps/train_opts.h"
#include "mpiflow.h"

typedef struct search_opts {
    train_opts base;            /* the model and training flags */
    int ranks, per_node;        /* 0: this launch's world, one node */
    int64_t memory;             /* bytes per rank; 0: no limit */
    const char *calibration, *tuning, *write;
    int top;
    bool all, tsv, explain;
} search_opts;

/* One plan: the flags that make it, and what it is predicted to cost. */
typedef struct candidate {
    char flags[192];            /* as mpiflow-train takes them ("" for plain data parallel) */
    int dp, tp, pp, zero, micro_batches;
    bool sp, fused;             /* fused: the model's tensor parallel is its flag's (the GPT, the ViT) */
    const char *recompute;      /* NULL: none */
    bool ok;                    /* it can run (why not, otherwise) */
    char why[256];
    mf_step_time time;          /* the slowest simulated rank's */
    int64_t peak;               /* bytes per rank: the most any simulated rank needs */
    int64_t params, grads, optim;   /* that rank's parameters, gradients (all of them) and optimizer state */
    int64_t grads_peak, other;      /* the peak's parts: the gradients alive then, activations and temporaries, */
    int64_t gather, comm, logits, slack;   /* and ZeRO gathers, communication buffers, the head's logits and
                                            * the allocator's size-class slack at the peak */
    int64_t bucket_bytes, bucket_slack;   /* the gradient buckets' buffers (as rounded), and their slack */
    int peak_rank;              /* the simulated rank of the peak */
    double comm_bytes;          /* its messages per step */
    bool explain;               /* plan_predict prints its first rank's step, entry by entry */
    char layout[240];           /* tensor parallel: what the layout search chose, in words */
    char plan_json[1024];       /* a plan no flag spells (the layout search's), or "" */
} candidate;

/* Predicts c on ranks in nodes of per_node with the calibration: c->ok,
 * and its time and memory, or why it cannot run. */
void plan_predict(const train_opts *base, int ranks, int per_node, const mf_calibration *cal, candidate *c);
/* Every plan's candidate for the base options on ranks (NULL with err
 * when there is none); *n their count. */
candidate *plan_candidates(const train_opts *base, int ranks, int per_node, int *n, char *err, size_t len);
/* Sorts by predicted step time, those that fit memory (0: any) first. */
void plan_rank(candidate *c, int n, int64_t memory);
/* The options of candidate c set on o. */
void plan_apply_candidate(train_opts *o, const candidate *c);
/* --plan auto: the fastest plan that fits o->memory on this launch's
 * ranks, set on o (and *best); every rank chooses the same. 0, or 2
 * with the reason printed (no plan fits: the memory that would do).
 * *lead (free it) gets the up to o->plan_trials plans that fit and are
 * predicted within PLAN_TRIAL_SPAN of the fastest, fastest first, for
 * plan_trial; *nlead their count. */
#define PLAN_TRIAL_SPAN 1.5
int plan_auto(train_opts *o, candidate *best, candidate **lead, int *nlead);
/* Writes candidate c's plan (for ranks) as JSON to path; 0 or 2. */
int plan_write_best(const train_opts *base, const candidate *c, int ranks, const char *path);
/* mpiflow-plan's work: candidates, predictions, the table, --write. The
 * exit code. */
int plan_search_main(const search_opts *so);

#endif
