/*
 * collectives/tally.c - what this rank's collectives moved, by kind
 * (doc/collectives.md, "Counting communication"): calls and message
 * bytes, for every allreduce, reduce-scatter, allgather, all-to-all,
 * broadcast and point-to-point send over more than one rank, boxing,
 * gradient buckets, ZeRO and pipelines alike. Counted where the call
 * starts, on any thread (the progress thread runs the non-blocking
 * ones), so atomically.
 */
#include <stdatomic.h>
#include "collectives/coll_internal.h"

static _Atomic int64_t calls[MF_COMM_KINDS], bytes[MF_COMM_KINDS];

void mfi_tally(mf_comm_kind k, int64_t nbytes)
{
    if ((unsigned)k >= MF_COMM_KINDS) return;
    atomic_fetch_add_explicit(&calls[k], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&bytes[k], nbytes, memory_order_relaxed);
}

void mf_comm_tally_get(mf_comm_tally *t)
{
    for (int k = 0; k < MF_COMM_KINDS; k++) {
        t->calls[k] = atomic_load_explicit(&calls[k], memory_order_relaxed);
        t->bytes[k] = atomic_load_explicit(&bytes[k], memory_order_relaxed);
    }
}

void mf_comm_tally_reset(void)
{
    for (int k = 0; k < MF_COMM_KINDS; k++) {
        atomic_store_explicit(&calls[k], 0, memory_order_relaxed);
        atomic_store_explicit(&bytes[k], 0, memory_order_relaxed);
    }
}

const char *mf_comm_kind_name(mf_comm_kind k)
{
    static const char *const names[MF_COMM_KINDS] = {"allreduce", "reduce-scatter", "allgather", "all-to-all",
                                                     "broadcast", "point-to-point"};
    return (unsigned)k < MF_COMM_KINDS ? names[k] : "unknown";
}
