/*
 * mpiflow/predict.h - what a training step will cost, predicted from
 * measurements of this machine (doc/planning.md, "Predicting a step").
 *
 * A calibration holds rates measured here: GEMM, convolution and fused
 * attention FLOP/s as a function of the work per kernel call, the
 * memory bandwidth of elementwise kernels as a function of the bytes per
 * call, the fixed cost of a kernel call, and the time of each
 * collective by message size, rank count and node count.
 * `mpiflow-bench calibrate` measures one and writes it (like the
 * collective tuning file); a built-in default stands in when there is
 * none. Applied to a step graph (mpiflow/graph.h), recorded on the meta
 * device in a simulated world, it gives the step's time: compute, the
 * communication compute does not hide, and a pipeline's bubble.
 */
#ifndef MPIFLOW_PREDICT_H
#define MPIFLOW_PREDICT_H

#include <stdio.h>
#include "mpiflow/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mf_calibration mf_calibration;

/* Rates for when nothing was measured: a modest CPU core and one node's
 * shared memory (their source says "built-in default"). */
MF_API mf_calibration *mf_calibration_default(void);
/* Reads a file mf_calibration_write wrote; NULL with MF_ERR_IO (cannot
 * read), or MF_ERR_FORMAT naming the file, the line and what is wrong. */
MF_API mf_calibration *mf_calibration_load(const char *path);
MF_API mf_status mf_calibration_write(const mf_calibration *c, FILE *f);
MF_API void mf_calibration_destroy(mf_calibration *c);
/* Measures every rate on this machine, on the default device at this
 * process's thread count, with every rank of the world measuring at
 * once (so a node whose ranks share cores is measured as it trains);
 * collectives on groups of 2, 4, ... consecutive ranks and on the world.
 * Collective; each rank gets its own measurements (write rank 0's).
 * quick: fewer sizes and repetitions (a test's). */
MF_API mf_calibration *mf_calibration_measure(bool quick);
/* "measured: cpu ... , 1 thread(s), 4 rank(s) on 1 node(s)" or "built-in default". */
MF_API const char *mf_calibration_source(const mf_calibration *c);

/* One calibrated rate: a class's FLOP/s at `work` FLOPs per kernel call
 * (MF_PROF_GEMM, MF_PROF_CONV, MF_PROF_ATTENTION), or for another class
 * the bytes per second at `work` bytes per call. */
MF_API double mf_calibration_rate(const mf_calibration *c, mf_prof_class cls, double work);
/* A kernel call's fixed seconds (its launch, its threads' start). */
MF_API double mf_calibration_overhead(const mf_calibration *c);
/* The fraction of a non-blocking collective's time that compute running
 * beside it hides: 1, all of it; 0, none; below 0, running both at once
 * costs more than one after the other (ranks that share cores with their
 * progress threads). From -1 to 1. */
MF_API double mf_calibration_overlap(const mf_calibration *c);
/* The seconds of one collective of `bytes` (the message, as the tally
 * counts it) over `ranks` ranks on `nodes` nodes. */
MF_API double mf_calibration_comm_time(const mf_calibration *c, mf_comm_kind kind, int64_t bytes, int ranks,
                                       int nodes);

/* The bytes per second a large message of that collective moves: the
 * slope between its two largest measured sizes (0 if none measured). */
MF_API double mf_calibration_comm_bandwidth(const mf_calibration *c, mf_comm_kind kind, int ranks, int nodes);

typedef struct mf_step_time {
    double compute;        /* the graph's kernels, at the calibrated rates */
    double comm;           /* every communication entry, end to end */
    double exposed_comm;   /* the part compute does not hide (blocking calls, and what non-blocking ones leave) */
    double pipe_wait;      /* a pipeline's transfers: the smallest transfer's time, each (the wait to meet) */
    double bubble;         /* a pipeline's idle time (mf_predict_pipeline) */
    double step;           /* compute + exposed_comm + bubble */
} mf_step_time;

/* One entry's seconds: an op's compute, or a communication entry's time
 * (a pipeline's stage-to-stage transfer: its bytes at the calibrated
 * point-to-point bandwidth between two ranks; waiting for the other
 * stage is the schedule's, mf_predict_pipeline). */
MF_API double mf_predict_entry(const mf_graph_op *o, const mf_calibration *c);
/* The time of a step from its graph (one rank's, recorded in a
 * simulated world): each op at its class's rate for its work per kernel
 * call, each communication entry at the calibrated time; communication
 * that the step started without waiting for (gradient buckets, ZeRO-3
 * prefetch) overlaps the compute after it, and the optimizer's update
 * waits for it. */
MF_API mf_status mf_predict_step(const mf_graph *g, const mf_calibration *c, mf_step_time *out);
/* A pipeline of `stages` stages and `micro_batches` micro-batches whose
 * slowest stage's step (all its micro-batches) is t: its idle time is
 * added, the larger of the schedule's bubble, (stages - 1) micro-batch
 * times (GPipe and 1F1B alike), and its transfers' waits (t->pipe_wait):
 * a stage idles because the other has not sent yet, whether for its
 * place in the schedule or for want of a core, and the two are one wait
 * seen two ways. */
MF_API void mf_predict_pipeline(mf_step_time *t, int stages, int micro_batches);

#ifdef __cplusplus
}
#endif
#endif
