/*
 * lib/io/ckpt_layout.c - how a tensor lies in a checkpoint and which
 * block each rank moves, for the parallel writer and reader
 * (lib/io/ckpt_internal.h; the format: doc/checkpoints.md).
 *
 * Every rank runs every HDF5 call (metadata operations are collective);
 * a rank with nothing to write or read selects nothing. Each dataset
 * holds the global tensor, written once: the ranks holding the same
 * block (a replicated tensor: all of them) each write a slice of its rows,
 * after P dimensions have been summed. The checksum attribute is a sum over
 * elements of a 64-bit mix of (global index, value bits): order-free, so
 * each writer adds its block's share and one allreduce gives the total;
 * on load the readers of a partition of the tensor recompute it.
 */
#include <stdio.h>
#include "lib/io/ckpt_internal.h"

/* this block's share of the checksum: data is the dense block b of a
 * tensor of global meta gm */
static uint64_t block_checksum(const void *data, const mfi_meta *gm, const mfi_box *b)
{
    return mfi_ckpt_checksum(data, mf_dtype_size(gm->dtype), gm->ndim, gm->shape, b->start, b->count);
}

mf_status mfi_ckpt_sum_checksum(uint64_t part, bool failed, uint64_t *total, bool *any_failed)
{
    int64_t v[3] = {(int64_t)(part & 0xffffffffu), (int64_t)(part >> 32), failed};
    mf_status st = mfi_allreduce(mfi_comm_world(), v, v, 3, MF_I64);
    *total = (uint64_t)v[0] + ((uint64_t)v[1] << 32);
    *any_failed = st != MF_OK || v[2] > 0;
    return st;
}

mf_status mfi_ckpt_layout_of(mf_tensor *t, mfi_ckpt_layout *l)
{
    memset(l, 0, sizeof *l);
    mfi_meta_of(t, &l->gm);
    if (t->global) {
        l->p = t->global->placement;
        l->sbp = t->global->sbp;
    } else {
        l->p = l->owned = mf_placement_world();
        if (!l->p) return mf_last_status();
        l->sbp = mfi_nd_sbp_all(1, MF_SBP_B);
    }
    l->holds = l->p->index >= 0;
    l->copies = 1;
    for (int d = 0; d < l->sbp.ndim; d++)
        if (l->sbp.d[d].kind != MF_SBP_S) l->copies *= l->p->mesh[d];
    if (!l->holds) return MF_OK;
    mfi_region(&l->gm, &l->sbp, l->p, l->p->coord, &l->box);
    int copies = l->copies, k = 0;   /* which of the block's holders this rank is */
    for (int d = 0; d < l->sbp.ndim; d++)
        if (l->sbp.d[d].kind != MF_SBP_S) k = k * l->p->mesh[d] + l->p->coord[d];
    l->mine = l->box;
    if (l->gm.ndim == 0) {
        l->writes = k == 0;
        return MF_OK;
    }
    int64_t start, len, row = 1;
    mfi_split(l->box.count[0], copies, k, &start, &len);
    for (int i = 1; i < l->gm.ndim; i++) row *= l->box.count[i];
    l->mine.start[0] += start;
    l->mine.count[0] = len;
    l->mine_off = start * row;
    l->writes = len * row > 0;
    return MF_OK;
}

hid_t mfi_ckpt_open_fapl(void)
{
    MPI_Comm comm;
    if (mfi_comm_world_handle(&comm, sizeof comm) != MF_OK) return -1;
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL);
    H5Pset_all_coll_metadata_ops(fapl, true);
    H5Pset_coll_metadata_write(fapl, true);
    return fapl;
}

hid_t mfi_ckpt_file_space(const mfi_meta *gm, const mfi_box *b, bool select)
{
    hsize_t dims[MF_MAX_DIMS] = {0}, start[MF_MAX_DIMS] = {0}, count[MF_MAX_DIMS] = {0};
    for (int i = 0; i < gm->ndim; i++) {
        dims[i] = (hsize_t)gm->shape[i];
        start[i] = select ? (hsize_t)b->start[i] : 0;
        count[i] = select ? (hsize_t)b->count[i] : 0;
    }
    hid_t sp = gm->ndim ? H5Screate_simple(gm->ndim, dims, NULL) : H5Screate(H5S_SCALAR);
    if (!select) H5Sselect_none(sp);
    else if (gm->ndim) H5Sselect_hyperslab(sp, H5S_SELECT_SET, start, NULL, count, NULL);
    return sp;
}

static hid_t mem_space(const mfi_meta *gm, const mfi_box *b, bool select)
{
    hsize_t count[MF_MAX_DIMS];
    for (int i = 0; i < gm->ndim; i++) count[i] = select ? (hsize_t)b->count[i] : 1;
    hid_t sp = gm->ndim ? H5Screate_simple(gm->ndim, count, NULL) : H5Screate(H5S_SCALAR);
    if (!select) H5Sselect_none(sp);
    return sp;
}

/* one contiguous range of the file for each piece: independent I/O,
 * which MPI-IO does faster than a collective transfer (doc/performance.md) */
bool mfi_ckpt_rows_only(const mfi_ckpt_layout *l)
{
    for (int d = 0; d < l->sbp.ndim; d++)
        if (l->sbp.d[d].kind == MF_SBP_S && l->sbp.d[d].axis != 0) return false;
    return true;
}

#define SLAB_BYTES ((int64_t)8 << 20)

/* Moves block b of the tensor (dense in data; active: this rank takes
 * part) to or from dataset ds, and returns in *part this rank's share of
 * the checksum: the rows of b inside l->mine. A rows_only tensor goes in
 * slabs of SLAB_BYTES with independent transfers, each slab checksummed
 * while it is still in the cache; any other in one collective call that
 * every rank makes. */
herr_t mfi_ckpt_move_block(hid_t ds, const mfi_ckpt_layout *l, const mfi_box *b, char *data, bool active, bool write,
                           const hid_t dxpl[2], uint64_t *part, char *why, size_t why_len)
{
    hid_t mt = mfi_h5_mem_type(l->gm.dtype);
    int64_t es = (int64_t)mf_dtype_size(l->gm.dtype), row = 1, rows = l->gm.ndim ? b->count[0] : 1;
    for (int i = 1; i < l->gm.ndim; i++) row *= b->count[i];
    bool slabs = dxpl[1] >= 0 && l->gm.ndim > 0;
    /* row is 0 on a rank outside the placement (an empty box) */
    int64_t step = !slabs || row == 0 ? (rows > 0 ? rows : 1) : row * es >= SLAB_BYTES ? 1 : SLAB_BYTES / (row * es);
    *part = 0;
    herr_t r = 0;
    for (int64_t r0 = 0; r >= 0 && (r0 < rows || (!slabs && r0 == 0)); r0 += step) {
        if (slabs && !active) break;   /* independent: nothing to do */
        mfi_box sl = *b;
        if (l->gm.ndim) {
            sl.start[0] += r0;
            sl.count[0] = rows - r0 < step ? rows - r0 : step;
        }
        char *p = active ? data + r0 * row * es : NULL;
        hid_t fs = mfi_ckpt_file_space(&l->gm, &sl, active), ms = mem_space(&l->gm, &sl, active);
        hid_t x = dxpl[slabs];
        r = write ? H5Dwrite(ds, mt, ms, fs, x, p) : H5Dread(ds, mt, ms, fs, x, p);
        if (r < 0) mfi_h5_reason(why, why_len);   /* before the next call clears HDF5's error stack */
        H5Sclose(fs);
        H5Sclose(ms);
        if (r < 0 || !active || !l->writes) continue;
        if (!l->gm.ndim) {
            *part += block_checksum(p, &l->gm, &l->mine);
            continue;
        }
        /* the checksum of this slab's rows that are in mine */
        int64_t lo = sl.start[0] > l->mine.start[0] ? sl.start[0] : l->mine.start[0];
        int64_t hi_s = sl.start[0] + sl.count[0], hi_m = l->mine.start[0] + l->mine.count[0];
        int64_t hi = hi_s < hi_m ? hi_s : hi_m;
        if (hi <= lo) continue;
        mfi_box c = l->mine;
        c.start[0] = lo;
        c.count[0] = hi - lo;
        *part += block_checksum(p + (lo - sl.start[0]) * row * es, &l->gm, &c);
    }
    return r;
}

int mfi_ckpt_io_enter(const char *what, const char *name, const char *path)
{
    if (!mfi_ledger_on()) return 0;
    char text[512];
    if (name) snprintf(text, sizeof text, "%s '%s' in %s", what, name, path);
    else snprintf(text, sizeof text, "%s %s", what, path);
    mfi_ledger_context(text);
    return mfi_ledger_enter(mfi_comm_world(), "checkpoint I/O");
}

void mfi_ckpt_io_leave(int token)
{
    mfi_ledger_leave(token);
    mfi_ledger_context("");
}
