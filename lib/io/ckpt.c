/*
 * lib/io/ckpt.c - writing parallel-HDF5 checkpoints of a model's
 * state_dict and the training state (doc/checkpoints.md;
 * include/mpiflow/ckpt.h). Reading them back: ckpt_load.c.
 *
 * A save never leaves a rank alone in a collective call: every rank
 * makes every HDF5 call, and whether any rank has failed is summed with
 * each tensor's checksum, so all ranks stop at the same tensor. A failed
 * save (a full disk, no permission) is reported on every rank with the
 * operating system's reason, its PATH.tmp is removed and an existing
 * PATH is left as it was. Before writing, rank 0 checks that the
 * directory has room for the file (MF_CKPT_SPACE_CHECK=0 skips it) and
 * sets aside room for the metadata HDF5 writes while closing.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>
#include "lib/io/ckpt_internal.h"

typedef struct writer {
    hid_t dxpl;         /* collective transfers */
    hid_t dxpl_ind;     /* independent ones, for rows_only tensors */
    hid_t gcpl;         /* groups that keep the order of writing */
    bool fletcher32;
    bool checksums;     /* a checksum attribute per tensor */
    const char *path;   /* PATH.tmp, for messages */
    char *msg;          /* this rank's first failure, for the message */
    size_t msglen;
} writer;

#define CHUNK_BYTES (4.0 * 1024 * 1024)

/* Contiguous, or with fletcher32 chunks that tile one writer's slice
 * (that of the first writer of the block at coordinate 0, the same on
 * every rank) under HDF5's Fletcher32 filter. */
static hid_t dataset_props(const writer *w, const mfi_ckpt_layout *l)
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

/* This rank's block of t, contiguous in host memory (P dimensions summed
 * first: each block then has one value); NULL with *st set when this
 * rank holds a block but could not get it (memory), else NULL or the block. */
static mf_tensor *block_to_write(mf_tensor *t, const mfi_ckpt_layout *l, mf_status *st)
{
    mf_tensor *src = NULL;
    bool partial = false;
    for (int d = 0; d < l->sbp.ndim; d++) partial |= l->sbp.d[d].kind == MF_SBP_P;
    if (partial) {   /* collective */
        mf_nd_sbp b = l->sbp;
        for (int d = 0; d < b.ndim; d++)
            if (b.d[d].kind == MF_SBP_P) b.d[d].kind = MF_SBP_B;
        bool prev = mf_set_grad_enabled(false);
        mf_tensor *r = mfi_redistribute(t, l->p, &b);
        mf_set_grad_enabled(prev);
        src = r && l->holds ? mfi_contiguous_raw(r->global->local) : NULL;
        mf_tensor_destroy(r);
    } else if (l->holds) {
        src = mfi_contiguous_raw(mfi_local(t));
    }
    if (src && mf_tensor_device(src) != MF_DEV_CPU) {   /* HDF5 writes host memory */
        mf_tensor *h = mfi_on_device(src, MF_DEV_CPU);
        mf_tensor_destroy(src);
        src = h;
    }
    *st = l->holds && !src ? mf_last_status() : MF_OK;
    return src;
}

/* Writes tensor t as dataset `name` of group. A failure on this rank (its
 * message in w->msg) still takes part in every collective call; *stop
 * tells every rank alike whether any rank failed. */
static mf_status write_tensor(const writer *w, hid_t group, const char *name, mf_tensor *t, bool *stop)
{
    mfi_ckpt_layout l;
    *stop = true;
    MF_TRY(mfi_ckpt_layout_of(t, &l));
    int tok = mfi_ckpt_io_enter("writing", name, w->path);
    mf_status st = MF_OK;
    mf_tensor *src = block_to_write(t, &l, &st);
    if (st != MF_OK) snprintf(w->msg, w->msglen, "tensor '%s': %s", name, mf_last_error());
    bool write = l.writes && src;
    uint64_t part = 0, sum = 0;
    hid_t fs = mfi_ckpt_file_space(&l.gm, &l.box, true);
    hid_t dcpl = dataset_props(w, &l);
    hid_t ds = H5Dcreate2(group, name, mfi_h5_file_type(l.gm.dtype), fs, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    if (ds < 0 && st == MF_OK) {
        char why[256];
        snprintf(w->msg, w->msglen, "cannot create dataset '%s' in %s: %s", name, w->path, mfi_h5_reason(why, sizeof why));
        st = MF_ERR_IO;
    }
    H5Pclose(dcpl);
    H5Sclose(fs);
    if (ds >= 0) {
        char *data = write ? (char *)mf_tensor_data(src) + (size_t)l.mine_off * mf_dtype_size(l.gm.dtype) : NULL;
        const hid_t dxpl[2] = {w->dxpl, mfi_ckpt_rows_only(&l) && !w->fletcher32 ? w->dxpl_ind : -1};
        char why[256];
        if (mfi_ckpt_move_block(ds, &l, &l.mine, data, write, true, dxpl, &part, why, sizeof why) < 0 && st == MF_OK) {
            snprintf(w->msg, w->msglen, "cannot write tensor '%s' to %s: %s", name, w->path, why);
            st = MF_ERR_IO;
        }
    }
    /* collective: every rank, failed or not */
    mf_status cs = mfi_ckpt_sum_checksum(part, st != MF_OK, &sum, stop);
    if (st == MF_OK && cs != MF_OK) {
        snprintf(w->msg, w->msglen, "%s", mf_last_error());
        st = cs;
    }
    if (ds >= 0 && !*stop) {
        char sb[96], pl[256];
        mfi_h5_set_str(ds, "sbp", mf_nd_sbp_str(&l.sbp, sb, sizeof sb));
        mfi_h5_set_str(ds, "placement", mf_placement_str(l.p, pl, sizeof pl));
        if (w->checksums) mfi_h5_set_i64(ds, "checksum", (int64_t)sum);
    }
    if (ds >= 0) H5Dclose(ds);
    mfi_ckpt_io_leave(tok);
    mf_tensor_destroy(src);
    mf_placement_destroy(l.owned);
    return st;
}

/* o's hyper-parameters, in mfi_ckpt_hyper_names' order; their count */
static int hyper_values(const mf_optim *o, double *v)
{
    return mfi_optim_hypers(o, mfi_ckpt_hyper_names(mf_optim_type(o)), v, MFI_CKPT_HYPER);
}

static void optim_attrs(hid_t g, const mf_optim *o)
{
    mfi_h5_set_str(g, "type", mf_optim_type(o));
    mfi_h5_set_i64(g, "step", mf_optim_steps(o));
    double v[MFI_CKPT_HYPER];
    const char *const *names = mfi_ckpt_hyper_names(mf_optim_type(o));
    for (int i = 0, n = hyper_values(o, v); i < n; i++) mfi_h5_set_f64(g, names[i], v[i]);
}

/* Writes /optim: attributes, and the state of every parameter once the
 * optimizer has stepped. *stop as for write_tensor. */
static mf_status write_optim(const writer *w, hid_t file, mf_optim *o, bool *stop)
{
    hid_t g = H5Gcreate2(file, "optim", H5P_DEFAULT, w->gcpl, H5P_DEFAULT);
    if (g < 0) {   /* collective metadata: the same on every rank */
        snprintf(w->msg, w->msglen, "cannot create /optim in %s", w->path);
        *stop = true;
        return MF_ERR_IO;
    }
    optim_attrs(g, o);
    mf_status st = MF_OK;
    for (int i = 0; i < mfi_optim_nparams(o) && !*stop; i++) {
        hid_t pg = -1;
        for (int k = 0; k < mfi_optim_nstate(o) && !*stop; k++) {
            mf_tensor *t = mf_optim_steps(o) > 0 ? mfi_optim_state_view(o, i, k, true) : NULL;
            if (!t) continue;
            if (pg < 0) pg = H5Gcreate2(g, mfi_optim_param_name(o, i), H5P_DEFAULT, w->gcpl, H5P_DEFAULT);
            mf_status s = write_tensor(w, pg, mfi_optim_state_name(o, k), t, stop);
            if (st == MF_OK) st = s;
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

/* The bytes of the checkpoint's tensors (model and optimizer state),
 * plus room for HDF5's metadata. */
static double bytes_needed(const mf_tensor_list *sd, const mf_optim *o)
{
    double b = 65536;
    for (int i = 0; i < sd->n; i++)
        b += 4096 + (double)mf_tensor_numel(sd->items[i].tensor) * (double)mf_dtype_size(sd->items[i].tensor->dtype);
    if (o && mf_optim_steps(o) > 0) {
        b += mfi_optim_state_bytes(o);
        for (int k = 0; k < mfi_optim_nstate(o); k++)
            if (mfi_optim_state_name(o, k)) b += 4096.0 * mfi_optim_nparams(o);
    }
    return b;
}

/* Rank 0: whether the directory of tmp has room for `need` bytes
 * (statvfs; MF_CKPT_SPACE_CHECK=0 trusts it has). */
static mf_status check_space(const char *tmp, double need, char *msg, size_t len)
{
    const char *e = getenv("MF_CKPT_SPACE_CHECK");
    if (e && !strcmp(e, "0")) return MF_OK;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", tmp);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
    struct statvfs sv;
    if (statvfs(dir, &sv) != 0) return MF_OK;   /* the create below says why */
    double avail = (double)sv.f_bavail * (double)sv.f_frsize;
    if (avail >= need) return MF_OK;
    snprintf(msg, len, "cannot write %.1500s: %s (the checkpoint needs about %.1f MiB; %.1500s has %.1f MiB free)", tmp,
             strerror(ENOSPC), need / 1048576, dir, avail / 1048576);
    return MF_ERR_IO;
}

/* Rank 0 sets aside `bytes` in PATH.tmp.reserve before the save, and
 * gives them back when it fails: HDF5's close still writes metadata,
 * and on a full disk a failed metadata write leaves the ranks out of
 * step inside HDF5 (and its file handle unusable). A disk too full for
 * the reserve fails the save before anything is written. */
static mf_status reserve_make(const char *tmp, double bytes, char *msg, size_t len)
{
    char path[4200];
    snprintf(path, sizeof path, "%s.reserve", tmp);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
        snprintf(msg, len, "cannot create %.3000s: %s", tmp, strerror(errno));
        return MF_ERR_IO;
    }
    int rc = posix_fallocate(fd, 0, (off_t)bytes);
    if (rc == EOPNOTSUPP || rc == EINVAL) {   /* a file system without it: zeros */
        static const char zeros[65536];
        rc = 0;
        for (double done = 0; done < bytes && rc == 0; done += sizeof zeros)
            if (write(fd, zeros, sizeof zeros) != (ssize_t)sizeof zeros) rc = errno ? errno : EIO;
    }
    if (close(fd) != 0 && rc == 0) rc = errno;
    if (rc == 0) return MF_OK;
    unlink(path);
    snprintf(msg, len, "cannot write %.3000s: %s", tmp, strerror(rc));
    return MF_ERR_IO;
}

static void reserve_drop(const char *tmp)
{
    char path[4200];
    snprintf(path, sizeof path, "%s.reserve", tmp);
    unlink(path);
}

/* What the root, /data and /optim will say (h) and its digest. */
static void header_of(mfi_ckpt_header *h, const writer *w, const mf_train_state *s, const mf_optim *o)
{
    char created[32] = "";
    time_t now = time(NULL);
    strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    mfi_bcast(mfi_comm_world(), created, sizeof created / 4, MF_I32, 0);   /* one timestamp */
    *h = (mfi_ckpt_header){.step = s->step, .epoch = s->epoch, .world_size = mf_world_size(), .seed = (int64_t)s->seed,
                           .rng_draws = (int64_t)mf_rng_draws(), .checksums = w->checksums,
                           .data_epoch = s->epoch, .cursor = s->cursor, .has_optim = o != NULL};
    memcpy(h->created, created, sizeof created);
    if (o) {
        snprintf(h->optim_type, sizeof h->optim_type, "%s", mf_optim_type(o));
        h->optim_step = mf_optim_steps(o);
        h->nhyper = hyper_values(o, h->hyper);
    }
    h->digest = mfi_ckpt_header_digest(h);
}

static void root_attrs(hid_t file, const writer *w, const mfi_ckpt_header *h)
{
    mfi_h5_set_str(file, "format", MFI_CKPT_FORMAT);
    mfi_h5_set_i64(file, "version", MFI_CKPT_VERSION);
    mfi_h5_set_i64(file, "step", h->step);
    mfi_h5_set_i64(file, "epoch", h->epoch);
    mfi_h5_set_i64(file, "world_size", h->world_size);
    mfi_h5_set_i64(file, "seed", h->seed);
    mfi_h5_set_i64(file, "rng_draws", h->rng_draws);
    mfi_h5_set_str(file, "created", h->created);
    mfi_h5_set_str(file, "checksums", h->checksums ? "mix64" : "none");
    mfi_h5_set_i64(file, "header_digest", (int64_t)h->digest);
    hid_t data = H5Gcreate2(file, "data", H5P_DEFAULT, w->gcpl, H5P_DEFAULT);
    mfi_h5_set_i64(data, "epoch", h->data_epoch);
    mfi_h5_set_i64(data, "cursor", h->cursor);
    H5Gclose(data);
}

/* Creates tmp on every rank, agreed: a failure anywhere closes it everywhere. */
static mf_status create_file(const char *tmp, hid_t fapl, char *msg, size_t len, hid_t *out)
{
    hid_t fcpl = H5Pcreate(H5P_FILE_CREATE);
    H5Pset_link_creation_order(fcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
    H5Pset_attr_creation_order(fcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
    int tok = mfi_ckpt_io_enter("creating", NULL, tmp);
    hid_t file = fapl >= 0 ? H5Fcreate(tmp, H5F_ACC_TRUNC, fcpl, fapl) : -1;
    char why[256];
    if (file < 0) mfi_h5_reason(why, sizeof why);   /* before the next call clears the error stack */
    mfi_ckpt_io_leave(tok);
    H5Pclose(fcpl);
    mf_status st = MF_OK;
    if (file < 0) {
        snprintf(msg, len, "cannot create %s: %s", tmp, why);
        st = MF_ERR_IO;
    }
    if (mf_agree(st) != MF_OK && file >= 0) {   /* the create failed on another rank */
        H5Fclose(file);
        file = -1;
    }
    *out = file;
    return file >= 0 ? MF_OK : st != MF_OK ? st : MF_ERR_REMOTE;
}

/* Closes the file on every rank; st is this rank's own failure so far
 * (MF_OK when only another rank failed). Rank 0 first gives back the
 * reserve, and after a failure anywhere empties PATH.tmp (truncate), so
 * that even a full disk has room for the metadata the close still
 * writes: HDF5 cannot be used again after a failed close. (An explicit
 * H5Fflush would find a failure sooner, but through MPI-IO it is an
 * fsync: 4x slower saves.) */
static mf_status close_file(hid_t file, const char *tmp, mf_status st, bool stop, char *msg, size_t len)
{
    char why[256];
    int tok = mfi_ckpt_io_enter("finishing", NULL, tmp);
    int failed[2] = {st != MF_OK || stop, 0};
    mfi_allreduce(mfi_comm_world(), failed, failed + 1, 1, MF_I32);
    if (mf_rank() == 0) {
        reserve_drop(tmp);
        if (failed[1] && truncate(tmp, 0) != 0) { /* the close reports what is wrong */ }
    }
    mfi_comm_barrier();
    if (H5Fclose(file) < 0 && st == MF_OK) {
        snprintf(msg, len, "cannot finish writing %s: %s", tmp, mfi_h5_reason(why, sizeof why));
        st = MF_ERR_IO;
    }
    mfi_ckpt_io_leave(tok);
    return st;
}

/* /model's attributes: what a reader needs to rebuild the model that the
 * shapes alone do not say (a GPT's head count) */
static void model_attrs(hid_t g, const mf_module *model)
{
    const mf_gpt_config *c = mf_gpt_config_of(model);
    if (!c) return;
    mfi_h5_set_str(g, "architecture", "gpt");
    mfi_h5_set_i64(g, "n_layer", c->n_layer);
    mfi_h5_set_i64(g, "n_head", c->n_head);
    mfi_h5_set_i64(g, "n_embd", c->n_embd);
    mfi_h5_set_i64(g, "seq_len", c->seq_len);
    mfi_h5_set_i64(g, "vocab_size", c->vocab_size);
    mfi_h5_set_f64(g, "dropout", c->dropout);
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
    if (mf_rank() == 0) st = check_space(tmp, bytes_needed(sd, optim), msg, sizeof msg);
    double reserve = 65536.0 + 4096.0 * (sd->n + (optim ? 2 * mfi_optim_nparams(optim) : 0));   /* HDF5's metadata */
    if (mf_rank() == 0 && st == MF_OK) st = reserve_make(tmp, reserve, msg, sizeof msg);
    if (st != MF_OK) mfi_error(st, "mf_ckpt_save: %s", msg);
    if (mf_agree(st) != MF_OK) {
        mf_tensor_list_destroy(sd);
        return mf_last_status();
    }
    writer w = {H5Pcreate(H5P_DATASET_XFER), H5Pcreate(H5P_DATASET_XFER), H5Pcreate(H5P_GROUP_CREATE),
                opts && opts->fletcher32, !(opts && opts->no_checksums), tmp, msg, sizeof msg};
    H5Pset_dxpl_mpio(w.dxpl, H5FD_MPIO_COLLECTIVE);
    H5Pset_dxpl_mpio(w.dxpl_ind, H5FD_MPIO_INDEPENDENT);
    /* groups and the root keep the order of writing (the state_dict's) */
    H5Pset_link_creation_order(w.gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
    H5Pset_attr_creation_order(w.gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
    hid_t fapl = mfi_ckpt_open_fapl(), file = -1;
    st = create_file(tmp, fapl, msg, sizeof msg, &file);
    if (st == MF_OK) {
        mf_train_state zero = {0, 0, 0, 0};
        mfi_ckpt_header h;
        header_of(&h, &w, state ? state : &zero, optim);
        root_attrs(file, &w, &h);
        hid_t g = H5Gcreate2(file, "model", H5P_DEFAULT, w.gcpl, H5P_DEFAULT);
        model_attrs(g, model);
        bool stop = false;
        for (int i = 0; i < sd->n && !stop; i++) {
            mf_status s = write_tensor(&w, g, sd->items[i].name, sd->items[i].tensor, &stop);
            if (st == MF_OK) st = s;
        }
        H5Gclose(g);
        if (optim && !stop) {
            mf_status s = write_optim(&w, file, optim, &stop);
            if (st == MF_OK) st = s;
        }
        st = close_file(file, tmp, st, stop, msg, sizeof msg);
    }
    if (fapl >= 0) H5Pclose(fapl);
    H5Pclose(w.dxpl);
    H5Pclose(w.dxpl_ind);
    H5Pclose(w.gcpl);
    mf_tensor_list_destroy(sd);
    if (st != MF_OK && msg[0]) mfi_error(st, "mf_ckpt_save: %s", msg);
    st = mf_agree(st == MF_ERR_REMOTE ? MF_OK : st);   /* a failed create elsewhere: its message comes */
    if (mf_rank() == 0) {
        reserve_drop(tmp);
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
