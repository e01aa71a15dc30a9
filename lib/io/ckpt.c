/*
 * lib/io/ckpt.c - parallel-HDF5 checkpoints of a model's state_dict and
 * the training state (DESIGN.md section 7; include/mpiflow/ckpt.h).
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
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
#include "collectives/comm.h"
#include "lib/global/global_internal.h"
#include "lib/io/h5util.h"
#include "lib/optim/optim_internal.h"

#define FORMAT_NAME "mpiflow-checkpoint"
#define FORMAT_VERSION 1

/* this block's share of the checksum: data is the dense block b of a
 * tensor of global meta gm */
static uint64_t block_checksum(const void *data, const mfi_meta *gm, const mfi_box *b)
{
    return mfi_ckpt_checksum(data, mf_dtype_size(gm->dtype), gm->ndim, gm->shape, b->start, b->count);
}

/* the world-wide sum of per-rank checksum shares */
static mf_status sum_checksum(uint64_t part, uint64_t *total)
{
    int64_t halves[2] = {(int64_t)(part & 0xffffffffu), (int64_t)(part >> 32)};
    MF_TRY(mfi_allreduce(mfi_comm_world(), halves, halves, 2, MF_I64));
    *total = (uint64_t)halves[0] + ((uint64_t)halves[1] << 32);
    return MF_OK;
}

/* A tensor's layout for the file: placement, nd-SBP and this rank's
 * block; a local tensor counts as B on the world. The ranks holding the
 * same block (they differ only on B and P mesh dimensions) share its
 * writing and its checksum: each takes a slice of rows, `mine`. */
typedef struct layout {
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
} layout;

static mf_status layout_of(mf_tensor *t, layout *l)
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

static hid_t open_fapl(void)
{
    MPI_Comm comm;
    if (mfi_comm_world_handle(&comm, sizeof comm) != MF_OK) return -1;
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL);
    H5Pset_all_coll_metadata_ops(fapl, true);
    H5Pset_coll_metadata_write(fapl, true);
    return fapl;
}

/* a selection of b in a dataspace of gm's shape, or none */
static hid_t file_space(const mfi_meta *gm, const mfi_box *b, bool select)
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

/* Every piece of the tensor is a range of whole rows, one contiguous
 * range of the file: the ranks then read and write independently, which
 * MPI-IO does faster than a collective transfer (doc/performance.md). */
static bool rows_only(const layout *l)
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
static herr_t move_block(hid_t ds, const layout *l, const mfi_box *b, char *data, bool active, bool write,
                         const hid_t dxpl[2], uint64_t *part)
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
        hid_t fs = file_space(&l->gm, &sl, active), ms = mem_space(&l->gm, &sl, active);
        hid_t x = dxpl[slabs];
        r = write ? H5Dwrite(ds, mt, ms, fs, x, p) : H5Dread(ds, mt, ms, fs, x, p);
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

/* ---------------------------------------------------------------- save */
typedef struct writer {
    hid_t dxpl;         /* collective transfers */
    hid_t dxpl_ind;     /* independent ones, for rows_only tensors */
    hid_t gcpl;         /* groups that keep the order of writing */
    bool fletcher32;
    char *msg;          /* the first failure, for the message */
    size_t msglen;
} writer;

#define CHUNK_BYTES (4.0 * 1024 * 1024)

/* Contiguous, or with fletcher32 chunks that tile one writer's slice
 * (that of the first writer of the block at coordinate 0, the same on
 * every rank) under HDF5's Fletcher32 filter. */
static hid_t dataset_props(const writer *w, const layout *l)
{
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);   /* every element is written */
    if (!w->fletcher32 || l->gm.ndim == 0) return dcpl;
    int coord[MF_MAX_DIMS] = {0};
    mfi_box b0;
    mfi_region(&l->gm, &l->sbp, l->p, coord, &b0);
    hsize_t chunk[MF_MAX_DIMS];
    double bytes = (double)mf_dtype_size(l->gm.dtype);
    for (int i = 0; i < l->gm.ndim; i++) {
        if (b0.count[i] == 0) return dcpl;   /* an empty piece: no chunks */
        chunk[i] = (hsize_t)b0.count[i];
        if (i == 0) chunk[0] = (chunk[0] + (hsize_t)l->copies - 1) / (hsize_t)l->copies;
        bytes *= (double)chunk[i];
    }
    /* the slice in k equal parts of at most CHUNK_BYTES: HDF5 filters large
     * chunks much more slowly (doc/performance.md) */
    for (int i = 0; i < l->gm.ndim && bytes > CHUNK_BYTES; i++) {
        double k = ceil(bytes / CHUNK_BYTES);
        hsize_t c = (hsize_t)ceil((double)chunk[i] / k);
        bytes = bytes / (double)chunk[i] * (double)c;
        chunk[i] = c;
    }
    H5Pset_chunk(dcpl, l->gm.ndim, chunk);
    H5Pset_fletcher32(dcpl);
    return dcpl;
}

static mf_status write_tensor(const writer *w, hid_t group, const char *name, mf_tensor *t)
{
    char *msg = w->msg;
    size_t msglen = w->msglen;
    layout l;
    MF_TRY(layout_of(t, &l));
    mf_tensor *src = NULL;
    mf_status st = MF_OK;
    /* P dimensions are summed first: each block then has one value */
    bool partial = false;
    for (int d = 0; d < l.sbp.ndim; d++) partial |= l.sbp.d[d].kind == MF_SBP_P;
    if (partial) {
        mf_nd_sbp b = l.sbp;
        for (int d = 0; d < b.ndim; d++)
            if (b.d[d].kind == MF_SBP_P) b.d[d].kind = MF_SBP_B;
        bool prev = mf_set_grad_enabled(false);
        mf_tensor *r = mfi_redistribute(t, l.p, &b);
        mf_set_grad_enabled(prev);
        src = r && l.holds ? mfi_contiguous_raw(r->global->local) : NULL;
        mf_tensor_destroy(r);
    } else if (l.holds) {
        src = mfi_contiguous_raw(mfi_local(t));
    }
    /* a failure here is this rank's alone (memory): it still takes part
     * in the collective calls below, with nothing to write */
    if (src && mf_tensor_device(src) != MF_DEV_CPU) {   /* HDF5 writes host memory */
        mf_tensor *h = mfi_on_device(src, MF_DEV_CPU);
        mf_tensor_destroy(src);
        src = h;
    }
    if (l.holds && !src) st = mf_last_status();
    bool write = l.writes && src;
    uint64_t part = 0, sum = 0;
    hid_t fs = file_space(&l.gm, &l.box, true);
    hid_t dcpl = dataset_props(w, &l);
    hid_t ds = H5Dcreate2(group, name, mfi_h5_file_type(l.gm.dtype), fs, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Pclose(dcpl);
    H5Sclose(fs);
    if (ds < 0) {
        snprintf(msg, msglen, "cannot create dataset '%s'", name);
        st = MF_ERR_IO;
    } else {
        char *data = write ? (char *)mf_tensor_data(src) + (size_t)l.mine_off * mf_dtype_size(l.gm.dtype) : NULL;
        const hid_t dxpl[2] = {w->dxpl, rows_only(&l) && !w->fletcher32 ? w->dxpl_ind : -1};
        if (move_block(ds, &l, &l.mine, data, write, true, dxpl, &part) < 0) {
            snprintf(msg, msglen, "cannot write tensor '%s'", name);
            st = MF_ERR_IO;
        }
        mf_status cs = sum_checksum(part, &sum);   /* collective: every rank, failed or not */
        if (st == MF_OK) st = cs;
        char sb[96], pl[256];
        mfi_h5_set_str(ds, "sbp", mf_nd_sbp_str(&l.sbp, sb, sizeof sb));
        mfi_h5_set_str(ds, "placement", mf_placement_str(l.p, pl, sizeof pl));
        mfi_h5_set_i64(ds, "checksum", (int64_t)sum);
        H5Dclose(ds);
    }
    mf_tensor_destroy(src);
    mf_placement_destroy(l.owned);
    return st;
}

/* State k of parameter i as a global tensor around the local piece,
 * laid out like the parameter (or S(0) under ZeRO-1); NULL if the optimizer does
 * not use it or has not stepped yet (the same on every rank). */
static mf_tensor *state_view(mf_optim *o, int i, int k, bool create)
{
    if (!o->uses[k] || !o->state_names[k]) return NULL;
    mfi_opt_param *pp = &o->params[i];
    mf_tensor *piece = mfi_local(pp->p);
    if (piece && !pp->state[k] && create) pp->state[k] = mfi_optim_state_new(o, i);
    if (!pp->p->global) return pp->state[k] ? mf_tensor_retain(pp->state[k]) : NULL;
    mfi_meta gm;
    mfi_meta_of(pp->p, &gm);
    mf_tensor *st = piece ? pp->state[k] : NULL;
    if (piece && !st) return NULL;
    mf_nd_sbp sbp = mfi_optim_state_sbp(o, i);   /* S(0) under ZeRO-1 */
    return mfi_global_wrap(mf_tensor_retain(st), pp->p->global->placement, &sbp, &gm, false);
}

static void optim_attrs(hid_t g, const mf_optim *o)
{
    mfi_h5_set_str(g, "type", o->type);
    mfi_h5_set_i64(g, "step", o->steps);
    const char *names[8];
    double vals[8];
    int n = 0;
    names[n] = "lr", vals[n++] = o->lr;
    if (!strcmp(o->type, "sgd")) {
        names[n] = "momentum", vals[n++] = o->h.sgd.momentum;
        names[n] = "weight_decay", vals[n++] = o->h.sgd.weight_decay;
    } else if (!strcmp(o->type, "rmsprop")) {
        names[n] = "alpha", vals[n++] = o->h.rms.alpha;
        names[n] = "eps", vals[n++] = o->h.rms.eps;
        names[n] = "momentum", vals[n++] = o->h.rms.momentum;
        names[n] = "weight_decay", vals[n++] = o->h.rms.weight_decay;
    } else {
        names[n] = "beta1", vals[n++] = o->h.adam.beta1;
        names[n] = "beta2", vals[n++] = o->h.adam.beta2;
        names[n] = "eps", vals[n++] = o->h.adam.eps;
        names[n] = "weight_decay", vals[n++] = o->h.adam.weight_decay;
    }
    for (int i = 0; i < n; i++) mfi_h5_set_f64(g, names[i], vals[i]);
}

static mf_status write_optim(const writer *w, hid_t file, mf_optim *o)
{
    hid_t g = H5Gcreate2(file, "optim", H5P_DEFAULT, w->gcpl, H5P_DEFAULT);
    if (g < 0) {
        snprintf(w->msg, w->msglen, "cannot create /optim");
        return MF_ERR_IO;
    }
    optim_attrs(g, o);
    mf_status st = MF_OK;
    for (int i = 0; i < o->n && st == MF_OK; i++) {
        hid_t pg = -1;
        for (int k = 0; k < o->nstate && st == MF_OK; k++) {
            mf_tensor *t = o->steps > 0 ? state_view(o, i, k, true) : NULL;
            if (!t) continue;
            if (pg < 0) pg = H5Gcreate2(g, o->params[i].name, H5P_DEFAULT, w->gcpl, H5P_DEFAULT);
            st = write_tensor(w, pg, o->state_names[k], t);
            mf_tensor_destroy(t);
        }
        if (pg >= 0) H5Gclose(pg);
    }
    H5Gclose(g);
    return st;
}

/* PATH -> PATH.1 -> ... -> PATH.<keep-1>; the oldest goes */
static void rotate(const char *path, int keep)
{
    char from[4200], to[4200];
    for (int i = keep - 1; i >= 1; i--) {
        if (i == 1) snprintf(from, sizeof from, "%s", path);
        else snprintf(from, sizeof from, "%s.%d", path, i - 1);
        snprintf(to, sizeof to, "%s.%d", path, i);
        if (access(from, F_OK) == 0) rename(from, to);
    }
}

mf_status mf_ckpt_save(const char *path, mf_module *model, mf_optim *optim, const mf_train_state *state)
{
    return mf_ckpt_save_ex(path, model, optim, state, NULL);
}

mf_status mf_ckpt_save_ex(const char *path, mf_module *model, mf_optim *optim, const mf_train_state *state,
                          const mf_ckpt_opts *opts)
{
    if (!path || !model) MF_FAIL(MF_ERR_ARG, "mf_ckpt_save: path or model is NULL");
    int keep_last = opts && opts->keep_last ? opts->keep_last : 1;
    if (keep_last < 1) MF_FAIL(MF_ERR_ARG, "mf_ckpt_save: keep_last %d must be >= 1", keep_last);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    char tmp[4096], msg[4608] = "";
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    mf_tensor_list *sd = mf_module_state_dict(model);
    if (!sd) return mf_last_status();
    mf_status st = MF_OK;
    writer w = {H5Pcreate(H5P_DATASET_XFER), H5Pcreate(H5P_DATASET_XFER), H5Pcreate(H5P_GROUP_CREATE),
                opts && opts->fletcher32, msg, sizeof msg};
    H5Pset_dxpl_mpio(w.dxpl, H5FD_MPIO_COLLECTIVE);
    H5Pset_dxpl_mpio(w.dxpl_ind, H5FD_MPIO_INDEPENDENT);
    /* groups and the root keep the order of writing (the state_dict's) */
    H5Pset_link_creation_order(w.gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
    H5Pset_attr_creation_order(w.gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
    hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
    H5Pset_link_creation_order(fcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
    H5Pset_attr_creation_order(fcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
    hid_t fapl = open_fapl(), file = -1;
    if (fapl >= 0) file = H5Fcreate(tmp, H5F_ACC_TRUNC, fcpl, fapl);
    H5Pclose(fcpl);
    if (file < 0) {
        snprintf(msg, sizeof msg, "cannot create %s: %s", tmp,
                 access(tmp, F_OK) == 0 || errno != ENOENT ? "not writable" : "the directory does not exist or is not writable");
        st = MF_ERR_IO;
    }
    if (st == MF_OK) {
        mf_train_state zero = {0, 0, 0, 0};
        const mf_train_state *s = state ? state : &zero;
        char created[64];
        time_t now = time(NULL);
        strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
        mfi_bcast(mfi_comm_world(), created, sizeof created / 4, MF_I32, 0);   /* one timestamp */
        mfi_h5_set_str(file, "format", FORMAT_NAME);
        mfi_h5_set_i64(file, "version", FORMAT_VERSION);
        mfi_h5_set_i64(file, "step", s->step);
        mfi_h5_set_i64(file, "epoch", s->epoch);
        mfi_h5_set_i64(file, "world_size", mf_world_size());
        mfi_h5_set_i64(file, "seed", (int64_t)s->seed);
        mfi_h5_set_i64(file, "rng_draws", (int64_t)mf_rng_draws());
        mfi_h5_set_str(file, "created", created);
        hid_t data = H5Gcreate2(file, "data", H5P_DEFAULT, w.gcpl, H5P_DEFAULT);
        mfi_h5_set_i64(data, "epoch", s->epoch);
        mfi_h5_set_i64(data, "cursor", s->cursor);
        H5Gclose(data);
        hid_t g = H5Gcreate2(file, "model", H5P_DEFAULT, w.gcpl, H5P_DEFAULT);
        for (int i = 0; i < sd->n && st == MF_OK; i++) st = write_tensor(&w, g, sd->items[i].name, sd->items[i].tensor);
        H5Gclose(g);
        if (st == MF_OK && optim) st = write_optim(&w, file, optim);
    }
    if (file >= 0 && H5Fclose(file) < 0 && st == MF_OK) {
        snprintf(msg, sizeof msg, "cannot finish writing %s", tmp);
        st = MF_ERR_IO;
    }
    if (fapl >= 0) H5Pclose(fapl);
    H5Pclose(w.dxpl);
    H5Pclose(w.dxpl_ind);
    H5Pclose(w.gcpl);
    mf_tensor_list_destroy(sd);
    if (st != MF_OK && msg[0]) mfi_error(st, "mf_ckpt_save: %s", msg);
    st = mf_agree(st);
    mfi_comm_barrier();
    if (mf_rank() == 0) {
        /* only now, with every rank done, does the file take its name */
        if (st == MF_OK && keep_last > 1) rotate(path, keep_last);
        if (st == MF_OK && rename(tmp, path) != 0)
            st = mfi_error(MF_ERR_IO, "mf_ckpt_save: cannot rename %s to %s: %s", tmp, path, strerror(errno));
        if (st != MF_OK) remove(tmp);
    }
    st = mf_agree(st);
    mfi_comm_barrier();
    return st;
}

/* ---------------------------------------------------------------- load */
typedef struct pending {
    mf_tensor *dst;        /* this rank's piece to overwrite (NULL outside) */
    mf_tensor *buf;        /* what was read */
} pending;

/* Reads dataset `name` for t into *buf (this rank's block of t's current
 * layout); fills msg and returns an error when the dataset does not fit. */
static mf_status read_tensor(hid_t root, const hid_t *dxpl, const char *file, const char *name, mf_tensor *t, pending *pd,
                             char *msg, size_t msglen)
{
    layout l;
    MF_TRY(layout_of(t, &l));
    mf_status st = MF_OK;
    char want[128], got[128];
    hid_t ds = H5Lexists(root, name, H5P_DEFAULT) > 0 ? H5Dopen2(root, name, H5P_DEFAULT) : -1;
    if (ds < 0) {
        snprintf(msg, msglen, "%s: tensor '%s' is missing (the model has it, the checkpoint does not)", file, name);
        st = MF_ERR_FORMAT;
        goto out;
    }
    hid_t fs = H5Dget_space(ds), ft = H5Dget_type(ds);
    hsize_t dims[MF_MAX_DIMS];
    int nd = H5Sget_simple_extent_ndims(fs);
    bool shape_ok = nd == l.gm.ndim && nd >= 0 && nd <= MF_MAX_DIMS;
    if (shape_ok) H5Sget_simple_extent_dims(fs, dims, NULL);
    int64_t fshape[MF_MAX_DIMS];
    for (int i = 0; shape_ok && i < nd; i++) {
        fshape[i] = (int64_t)dims[i];
        shape_ok = fshape[i] == l.gm.shape[i];
    }
    bool type_ok = H5Tget_class(ft) == H5Tget_class(mfi_h5_file_type(l.gm.dtype)) && H5Tget_size(ft) == mf_dtype_size(l.gm.dtype);
    if (!shape_ok) {
        snprintf(msg, msglen, "%s: tensor '%s' has shape %s in the checkpoint but %s in the model", file, name,
                 nd >= 0 && nd <= MF_MAX_DIMS ? mfi_shape_str(nd, fshape, got, sizeof got) : "(unreadable)",
                 mfi_shape_str(l.gm.ndim, l.gm.shape, want, sizeof want));
        st = MF_ERR_SHAPE;
    } else if (!type_ok) {
        snprintf(msg, msglen, "%s: tensor '%s' has another dtype in the checkpoint than the model's %s", file, name,
                 mf_dtype_name(l.gm.dtype));
        st = MF_ERR_DTYPE;
    }
    /* every rank reads (collectively) its block; P dimensions: the value
     * goes to coordinate 0, zeros elsewhere */
    bool zero = false;
    for (int d = 0; l.holds && d < l.sbp.ndim; d++)
        if (l.sbp.d[d].kind == MF_SBP_P && l.p->coord[d] != 0) zero = true;
    bool read = st == MF_OK && l.holds;
    if (read) {
        pd->buf = mfi_tensor_new_on(MF_DEV_CPU, l.gm.dtype, l.gm.ndim, l.box.count);
        if (!pd->buf) read = false;
    }
    /* every rank reads its block (collectively, or independently for
     * rows_only tensors) and the checksum over a partition of the tensor */
    hid_t dcpl = H5Dget_create_plist(ds);
    bool chunked = H5Pget_layout(dcpl) != H5D_CONTIGUOUS;   /* (--fletcher32): read whole chunks, once */
    H5Pclose(dcpl);
    const hid_t dx[2] = {dxpl[0], rows_only(&l) && !chunked ? dxpl[1] : -1};
    uint64_t part = 0, sum = 0;
    herr_t r = move_block(ds, &l, &l.box, read ? mf_tensor_data(pd->buf) : NULL, read, false, dx, &part);
    if (r < 0 && st == MF_OK) {
        snprintf(msg, msglen, "%s: cannot read tensor '%s' (the file is truncated, or a Fletcher32 check failed)", file, name);
        st = MF_ERR_IO;
    }
    int64_t want_sum = 0;
    mf_status cs = sum_checksum(part, &sum);
    if (cs != MF_OK) st = cs;
    else if (st == MF_OK && mfi_h5_get_i64(ds, "checksum", &want_sum) && (uint64_t)want_sum != sum) {
        snprintf(msg, msglen, "%s: tensor '%s' fails its checksum (stored %016llx, read %016llx): the file is damaged",
                 file, name, (unsigned long long)want_sum, (unsigned long long)sum);
        st = MF_ERR_FORMAT;
    }
    if (read && zero) mf_fill_(pd->buf, 0.0);
    pd->dst = l.holds ? mfi_local(t) : NULL;
    H5Tclose(ft);
    H5Sclose(fs);
    H5Dclose(ds);
out:
    mf_placement_destroy(l.owned);
    return st;
}

/* dst takes what was read: the buffer's storage itself when nothing else
 * shares dst's (no copy; the version bump marks the in-place write), a
 * copy otherwise. */
static mf_status adopt(mf_tensor *dst, mf_tensor *buf)
{
    mfi_storage *a = dst->storage, *b = buf->storage;
    if (a->refcount == 1 && b->refcount == 1 && dst->offset == 0 && buf->offset == 0 && a->nbytes == b->nbytes &&
        a->device == b->device && dst->dtype == buf->dtype && mf_tensor_is_contiguous(dst) &&
        mf_tensor_is_contiguous(buf)) {
        uint32_t v = a->version + 1;
        dst->storage = b;
        buf->storage = a;
        b->version = v;
        return MF_OK;
    }
    if (a->device != b->device) {   /* read into host memory, for a device tensor */
        mf_status st = mfi_copy_across(dst, buf);
        if (st == MF_OK) mfi_bump_version(dst);
        return st;
    }
    return mf_copy_(dst, buf);
}

/* Reads /optim into pending entries after the model's (n of them). */
static mf_status read_optim(hid_t file, const hid_t *dxpl, const char *path, mf_optim *o, pending *pd, int *n, int64_t *steps,
                            char *msg, size_t msglen)
{
    hid_t g = H5Lexists(file, "optim", H5P_DEFAULT) > 0 ? H5Gopen2(file, "optim", H5P_DEFAULT) : -1;
    if (g < 0) {
        snprintf(msg, msglen, "%s: no optimizer state (/optim) to resume %s from", path, o->type);
        return MF_ERR_FORMAT;
    }
    char type[32];
    mf_status st = MF_OK;
    if (!mfi_h5_get_str(g, "type", type, sizeof type) || strcmp(type, o->type)) {
        snprintf(msg, msglen, "%s: the optimizer is %s in the checkpoint but %s in this run", path, type, o->type);
        st = MF_ERR_FORMAT;
    }
    if (st == MF_OK && !mfi_h5_get_i64(g, "step", steps)) *steps = 0;
    for (int i = 0; i < o->n && st == MF_OK && *steps > 0; i++)
        for (int k = 0; k < o->nstate && st == MF_OK; k++) {
            mf_tensor *t = state_view(o, i, k, true);
            if (!t) continue;
            char name[512];
            snprintf(name, sizeof name, "optim/%s/%s", o->params[i].name, o->state_names[k]);
            st = read_tensor(file, dxpl, path, name, t, &pd[(*n)++], msg, msglen);
            mf_tensor_destroy(t);
        }
    H5Gclose(g);
    return st;
}

mf_status mf_ckpt_load(const char *path, mf_module *model, mf_optim *optim, mf_train_state *state)
{
    if (!path || !model) MF_FAIL(MF_ERR_ARG, "mf_ckpt_load: path or model is NULL");
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    char msg[768] = "";
    mf_status st = MF_OK;
    /* plain checks on rank 0 first, for clear messages */
    if (mf_rank() == 0) {
        if (access(path, R_OK) != 0) {
            snprintf(msg, sizeof msg, "%s: cannot read the checkpoint: %s", path, strerror(errno));
            st = MF_ERR_IO;
        } else if (H5Fis_hdf5(path) <= 0) {
            snprintf(msg, sizeof msg, "%s: not an HDF5 file (or truncated before its superblock)", path);
            st = MF_ERR_FORMAT;
        }
        if (st != MF_OK) mfi_error(st, "mf_ckpt_load: %s", msg);
    }
    MF_TRY(mf_agree(st));
    mf_tensor_list *sd = mf_module_state_dict(model);
    if (!sd) return mf_last_status();
    int npd = sd->n, nstates = optim ? optim->n * MFI_OPT_MAX_STATE : 0;
    pending *pd = calloc((size_t)(sd->n + nstates) + 1, sizeof *pd);
    hid_t fapl = open_fapl(), file = -1, dxpl[2] = {H5Pcreate(H5P_DATASET_XFER), H5Pcreate(H5P_DATASET_XFER)};
    H5Pset_dxpl_mpio(dxpl[0], H5FD_MPIO_COLLECTIVE);   /* [rows_only(...)] */
    H5Pset_dxpl_mpio(dxpl[1], H5FD_MPIO_INDEPENDENT);
    if (!pd) st = MF_ERR_NOMEM;
    if (st == MF_OK && fapl >= 0) file = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    if (st == MF_OK && file < 0) {
        snprintf(msg, sizeof msg, "%s: cannot open the HDF5 file (damaged or truncated)", path);
        st = MF_ERR_FORMAT;
    }
    char fmt[64];
    int64_t version = 0;
    if (st == MF_OK && (!mfi_h5_get_str(file, "format", fmt, sizeof fmt) || strcmp(fmt, FORMAT_NAME))) {
        snprintf(msg, sizeof msg, "%s: the format attribute is '%s', not '%s': not an mpiflow checkpoint", path, fmt,
                 FORMAT_NAME);
        st = MF_ERR_FORMAT;
    } else if (st == MF_OK && (!mfi_h5_get_i64(file, "version", &version) || version != FORMAT_VERSION)) {
        snprintf(msg, sizeof msg, "%s: checkpoint version %lld; this mpiflow reads version %d", path, (long long)version,
                 FORMAT_VERSION);
        st = MF_ERR_FORMAT;
    }
    hid_t g = st == MF_OK ? H5Gopen2(file, "model", H5P_DEFAULT) : -1;
    if (st == MF_OK && g < 0) {
        snprintf(msg, sizeof msg, "%s: no /model group", path);
        st = MF_ERR_FORMAT;
    }
    /* read everything (collective: every rank reads every tensor, and a
     * failing one still takes part in the others' collectives) */
    for (int i = 0; i < sd->n && g >= 0; i++) {
        char m[768] = "";
        mf_status s = read_tensor(g, dxpl, path, sd->items[i].name, sd->items[i].tensor, &pd[i], m, sizeof m);
        if (s != MF_OK && st == MF_OK) {
            st = s;
            snprintf(msg, sizeof msg, "%s", m[0] ? m : mf_last_error());
        }
    }
    if (g >= 0) H5Gclose(g);
    int64_t opt_steps = 0;
    if (st == MF_OK && optim) {
        char m[768] = "";
        st = read_optim(file, dxpl, path, optim, pd, &npd, &opt_steps, m, sizeof m);
        if (st != MF_OK) snprintf(msg, sizeof msg, "%s", m[0] ? m : mf_last_error());
    }
    mf_train_state ts = {0, 0, 0, 0};
    int64_t draws = -1;
    if (st == MF_OK) {
        int64_t seed = 0;
        mfi_h5_get_i64(file, "rng_draws", &draws);
        mfi_h5_get_i64(file, "step", &ts.step);
        mfi_h5_get_i64(file, "seed", &seed);
        ts.seed = (uint64_t)seed;
        hid_t data = H5Gopen2(file, "data", H5P_DEFAULT);
        if (data >= 0) {
            mfi_h5_get_i64(data, "epoch", &ts.epoch);
            mfi_h5_get_i64(data, "cursor", &ts.cursor);
            H5Gclose(data);
        }
    }
    if (file >= 0) H5Fclose(file);
    if (fapl >= 0) H5Pclose(fapl);
    H5Pclose(dxpl[0]);
    H5Pclose(dxpl[1]);
    if (st != MF_OK && msg[0]) mfi_error(st, "mf_ckpt_load: %s", msg);
    st = mf_agree(st);
    /* every check passed everywhere: now overwrite the model */
    for (int i = 0; pd && i < npd; i++) {
        if (st == MF_OK && pd[i].dst && pd[i].buf) {
            mf_status s = adopt(pd[i].dst, pd[i].buf);
            if (s != MF_OK) st = s;
        }
        mf_tensor_destroy(pd[i].buf);
    }
    free(pd);
    mf_tensor_list_destroy(sd);
    if (st == MF_OK && optim) {   /* PyTorch keeps a step per parameter; ours all advance together */
        optim->steps = opt_steps;
        for (int i = 0; i < optim->n; i++) optim->params[i].step = opt_steps;
    }
    if (st == MF_OK && state) {
        *state = ts;
        if (draws >= 0) mf_rng_set_draws((uint64_t)draws);   /* the resumed run draws what the saved one would */
    }
    return mf_agree(st);
}
