/*
 * lib/graph/graph_internal.h - the step graph's recorder, kernel costs
 * and the meta device, inside the library (not installed).
 */
#ifndef MPIFLOW_LIB_GRAPH_INTERNAL_H
#define MPIFLOW_LIB_GRAPH_INTERNAL_H

#include <stdio.h>
#include "lib/internal.h"
#include "mpiflow/graph.h"

/* What the recorder keeps per op beyond mf_graph_op: the op itself and
 * its attributes, so that a planner can ask its shape and SBP rules
 * again for other shapes. */
typedef struct mfi_graph_call {
    const struct mfi_op *op;
    void *attrs;
    size_t attrs_size;
    double best;   /* the cost of its costliest kernel call */
} mfi_graph_call;

const mfi_graph_call *mfi_graph_call_at(const mf_graph *g, int i);
/* A simulated call (lib/graph/sim.c): one communication entry. */
void mfi_graph_comm(int kind, int64_t bytes, int ranks, int nodes, int local, mf_coll_algo algo, bool async,
                    bool pipe);

#endif
