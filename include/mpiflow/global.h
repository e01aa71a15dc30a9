/*
 * mpiflow/global.h - global tensors: placement, SBP and nd-SBP, boxing
 * (doc/design.md sections 3 and 4).
 *
 * A global tensor looks like one tensor of its global shape to the
 * program; on each rank of its placement it holds a local piece laid out
 * by its nd-SBP. Every op of ops.h accepts global tensors: it picks an
 * SBP signature, inserts the communication ("boxing") its inputs need,
 * and runs the local kernels. Autograd runs through boxing.
 *
 * Every rank runs the same program (SPMD): creating placements, global
 * tensors and ops on them are collective over MPI_COMM_WORLD, in the
 * same order on every rank. A rank outside an op's placement skips the
 * kernels but keeps the metadata.
 *
 * Text forms, used by the app, errors and checkpoint attributes:
 *   placement  "0-3"  "0-3 mesh 2x2"  "0,2,4,6 mesh 2x2"  "0-1 cuda"
 *   SBP        "S(0)"  "B"  "P"  and nd-SBP "S(0),B" (one per mesh dim)
 */
#ifndef MPIFLOW_GLOBAL_H
#define MPIFLOW_GLOBAL_H

#include "mpiflow/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MF_MAX_MESH 4

/* ---- placement: ranks arranged as a mesh, plus a device type */
typedef struct mf_placement mf_placement;

/* ranks[i] are world ranks; prod(mesh) must equal nranks. Collective. */
MF_API mf_placement *mf_placement_create(int nranks, const int *ranks, int mesh_ndim, const int *mesh,
                                         mf_device_type dev);
MF_API mf_placement *mf_placement_parse(const char *text);           /* collective */
/* All world ranks as a 1-D mesh, or as the given mesh. Collective. */
MF_API mf_placement *mf_placement_world(void);
MF_API mf_placement *mf_placement_world_mesh(int mesh_ndim, const int *mesh);
MF_API mf_placement *mf_placement_retain(mf_placement *p);
MF_API void mf_placement_destroy(mf_placement *p);
MF_API int mf_placement_size(const mf_placement *p);
MF_API int mf_placement_mesh_ndim(const mf_placement *p);
MF_API int mf_placement_mesh_dim(const mf_placement *p, int d);
MF_API int mf_placement_rank(const mf_placement *p, int i);          /* world rank of member i */
/* This rank's index in the placement, or -1 outside it. */
MF_API int mf_placement_index(const mf_placement *p);
MF_API bool mf_placement_equal(const mf_placement *a, const mf_placement *b);
MF_API char *mf_placement_str(const mf_placement *p, char *buf, size_t size);

/* ---- SBP of one mesh dimension, and nd-SBP */
typedef enum mf_sbp_kind { MF_SBP_S = 0, MF_SBP_B, MF_SBP_P } mf_sbp_kind;
typedef struct mf_sbp {
    mf_sbp_kind kind;
    int axis;            /* S only */
} mf_sbp;
typedef struct mf_nd_sbp {
    int ndim;
    mf_sbp d[MF_MAX_MESH];
} mf_nd_sbp;

MF_API mf_status mf_nd_sbp_parse(const char *text, mf_nd_sbp *out);
MF_API char *mf_nd_sbp_str(const mf_nd_sbp *s, char *buf, size_t size);
/* Checks s against a placement and a tensor rank: one SBP per mesh
 * dimension, split axes < ndim. The error names what is wrong. */
MF_API mf_status mf_nd_sbp_check(const mf_nd_sbp *s, const mf_placement *p, int ndim);

/* ---- global tensors. sbp is text ("S(0),B"); every function below is
 * collective over the world unless it says otherwise. */
MF_API bool mf_tensor_is_global(const mf_tensor *t);
/* OneFlow's to_global: local is this rank's piece. For S the pieces
 * are joined (they must be the balanced split); for B the value of the
 * placement's first rank is broadcast; for P the pieces are summed. */
MF_API mf_tensor *mf_to_global(mf_tensor *local, const mf_placement *p, const char *sbp);
/* full holds the whole value on every rank (same on all): each rank
 * keeps its piece, without communication. */
MF_API mf_tensor *mf_global_from_full(mf_tensor *full, const mf_placement *p, const char *sbp);
/* From this rank's piece of a tensor of global shape gshape: the piece
 * must be exactly the block p and sbp give this rank (checked here,
 * without communication). Outside the placement only its dtype is used
 * (NULL: f32). For a data loader that makes only its own rows. Not
 * collective. */
MF_API mf_tensor *mf_global_from_piece(mf_tensor *piece, int ndim, const int64_t *gshape, const mf_placement *p,
                                       const char *sbp);
/* The block [start, start + count) per axis that this rank holds under
 * p and sbp (count all 0 outside the placement). Not collective. */
MF_API mf_status mf_global_piece_range(const mf_placement *p, const char *sbp, int ndim, const int64_t *gshape,
                                       int64_t *start, int64_t *count);
MF_API mf_tensor *mf_global_zeros(mf_dtype dt, int ndim, const int64_t *shape, const mf_placement *p,
                                  const char *sbp);
MF_API mf_tensor *mf_global_ones(mf_dtype dt, int ndim, const int64_t *shape, const mf_placement *p,
                                 const char *sbp);
/* Drawn by global element index: the same values for any rank count
 * and any SBP. */
MF_API mf_tensor *mf_global_rand(mf_dtype dt, int ndim, const int64_t *shape, const mf_placement *p,
                                 const char *sbp);
MF_API mf_tensor *mf_global_randn(mf_dtype dt, int ndim, const int64_t *shape, const mf_placement *p,
                                  const char *sbp);
/* This rank's piece (new reference; differentiable). Not collective.
 * NULL with an error outside the placement. */
MF_API mf_tensor *mf_to_local(mf_tensor *t);
/* Moves t to another placement and/or nd-SBP; differentiable. */
MF_API mf_tensor *mf_redistribute(mf_tensor *t, const mf_placement *p, const char *sbp);
/* Non-blocking redistribution without autograd, for data that crosses
 * placements on its own (pipeline stages' activations and gradients):
 * start packs and posts the messages and returns; finish waits, and
 * returns t's value laid out as sbp on p (metadata only outside p; the
 * caller owns it). Only S and B layouts: sum a partial tensor first.
 * Every rank of both placements takes part; start transfers between the
 * same ranks in the same order on both sides. */
typedef struct mf_transfer mf_transfer;
MF_API mf_status mf_redistribute_start(mf_tensor *t, const mf_placement *p, const char *sbp, mf_transfer **out);
MF_API mf_tensor *mf_transfer_finish(mf_transfer *x);
/* The whole value as a local tensor on every rank of the world. */
MF_API mf_tensor *mf_global_gather(mf_tensor *t);
/* Borrowed placement; nd-SBP as text. Not collective. */
MF_API const mf_placement *mf_global_placement(const mf_tensor *t);
MF_API mf_status mf_global_nd_sbp(const mf_tensor *t, mf_nd_sbp *out);
MF_API char *mf_global_sbp_str(const mf_tensor *t, char *buf, size_t size);

#ifdef __cplusplus
}
#endif
#endif
