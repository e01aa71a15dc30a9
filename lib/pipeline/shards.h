/*
 * lib/pipeline/shards.h - deterministic mode's per-shard gradients and
 * loss (shards.c; not installed).
 */
#ifndef MPIFLOW_LIB_PIPELINE_SHARDS_H
#define MPIFLOW_LIB_PIPELINE_SHARDS_H

#include "lib/internal.h"

typedef struct mfi_shards mfi_shards;
/* The parameters of layers first .. last-1 of seq (B over mesh dimension
 * dp, the data-parallel one, of this rank's stage), with room for n of
 * the V shards' gradients each. */
mfi_shards *mfi_shards_create(mf_module *seq, int first, int last, int V, int n, int dp);
void mfi_shards_destroy(mfi_shards *s);
/* Moves each parameter's gradient into slot j (this rank's j-th shard)
 * and clears it. */
mf_status mfi_shards_stash(mfi_shards *s, int j);
/* While on, the uses of ZeRO-split parameters hand their whole
 * gradients to s (mfi_use_sunk), which stashes and sums them as the
 * others' and keeps this rank's rows. */
void mfi_shards_sink(mfi_shards *s, bool on);
/* Each parameter's gradient becomes the sum over the V shards in shard
 * order (then boxed to the parameter's layout over the other mesh
 * dimensions); collective over the stage. */
mf_status mfi_shards_sum(mfi_shards *s);
/* *sum: the n values of each rank of the data-parallel communicator dp
 * (its shards, in order) summed in shard order; collective over dp. */
mf_status mfi_shards_loss(mfi_comm *dp, const double *mine, int n, int V, double *sum);

#endif
