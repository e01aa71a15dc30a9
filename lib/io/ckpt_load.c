/*
 * lib/io/ckpt_load.c - loading a parallel-HDF5 checkpoint into a model
 * and optimizer of any layout (doc/checkpoints.md; include/mpiflow/ckpt.h).
 *
 * Each rank reads the block its current placement and SBP need. Before
 * anything in the model changes, the file passes the checks that
 * mpiflow-ckpt verify makes (ckpt_check.c): every attribute present and
 * in range, every tensor's sbp, placement and checksum, and the shapes
 * and dtypes against the model's. Every rank makes every collective call
 * whatever it found, and the verdict is agreed, so a bad file gives the
 * same error on every rank and leaves the model as it was.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "lib/io/ckpt_internal.h"

typedef struct pending {
    mf_tensor *dst;        /* this rank's piece to overwrite (NULL outside) */
    mf_tensor *buf;        /* what was read */
} pending;

/* Reads dataset `name` for t into *buf (this rank's block of t's current
 * layout); fills msg and returns an error when the dataset does not fit. */
static mf_status read_tensor(hid_t root, const hid_t *dxpl, const char *file, const mfi_ckpt_header *h,
                             const char *name, mf_tensor *t, pending *pd, char *msg, size_t msglen)
{
    mfi_ckpt_layout l;
    MF_TRY(mfi_ckpt_layout_of(t, &l));
    mf_status st = MF_OK;
    char want[128], got[128];
    hid_t ds = H5Lexists(root, name, H5P_DEFAULT) > 0 ? H5Dopen2(root, name, H5P_DEFAULT) : -1;
    if (ds < 0) {
        snprintf(msg, msglen, "%s: tensor '%s' is missing (the model has it, the checkpoint does not)", file, name);
        st = MF_ERR_FORMAT;
        goto out;
    }
    int tok = mfi_ckpt_io_enter("reading", name, file);
    hid_t fs = H5Dget_space(ds), ft = H5Dget_type(ds);
    hsize_t dims[MF_MAX_DIMS];
    int nd = H5Sget_simple_extent_ndims(fs);
    bool readable = nd >= 0 && nd <= MF_MAX_DIMS, shape_ok = readable && nd == l.gm.ndim;
    if (readable) H5Sget_simple_extent_dims(fs, dims, NULL);
    int64_t fshape[MF_MAX_DIMS];
    for (int i = 0; readable && i < nd; i++) fshape[i] = (int64_t)dims[i];
    for (int i = 0; shape_ok && i < nd; i++) shape_ok = fshape[i] == l.gm.shape[i];
    bool type_ok = H5Tget_class(ft) == H5Tget_class(mfi_h5_file_type(l.gm.dtype)) && H5Tget_size(ft) == mf_dtype_size(l.gm.dtype);
    if (!shape_ok) {
        /* the same elements with the leading axes merged: GPT's c_attn as it was stored before [3, C, C] */
        bool merged = readable && nd == l.gm.ndim - 1 && nd >= 1;
        for (int i = 1; merged && i < nd; i++) merged = fshape[i] == l.gm.shape[i + 1];
        merged = merged && fshape[0] == l.gm.shape[0] * l.gm.shape[1];
        snprintf(msg, msglen, "%s: tensor '%s' has shape %s in the checkpoint but %s in the model%s", file, name,
                 readable ? mfi_shape_str(nd, fshape, got, sizeof got) : "(unreadable)",
                 mfi_shape_str(l.gm.ndim, l.gm.shape, want, sizeof want),
                 merged ? " (the same values in an older layout: convert the weights with mpiflow-ckpt export FILE "
                          "W.safetensors, then mpiflow-ckpt import W.safetensors NEW.h5; doc/gpt.md)" : "");
        st = MF_ERR_SHAPE;
    } else if (!type_ok) {
        snprintf(msg, msglen, "%s: tensor '%s' has another dtype in the checkpoint than the model's %s", file, name,
                 mf_dtype_name(l.gm.dtype));
        st = MF_ERR_DTYPE;
    }
    bool has_sum = false;
    uint64_t want_sum = 0;
    if (st == MF_OK && mfi_ckpt_check_dataset(ds, file, name, nd, h, &has_sum, &want_sum) != MF_OK) {
        snprintf(msg, msglen, "%s", mf_last_error());
        st = MF_ERR_FORMAT;
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
    const hid_t dx[2] = {dxpl[0], mfi_ckpt_rows_only(&l) && !chunked ? dxpl[1] : -1};
    uint64_t part = 0, sum = 0;
    char why[256];
    herr_t r = mfi_ckpt_move_block(ds, &l, &l.box, read ? mf_tensor_data(pd->buf) : NULL, read, false, dx, &part, why,
                                   sizeof why);
    if (r < 0 && st == MF_OK) {
        snprintf(msg, msglen, "%s: cannot read tensor '%s' (the file is truncated, or a Fletcher32 check failed: %s)",
                 file, name, why);
        st = MF_ERR_IO;
    }
    bool any = false;
    mf_status cs = mfi_ckpt_sum_checksum(part, st != MF_OK, &sum, &any);
    if (cs != MF_OK) st = cs;
    else if (st == MF_OK && has_sum && want_sum != sum) {
        snprintf(msg, msglen, "%s: tensor '%s' fails its checksum (stored %016llx, read %016llx): the file is damaged",
                 file, name, (unsigned long long)want_sum, (unsigned long long)sum);
        st = MF_ERR_FORMAT;
    }
    if (read && zero) mf_fill_(pd->buf, 0.0);
    pd->dst = l.holds ? mfi_local(t) : NULL;
    H5Tclose(ft);
    H5Sclose(fs);
    H5Dclose(ds);
    mfi_ckpt_io_leave(tok);
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

/* Reads /optim into pending entries after the model's (n of them);
 * every rank reads every state, whatever failed. */
static mf_status read_optim(hid_t file, const hid_t *dxpl, const char *path, const mfi_ckpt_header *h, mf_optim *o,
                            pending *pd, int *n, int64_t *steps, char *msg, size_t msglen)
{
    if (!h->has_optim) {
        snprintf(msg, msglen, "%s: no optimizer state (/optim) to resume %s from", path, mf_optim_type(o));
        return MF_ERR_FORMAT;
    }
    if (strcmp(h->optim_type, mf_optim_type(o))) {
        snprintf(msg, msglen, "%s: the optimizer is %s in the checkpoint but %s in this run", path, h->optim_type,
                 mf_optim_type(o));
        return MF_ERR_FORMAT;
    }
    *steps = h->optim_step;
    mf_status st = MF_OK;
    for (int i = 0; i < mfi_optim_nparams(o) && *steps > 0; i++)
        for (int k = 0; k < mfi_optim_nstate(o); k++) {
            mf_tensor *t = mfi_optim_state_view(o, i, k, true);
            if (!t) continue;
            char name[512], m[768] = "";
            snprintf(name, sizeof name, "optim/%s/%s", mfi_optim_param_name(o, i), mfi_optim_state_name(o, k));
            mf_status s = read_tensor(file, dxpl, path, h, name, t, &pd[(*n)++], m, sizeof m);
            if (s != MF_OK && st == MF_OK) {
                st = s;
                snprintf(msg, msglen, "%s", m[0] ? m : mf_last_error());
            }
            mf_tensor_destroy(t);
        }
    return st;
}

/* Opens the file on every rank, after plain checks on rank 0 for clear
 * messages; the header's checks need no collective call. */
static mf_status open_checked(const char *path, hid_t fapl, mfi_ckpt_header *h, char *msg, size_t len, hid_t *out)
{
    mf_status st = MF_OK;
    *out = -1;
    if (mf_rank() == 0) {
        if (access(path, R_OK) != 0) {
            snprintf(msg, len, "%s: cannot read the checkpoint: %s", path, strerror(errno));
            st = MF_ERR_IO;
        } else if (H5Fis_hdf5(path) <= 0) {
            snprintf(msg, len, "%s: not an HDF5 file (or truncated before its superblock)", path);
            st = MF_ERR_FORMAT;
        }
        if (st != MF_OK) mfi_error(st, "mf_ckpt_load: %s", msg);
    }
    MF_TRY(mf_agree(st));
    int tok = mfi_ckpt_io_enter("opening", NULL, path);
    hid_t file = fapl >= 0 ? H5Fopen(path, H5F_ACC_RDONLY, fapl) : -1;
    mfi_ckpt_io_leave(tok);
    if (file < 0) {
        snprintf(msg, len, "%s: cannot open the HDF5 file (damaged or truncated)", path);
        st = MF_ERR_FORMAT;
    } else if (mfi_ckpt_check_header(file, path, h) != MF_OK) {
        snprintf(msg, len, "%s", mf_last_error());
        st = MF_ERR_FORMAT;
    } else if (H5Lexists(file, "model", H5P_DEFAULT) <= 0) {
        snprintf(msg, len, "%s: no /model group", path);
        st = MF_ERR_FORMAT;
    }
    if (st != MF_OK) mfi_error(st, "mf_ckpt_load: %s", msg);
    st = mf_agree(st);
    if (st != MF_OK && file >= 0) H5Fclose(file);
    else *out = file;
    return st;
}

mf_status mf_ckpt_load(const char *path, mf_module *model, mf_optim *optim, mf_train_state *state)
{
    if (!path || !model) MF_FAIL(MF_ERR_ARG, "mf_ckpt_load: path or model is NULL");
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    char msg[768] = "";
    mfi_ckpt_header h;
    hid_t fapl = mfi_ckpt_open_fapl(), file = -1;
    mf_status st = open_checked(path, fapl, &h, msg, sizeof msg, &file);
    if (st != MF_OK) {
        if (fapl >= 0) H5Pclose(fapl);
        return st;
    }
    mf_tensor_list *sd = mf_module_state_dict(model);
    int npd = sd ? sd->n : 0, nstates = optim ? mfi_optim_nparams(optim) * mfi_optim_nstate(optim) : 0;
    pending *pd = calloc((size_t)(npd + nstates) + 1, sizeof *pd);
    hid_t dxpl[2] = {H5Pcreate(H5P_DATASET_XFER), H5Pcreate(H5P_DATASET_XFER)};
    H5Pset_dxpl_mpio(dxpl[0], H5FD_MPIO_COLLECTIVE);   /* [rows_only(...)] */
    H5Pset_dxpl_mpio(dxpl[1], H5FD_MPIO_INDEPENDENT);
    if (!sd || !pd) st = mfi_error(MF_ERR_NOMEM, "mf_ckpt_load: out of memory");
    st = mf_agree(st);
    hid_t g = st == MF_OK ? H5Gopen2(file, "model", H5P_DEFAULT) : -1;
    /* read everything (collective: every rank reads every tensor, and a
     * failing one still takes part in the others' collectives) */
    mf_status local = MF_OK;
    for (int i = 0; st == MF_OK && i < sd->n; i++) {
        char m[768] = "";
        mf_status s = read_tensor(g, dxpl, path, &h, sd->items[i].name, sd->items[i].tensor, &pd[i], m, sizeof m);
        if (s != MF_OK && local == MF_OK) {
            local = s;
            snprintf(msg, sizeof msg, "%s", m[0] ? m : mf_last_error());
        }
    }
    if (g >= 0) H5Gclose(g);
    if (local != MF_OK) mfi_error(local, "mf_ckpt_load: %s", msg);
    if (st == MF_OK) st = mf_agree(local);   /* the same on every rank before /optim */
    int64_t opt_steps = 0;
    if (st == MF_OK && optim) {
        st = read_optim(file, dxpl, path, &h, optim, pd, &npd, &opt_steps, msg, sizeof msg);
        if (st != MF_OK) mfi_error(st, "mf_ckpt_load: %s", msg);
        st = mf_agree(st);
    }
    H5Fclose(file);
    if (fapl >= 0) H5Pclose(fapl);
    H5Pclose(dxpl[0]);
    H5Pclose(dxpl[1]);
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
        mfi_optim_set_steps(optim, opt_steps);
    }
    if (st == MF_OK && state) {
        *state = (mf_train_state){h.step, h.data_epoch, h.cursor, (uint64_t)h.seed};
        mf_rng_set_draws((uint64_t)h.rng_draws);   /* the resumed run draws what the saved one would */
    }
    return mf_agree(st);
}
