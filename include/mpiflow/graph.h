/*
 * mpiflow/graph.h - the step graph: a program's ops in order, with their
 * shapes, what each costs and what memory it leaves in use, recorded
 * while the program runs (doc/planning.md).
 *
 * On the meta device (MF_DEV_META: tensors with shapes and no bytes,
 * kernels that only count) a training step is recorded without data and
 * without arithmetic, in the time its shape rules take: the static graph
 * of the step, as OneFlow compiles one. The same recording on the CPU or
 * a GPU is of the step that really ran.
 *
 *   mf_set_default_device(MF_DEV_META);
 *   mf_module *m = mf_model_gpt(&cfg, &st);     // parameters on meta
 *   mf_graph_begin(m);
 *   ... forward, loss, mf_backward, mf_optim_step ...
 *   mf_graph *g = mf_graph_end();
 *   mf_graph_print(g, stdout);
 *
 * Every op the step applied (mf_matmul, a layer's fused op, the ops a
 * backward runs) is one entry, each with the module it ran in, the ids
 * of the values it read and wrote (one id per tensor's storage: views
 * share their base's), and the floating-point operations and bytes of
 * its kernels (the profiler's measure: mf_profile_flops and
 * mf_profile_bytes give the same for a step that ran).
 */
#ifndef MPIFLOW_GRAPH_H
#define MPIFLOW_GRAPH_H

#include <stdio.h>
#include "mpiflow/runtime.h"
#include "mpiflow/tensor.h"
#include "mpiflow/nn.h"
#include "mpiflow/coll.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MF_GRAPH_MAX_IN 6

typedef enum mf_graph_phase {
    MF_GRAPH_FORWARD,    /* under no backward */
    MF_GRAPH_BACKWARD,   /* run by the backward of an op (forward_of) */
    MF_GRAPH_UPDATE      /* after a backward: clipping, the optimizer's update */
} mf_graph_phase;

/* A value: one tensor storage, as an op saw it. */
typedef struct mf_graph_value {
    int64_t id;          /* 0: no input */
    mf_dtype dtype;
    int ndim;
    int64_t shape[MF_MAX_DIMS];
} mf_graph_value;

typedef struct mf_graph_op {
    /* the op ("mf_linear", "mf_layer_norm", ...); for kernels that ran
     * outside any op, "grad kernels" (a backward's own kernels and its
     * gradient sums: forward_of is set), "update" (after a backward: the
     * optimizer's) or "kernels" (before one); these have no output */
    const char *name;
    mf_graph_phase phase;
    int forward_of;      /* backward ops: the index of the op differentiated; else -1 */
    int parent;          /* an op applied inside another's forward: that op; else -1 */
    const char *module;  /* dotted name of the innermost module it ran in ("" outside) */
    int n_in;
    mf_graph_value in[MF_GRAPH_MAX_IN];
    const char *param[MF_GRAPH_MAX_IN];   /* the parameter input i is, or NULL */
    mf_graph_value out;
    double flops, bytes; /* of its own kernels (not of ops inside it) */
    int kernels;         /* its own kernel calls */
    /* the same split: FLOPs and calls of its matrix kernels (GEMM,
     * convolution, attention: cls says which), bytes and calls of the
     * others (memory-bound) */
    double mm_flops, mem_bytes;
    int mm_calls, mem_calls;
    mf_prof_class cls;   /* the class of its costliest kernel (MF_PROF_OTHER: none) */
    int64_t saved_bytes; /* bytes it keeps for its backward (0 if not recorded) */
    /* on global tensors: the signature the op ran under, each input's
     * nd-SBP then the output's ("S(0) B,S(0) -> S(0)"); "" otherwise */
    char sbp[96];
    int64_t in_use;      /* the device allocator's bytes in use after it */
    /* a communication entry (in a simulated world: "allreduce",
     * "reduce-scatter", ...; comm_kind -1 for computation): the message's
     * bytes, the ranks of its communicator, the nodes they span and the
     * most on one node, and the algorithm the selection chose */
    int comm_kind;       /* an mf_comm_kind, or -1 */
    int64_t comm_bytes;
    int comm_ranks, comm_nodes, comm_local;
    mf_coll_algo comm_algo;
    bool comm_async;     /* started without waiting for it (a non-blocking request) */
    bool comm_pipe;      /* a pipeline's stage-to-stage transfer */
} mf_graph_op;

typedef struct mf_graph mf_graph;

/* Starts recording on this thread. model (may be NULL) names the modules
 * and parameters the ops meet. MF_ERR_STATE if a recording is open. */
MF_API mf_status mf_graph_begin(const mf_module *model);
/* Stops recording; the graph (NULL with the error when none was open or
 * memory ran out). */
MF_API mf_graph *mf_graph_end(void);
MF_API bool mf_graph_recording(void);
MF_API void mf_graph_destroy(mf_graph *g);

MF_API int mf_graph_num_ops(const mf_graph *g);
MF_API const mf_graph_op *mf_graph_get_op(const mf_graph *g, int i);
/* Totals over the step, by kernel class (as mf_profile_flops and
 * mf_profile_bytes count a step that ran). */
MF_API double mf_graph_flops(const mf_graph *g, mf_prof_class c);
MF_API double mf_graph_bytes(const mf_graph *g, mf_prof_class c);
/* Calls of kernel `kernel` (mf_kernel_name) in the step. */
MF_API int64_t mf_graph_kernel_calls(const mf_graph *g, const char *kernel);
/* The device allocator's peak bytes in use during the recording, and
 * its bytes in use when it began. */
MF_API int64_t mf_graph_peak(const mf_graph *g);
/* Message bytes of the communication entries of one kind. */
MF_API double mf_graph_comm_bytes(const mf_graph *g, mf_comm_kind k);
MF_API int64_t mf_graph_start_in_use(const mf_graph *g);
/* One line per op: index, phase, module, op, shapes, FLOPs, bytes. */
MF_API mf_status mf_graph_print(const mf_graph *g, FILE *f);

/* ---- a simulated world: one rank of many, on the meta device.
 * Until mf_simulate_end this process plays rank `rank` of world_size
 * ranks in nodes of ranks_per_node (world rank r on node r /
 * ranks_per_node): mf_rank, mf_world_size and the node queries say so,
 * placements made meanwhile are of that world and on MF_DEV_META (the
 * only device it allows), and every collective, boxing and pipeline
 * transfer is counted (mf_comm_tally_get, and a communication entry in
 * a graph being recorded, with the algorithm it would run) and moves
 * nothing. So a training step under any plan runs as the rank would run
 * it, at its own shapes and with its own allocations, in one process.
 * Free what was made inside before the end. MF_ERR_STATE if a simulated
 * world is on already, MF_ERR_ARG for sizes that do not fit. */
MF_API mf_status mf_simulate_begin(int world_size, int rank, int ranks_per_node);
MF_API void mf_simulate_end(void);
MF_API bool mf_simulating(void);

#ifdef __cplusplus
}
#endif
#endif
