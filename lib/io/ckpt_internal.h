/*
 * lib/io/ckpt_internal.h - what the parallel checkpoint writer (ckpt.c)
 * and reader (ckpt_load.c) share: how a tensor lies in the file and
 * which block each rank moves (ckpt_layout.c).
 */
#ifndef MF_IO_CKPT_INTERNAL_H
#define MF_IO_CKPT_INTERNAL_H

#include "collectives/comm.h"
#include "lib/global/global_internal.h"
#include "lib/io/ckpt_check.h"
#include "lib/io/h5util.h"
#include "lib/optim/optim_state.h"

/* A tensor's layout for the file: placement, nd-SBP and this rank's
 * block; a local tensor counts as B on the world. The ranks holding the
 * same block (they differ only on B and P mesh dimensions) share its
 * writing and its checksum: each takes a slice of rows, `mine`. */
typedef struct mfi_ckpt_layout {
    const mf_placement *p;
    mf_placement *owned;
    mf_nd_sbp sbp;
    mfi_meta gm;
    mfi_box box;
    bool holds;       /* this rank has a piece */
    int copies;       /* ranks holding each block */
    bool writes;      /* ... and a non-empty slice `mine` of it */
    mfi_box mine;     /* box, axis 0 split among the block's holders */
    int64_t mine_off; /* mine's first element within the dense block */
} mfi_ckpt_layout;

mf_status mfi_ckpt_layout_of(mf_tensor *t, mfi_ckpt_layout *l);
/* Every piece of the tensor is a range of whole rows: the ranks then
 * read and write it independently. */
bool mfi_ckpt_rows_only(const mfi_ckpt_layout *l);
/* File access through MPI-IO on the world, collective metadata; -1 on failure. */
hid_t mfi_ckpt_open_fapl(void);
/* A selection of b in a dataspace of gm's shape, or none. */
hid_t mfi_ckpt_file_space(const mfi_meta *gm, const mfi_box *b, bool select);
/* Moves block b of the tensor (dense in data; active: this rank takes
 * part) to or from dataset ds; *part gets this rank's share of the
 * checksum. dxpl[0]: collective transfers, dxpl[1]: independent ones,
 * or -1 where the tensor must go collectively. On failure why gets the
 * reason (mfi_h5_reason). */
herr_t mfi_ckpt_move_block(hid_t ds, const mfi_ckpt_layout *l, const mfi_box *b, char *data, bool active, bool write,
                           const hid_t dxpl[2], uint64_t *part, char *why, size_t why_len);
/* Collective: the checksum shares summed over the world into *total,
 * and whether any rank failed (its `failed`) into *any_failed. Every
 * rank calls it for every tensor, failed or not, so that all stop at
 * the same tensor and nobody is left in a collective alone. */
mf_status mfi_ckpt_sum_checksum(uint64_t part, bool failed, uint64_t *total, bool *any_failed);
/* Brackets collective HDF5 calls for the watchdog (MF_TIMEOUT):
 * "checkpoint I/O (writing 'fc1.weight' in run.h5.tmp)". */
int mfi_ckpt_io_enter(const char *what, const char *name, const char *path);
void mfi_ckpt_io_leave(int token);

#endif
