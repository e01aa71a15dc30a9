/*
 * collectives/coll_hier.h - the node/peer hierarchy of a communicator
 * and its shared-memory window (hier.c), for the hierarchical
 * algorithms (collectives/ only).
 */
#ifndef MPIFLOW_COLLECTIVES_COLL_HIER_H
#define MPIFLOW_COLLECTIVES_COLL_HIER_H

#include <stdio.h>
#include "collectives/coll_internal.h"

struct mfi_hier {
    bool usable;         /* same ranks on every node, sharing memory */
    char why[96];        /* why not */
    mfi_comm node;        /* this rank's node */
    mfi_comm peers;       /* one rank per node: those with this local rank */
    int local, local_size, nnodes;
    int *rank_at;        /* [peer rank * local_size + local rank] -> rank of c */
    MPI_Win win;         /* shared over node, locked (lock_all) while it lives */
    size_t win_bytes;    /* per rank */
    char **seg;          /* [local rank] -> its part of the window */
    unsigned phase;      /* alternates the window's halves between rounds */
};

/* c's hierarchy, built on first call (collective over c). */
mf_status mfi_hier_get(mfi_comm *c, mfi_hier **out);
void mfi_hier_free(mfi_hier *h);
/* At least bytes of window per rank (collective over the node). */
mf_status mfi_hier_window(mfi_hier *h, size_t bytes);
/* Everyone's stores to the window so far are visible after this
 * (collective over the node). */
mf_status mfi_hier_sync(mfi_hier *h);

/* Half of the allreduce window: one round's slab per rank. */
#define MFI_HIER_SLAB ((size_t)4 << 20)
/* The most window per rank reduce-scatter and allgather allocate; above
 * it they fall back to the ring. */
#define MFI_HIER_WINDOW_MAX ((size_t)64 << 20)

#endif
