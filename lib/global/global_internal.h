/*
 * lib/global/global_internal.h - the global-tensor layer's structs and
 * cross-file helpers (not installed).
 *
 * A global tensor is an mf_tensor whose shape is the global shape, with
 * no storage of its own; t->global holds the placement, the nd-SBP and
 * this rank's local piece. Autograd runs on the local pieces: every op
 * on global tensors records its local op, and boxing is a local op whose
 * forward communicates. The local gradient of a tensor with nd-SBP X is
 * laid out as dual(X), where dual swaps B and P and keeps S(a): every
 * backward is linear in its output gradient, so this holds op by op, and
 * the backward of boxing X -> Y is boxing dual(Y) -> dual(X).
 */
#ifndef MPIFLOW_LIB_GLOBAL_INTERNAL_H
#define MPIFLOW_LIB_GLOBAL_INTERNAL_H

#include "lib/internal.h"
#include "collectives/coll.h"

struct mf_placement {
    int refcount;
    int n;                       /* ranks */
    int *ranks;                  /* world ranks, mesh order */
    int mesh_ndim;
    int mesh[MF_MAX_MESH];
    mf_device_type dev;
    int index;                   /* this rank's member index, -1 outside */
    int coord[MF_MAX_MESH];      /* this rank's mesh coordinates */
    mfi_comm *comm;               /* the members; NULL outside */
    mfi_comm *dim_comm[MF_MAX_MESH];  /* peers differing only in coord d */
    bool sim;                    /* of a simulated world (mf_simulate_begin) */
};

typedef struct mfi_global {
    mf_placement *placement;     /* one reference */
    mf_nd_sbp sbp;
    mf_tensor *local;            /* this rank's piece; NULL outside */
} mfi_global;

/* ---- placement and SBP (placement.c, sbp.c) */
/* Reads placement text ("0-3 mesh 2x2 cuda") without creating anything
 * (no MPI): ranks (capacity cap), their count, the mesh and the device;
 * MF_ERR_ARG with a message when it cannot. */
enum { MFI_PLACEMENT_TEXT_CAP = 65536 };
mf_status mfi_placement_text(const char *text, int *ranks, int cap, int *n, int *nd, int *mesh, mf_device_type *dev);
/* The checks of mf_placement_create: ranks distinct and in [0, world),
 * a mesh of 1..MF_MAX_MESH positive dims holding them all (what names
 * the caller in the message). */
mf_status mfi_placement_layout_check(const char *what, int n, const int *ranks, int nd, const int *mesh, int world);
void mfi_placement_coords(const mf_placement *p, int index, int *coord);
/* Drops the registry's placements of a simulated world (its end). */
void mfi_placement_drop_sim(void);
int mfi_placement_index_of(const mf_placement *p, const int *coord);
void mfi_global_teardown(void);
/* Piece k of n of a length-L axis (doc/design.md section 3's balanced split). */
void mfi_split(int64_t L, int n, int k, int64_t *start, int64_t *len);
/* The block member `coord` of placement p holds under nd-SBP s. */
void mfi_region(const mfi_meta *gm, const mf_nd_sbp *s, const mf_placement *p, const int *coord, mfi_box *b);
bool mfi_nd_sbp_equal(const mf_nd_sbp *a, const mf_nd_sbp *b);
mf_nd_sbp mfi_nd_sbp_dual(const mf_nd_sbp *s);
mf_nd_sbp mfi_nd_sbp_all(int ndim, mf_sbp_kind k);
char *mfi_sbp_str(mf_sbp s, char *buf, size_t size);
mf_status mfi_nd_sbp_from(const char *what, const char *text, const mf_placement *p, int ndim, mf_nd_sbp *out);

/* ---- global tensors (gtensor.c) */
/* A global tensor over local (takes the reference; local NULL outside
 * the placement). requires_grad follows local or, outside, req. */
mf_tensor *mfi_global_wrap(mf_tensor *local, const mf_placement *p, const mf_nd_sbp *s, const mfi_meta *gm,
                           bool req);
static inline bool mfi_is_global(const mf_tensor *t) { return t && t->global; }
static inline mf_tensor *mfi_local(const mf_tensor *t) { return t->global ? t->global->local : (mf_tensor *)t; }
/* Whether global t's gradient has t's own SBP rather than its dual:
 * recorded by the gradient sync and the pipeline's shard sum, dropped by
 * the next backward contribution (grad_state.c). */
bool mfi_global_grad_synced(const mf_tensor *t);
mf_status mfi_global_set_grad_synced(const mf_tensor *t, bool on);
/* The sum of squares of global t's whole gradient, recorded by the
 * deterministic shard sum with the gradient (dropped with the synced
 * record); false when none is recorded. */
mf_status mfi_global_set_grad_sumsq(const mf_tensor *t, double v);
bool mfi_global_grad_sumsq(const mf_tensor *t, double *v);
/* "[64,784] S(0) on 0-3": for error messages. */
char *mfi_global_desc(const mf_tensor *t, char *buf, size_t size);

/* ---- boxing (boxing.c) */
/* Differentiable: the local piece of x (global meta gm, nd-SBP from on
 * src) re-laid as `to` on dst; NULL (and MF_OK) outside dst. */
mf_status mfi_boxing(mf_tensor *x, const mfi_meta *gm, const mf_placement *src, const mf_nd_sbp *from,
                  const mf_placement *dst, const mf_nd_sbp *to, mf_tensor **out);
/* The planner's cost of boxing from -> to along one mesh dimension of n
 * ranks, for a tensor of `bytes` bytes: the bytes a rank moves over the
 * network (nccl-tests' bus factors), a tenth of the bytes it copies
 * locally, and the full size for a zero-filled P (it also makes the op
 * compute on the whole tensor). 0 only when nothing changes. */
double mfi_box_cost(mf_sbp from, mf_sbp to, int n, double bytes);

/* Tells the watchdog's ledger what the next collectives move:
 * "boxing 'name' f32 [4,8] S(0) -> B" (mfi_ledger_context). */
void mfi_box_context(const char *what, const mf_tensor *t, const mf_nd_sbp *from, const mf_nd_sbp *to);
/* w (a split parameter) boxed to `to` for one use (differentiable, so
 * its gradient is reduce-scattered back into w's split); views of it
 * saved for backward are gathered again there (regather.c). */
mf_tensor *mfi_gather_transient(mf_tensor *w, const mf_nd_sbp *to);
/* The same gather started early (regather.c): a non-blocking allgather
 * along the one mesh dimension where w is S and `to` B (NULL, with no
 * error, for anything else: gather it the usual way); finish waits for
 * it and gives the gathered parameter (differentiable; transient: as
 * mfi_gather_transient), adding the seconds it waited and the seconds
 * the allgather ran to *wait_s and *coll_s. free drops one unfinished. */
typedef struct mfi_prefetch mfi_prefetch;
mfi_prefetch *mfi_gather_start(mf_tensor *w, const mf_nd_sbp *to);
mf_tensor *mfi_gather_finish(mfi_prefetch *pf, bool transient, double *wait_s, double *coll_s);
void mfi_prefetch_free(mfi_prefetch *pf);
/* Deterministic mode (lib/pipeline/shards.c): while a sink is set, a
 * parameter gathered for use (mfi_use_sunk: g, w gathered with no graph)
 * gives its local gradient gy (laid out as gsbp) to the sink in backward
 * instead of reduce-scattering it into w. */
typedef mf_status (*mfi_use_sink)(void *ctx, mf_tensor *w, mf_tensor *gy, const mf_nd_sbp *gsbp);
void mfi_set_use_sink(mfi_use_sink fn, void *ctx);
bool mfi_use_sink_on(void);
/* g (w gathered, no graph; taken) as the output of an op on w whose
 * backward hands the gradient to the sink; g itself with no sink. */
mf_tensor *mfi_use_sunk(mf_tensor *w, mf_tensor *g);
/* Boxing to nd-SBP s on placement p (differentiable). */
mf_tensor *mfi_redistribute(mf_tensor *t, const mf_placement *p, const mf_nd_sbp *s);
/* mf_redistribute_start with a checked nd-SBP (t global, p not NULL). */
mf_status mfi_transfer_start(mf_tensor *t, const mf_placement *p, const mf_nd_sbp *sbp, mf_transfer **out);
/* Whether the transfer's messages have all completed (mf_transfer_finish
 * then does not wait); lets MPI progress. */
bool mfi_transfer_test(mf_transfer *x);

#endif
