/*
 * lib/optim/buckets.h - gradient buckets (not installed): the core that
 * packs gradients as backward makes them final and starts their sums
 * (buckets.c), and the kinds of sum a bucket can do behind one interface
 * (bucket_sum.c: allreduce on the host or in GPU memory; zero.c: ZeRO's
 * reduce-scatter). doc/gradient-sync.md tells the user's side.
 */
#ifndef MPIFLOW_LIB_OPTIM_BUCKETS_H
#define MPIFLOW_LIB_OPTIM_BUCKETS_H

#include "base/ptrmap.h"
#include "lib/global/global_internal.h"
#include "lib/optim/optim_internal.h"

typedef struct mfi_bucket mfi_bucket;

/* What one kind of bucket does with its gradients. */
typedef struct mfi_bucket_kind {
    const char *what;     /* names the collective for the watchdog: "gradient", "ZeRO gradient" */
    const char *trace;    /* the trace span's name: "allreduce", "reduce-scatter" */
    /* Buffers, once the bucket's parameters are listed. */
    mf_status (*setup)(const mf_optim *o, mfi_bucket *b);
    void (*release)(mfi_bucket *b);
    /* Parameter slot's gradient g (contiguous, of the bucket's dtype and
     * the parameter's size) into the buffer; g NULL: zeros. */
    mf_status (*pack)(mfi_bucket *b, int slot, const mfi_opt_param *p, mf_tensor *g);
    mf_status (*start)(mfi_bucket *b);   /* the sum as a non-blocking request */
    mf_status (*sum)(mfi_bucket *b);     /* the sum, blocking */
    /* The summed gradient of slot back to its parameter (which has a
     * local gradient). */
    mf_status (*unpack)(mfi_bucket *b, int slot, mfi_opt_param *p);
    /* mf_clip_grad_norm scaled the gradients by coef: what the bucket
     * keeps of them beyond the gradients; NULL: nothing. */
    void (*scale)(mfi_bucket *b, double coef);
} mfi_bucket_kind;

extern const mfi_bucket_kind mfi_bucket_allreduce;       /* host buffer, our algorithms */
extern const mfi_bucket_kind mfi_bucket_allreduce_gpu;   /* GPU buffer, a CUDA-aware MPI's own */
extern const mfi_bucket_kind mfi_bucket_zero;            /* rank-by-rank rows, reduce-scattered (zero.c) */

struct mfi_bucket {
    const mfi_bucket_kind *kind;
    mfi_comm *comm;
    mf_dtype dt;
    int np, nready;
    int *params;      /* optimizer indices, in packing order */
    int64_t *off;     /* element offset of each in a packed buffer */
    int64_t numel;
    void *buf;        /* the packed gradients */
    bool pinned;      /* buf is pinned host memory */
    mfi_request *req;
    void *part;       /* the kind's own state */
};

struct mfi_grad_buckets {
    mf_optim *o;
    int nb;
    mfi_bucket *b;
    int *bucket_of;   /* per parameter: its bucket, -1 when not bucketed */
    int *slot_of;     /* per parameter: its slot in the bucket */
    bool *ready;      /* per parameter, this round */
    int next;         /* the next bucket to start */
    bool dirty, active;   /* active: a gradient arrived this round */
    /* the parameter of a local leaf, by its address (a parameter's
     * local piece is fixed for its lifetime) */
    mfi_ptr_map leaf_param;
    mfi_grad_buckets *next_live;
};

/* o's buckets, built on first use; NULL with an error when they cannot
 * be. */
mfi_grad_buckets *mfi_grad_buckets_of(mf_optim *o);
/* Finishes the round: starts what backward did not, waits in order,
 * installs the sums. Collective over the buckets' communicators. */
mf_status mfi_grad_buckets_finish(mfi_grad_buckets *gb);
/* Names bucket k's collective for the watchdog (MF_TIMEOUT): "gradient
 * bucket 2 of 3, 1.50 MiB"; what NULL clears it. */
void mfi_bucket_name(const mfi_grad_buckets *gb, int k, const char *what);

#endif
