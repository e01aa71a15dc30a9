/*
 * lib/io/ckpt_file.c - reading a checkpoint on one process, for tools
 * (include/mpiflow/ckpt.h, mpiflow-ckpt). Plain serial HDF5: no MPI.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lib/internal.h"
#include "lib/io/ckpt_check.h"

#define SLAB_ELEMS (4 << 20)   /* elements read at once by verify */

struct mf_ckpt_file {
    char path[4096];
    hid_t file;
    mfi_ckpt_header h;       /* as read; valid when header_st is MF_OK */
    mf_status header_st;
    char header_msg[1024];   /* why the header fails its checks */
    int n, cap;
    mf_ckpt_entry *e;
};

static mf_status add_entry(mf_ckpt_file *f, hid_t ds, const char *name)
{
    if (f->n == f->cap) {
        int cap = f->cap ? 2 * f->cap : 32;
        mf_ckpt_entry *e = realloc(f->e, (size_t)cap * sizeof *e);
        if (!e) MF_FAIL(MF_ERR_NOMEM, "mf_ckpt_open: out of memory");
        f->e = e;
        f->cap = cap;
    }
    mf_ckpt_entry *e = &f->e[f->n];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", name);
    hid_t ft = H5Dget_type(ds), sp = H5Dget_space(ds);
    bool known = mfi_h5_dtype_of(ft, &e->dtype);
    int nd = H5Sget_simple_extent_ndims(sp);
    hsize_t dims[MF_MAX_DIMS];
    bool fits = nd >= 0 && nd <= MF_MAX_DIMS && H5Sget_simple_extent_type(sp) != H5S_NULL;
    if (fits) H5Sget_simple_extent_dims(sp, dims, NULL);
    H5Tclose(ft);
    H5Sclose(sp);
    if (!known) MF_FAIL(MF_ERR_FORMAT, "%s: dataset '%s' has a type mpiflow never writes", f->path, name);
    if (!fits) MF_FAIL(MF_ERR_FORMAT, "%s: dataset '%s' has an unreadable shape", f->path, name);
    e->ndim = nd;
    for (int i = 0; i < nd; i++) e->shape[i] = (int64_t)dims[i];
    mfi_h5_get_str(ds, "sbp", e->sbp, sizeof e->sbp);
    mfi_h5_get_str(ds, "placement", e->placement, sizeof e->placement);
    int64_t sum = 0;
    e->has_checksum = mfi_h5_get_i64(ds, "checksum", &sum);
    e->checksum = (uint64_t)sum;
    /* the loader's checks, kept for mf_ckpt_verify_entry */
    e->valid = f->header_st != MF_OK ||
               mfi_ckpt_check_dataset(ds, f->path, name, nd, &f->h, &e->has_checksum, &e->checksum) == MF_OK;
    if (!e->valid) snprintf(e->problem, sizeof e->problem, "%s", mf_last_error());
    mf_clear_error();
    f->n++;
    return MF_OK;
}

typedef struct walk {
    mf_ckpt_file *f;
    mf_status st;
} walk;

static herr_t visit(hid_t obj, const char *name, const H5O_info_t *info, void *data)
{
    walk *w = data;
    if (info->type != H5O_TYPE_DATASET) return 0;
    hid_t ds = H5Dopen2(obj, name, H5P_DEFAULT);
    w->st = ds < 0 ? mfi_error(MF_ERR_FORMAT, "%s: cannot open dataset '%s'", w->f->path, name)
                   : add_entry(w->f, ds, name);
    if (ds >= 0) H5Dclose(ds);
    return w->st == MF_OK ? 0 : 1;
}

mf_ckpt_file *mf_ckpt_open(const char *path)
{
    if (!path) {
        mfi_error(MF_ERR_ARG, "mf_ckpt_open: path is NULL");
        return NULL;
    }
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    FILE *probe = fopen(path, "rb");
    if (!probe) {
        mfi_error(MF_ERR_IO, "%s: cannot read the checkpoint: %s", path, strerror(errno));
        return NULL;
    }
    fclose(probe);
    if (H5Fis_hdf5(path) <= 0) {
        mfi_error(MF_ERR_FORMAT, "%s: not an HDF5 file (or truncated before its superblock)", path);
        return NULL;
    }
    mf_ckpt_file *f = calloc(1, sizeof *f);
    if (!f) {
        mfi_error(MF_ERR_NOMEM, "mf_ckpt_open: out of memory");
        return NULL;
    }
    snprintf(f->path, sizeof f->path, "%s", path);
    f->file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    char fmt[64] = "";
    int64_t version = 0;
    mf_status st = MF_OK;
    if (f->file < 0)
        st = mfi_error(MF_ERR_FORMAT, "%s: cannot open the HDF5 file (damaged or truncated)", path);
    else if (!mfi_h5_get_str(f->file, "format", fmt, sizeof fmt) || strcmp(fmt, MFI_CKPT_FORMAT))
        st = mfi_error(MF_ERR_FORMAT, "%s: the format attribute is '%s', not '%s': not an mpiflow checkpoint", path,
                       fmt, MFI_CKPT_FORMAT);
    else if (!mfi_h5_get_i64(f->file, "version", &version) || version != MFI_CKPT_VERSION)
        st = mfi_error(MF_ERR_FORMAT, "%s: checkpoint version %lld; this mpiflow reads version %d", path,
                       (long long)version, MFI_CKPT_VERSION);
    if (st == MF_OK) {
        /* the rest of the header is checked, not required: list and
         * stats still show a damaged file; mf_ckpt_check says */
        f->header_st = mfi_ckpt_check_header(f->file, path, &f->h);
        if (f->header_st != MF_OK) snprintf(f->header_msg, sizeof f->header_msg, "%s", mf_last_error());
        mf_clear_error();
    }
    if (st == MF_OK) {
        /* the order of writing when the file tracks it, else by name */
        walk w = {f, MF_OK};
        herr_t r = H5Ovisit2(f->file, H5_INDEX_CRT_ORDER, H5_ITER_INC, visit, &w, H5O_INFO_BASIC);
        if (r < 0 && w.st == MF_OK) {
            f->n = 0;
            r = H5Ovisit2(f->file, H5_INDEX_NAME, H5_ITER_INC, visit, &w, H5O_INFO_BASIC);
        }
        st = w.st != MF_OK ? w.st : r < 0 ? mfi_error(MF_ERR_FORMAT, "%s: cannot list the datasets", path) : MF_OK;
    }
    if (st != MF_OK) {
        mf_ckpt_close(f);
        return NULL;
    }
    return f;
}

mf_status mf_ckpt_check(const mf_ckpt_file *f)
{
    if (!f) MF_FAIL(MF_ERR_ARG, "mf_ckpt_check: the file is NULL");
    if (f->header_st != MF_OK) MF_FAIL(f->header_st, "%s", f->header_msg);
    return MF_OK;
}

void mf_ckpt_close(mf_ckpt_file *f)
{
    if (!f) return;
    if (f->file >= 0) H5Fclose(f->file);
    free(f->e);
    free(f);
}

int mf_ckpt_count(const mf_ckpt_file *f)
{
    return f ? f->n : 0;
}

const mf_ckpt_entry *mf_ckpt_entry_at(const mf_ckpt_file *f, int i)
{
    return f && i >= 0 && i < f->n ? &f->e[i] : NULL;
}

int mf_ckpt_find(const mf_ckpt_file *f, const char *name)
{
    if (name && name[0] == '/') name++;
    for (int i = 0; f && name && i < f->n; i++)
        if (!strcmp(f->e[i].name, name)) return i;
    return -1;
}

typedef struct attr_text {
    char *buf;
    size_t size, len;
} attr_text;

static herr_t format_attr(hid_t obj, const char *name, const H5A_info_t *info, void *data)
{
    (void)info;
    attr_text *t = data;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    if (a < 0) return 0;
    hid_t ft = H5Aget_type(a), sp = H5Aget_space(a);
    char val[256] = "?";
    if (H5Sget_simple_extent_npoints(sp) == 1) {
        H5T_class_t c = H5Tget_class(ft);
        int64_t i;
        double d;
        if (c == H5T_STRING) mfi_h5_get_str(obj, name, val, sizeof val);
        else if (c == H5T_INTEGER && H5Aread(a, H5T_NATIVE_INT64, &i) >= 0) snprintf(val, sizeof val, "%lld", (long long)i);
        else if (c == H5T_FLOAT && H5Aread(a, H5T_NATIVE_DOUBLE, &d) >= 0) snprintf(val, sizeof val, "%.9g", d);
    }
    H5Sclose(sp);
    H5Tclose(ft);
    H5Aclose(a);
    if (t->len < t->size) {
        int n = snprintf(t->buf + t->len, t->size - t->len, "%s%s=%s", t->len ? " " : "", name, val);
        t->len = n < 0 ? t->size : t->len + (size_t)n;
    }
    return 0;
}

mf_status mf_ckpt_attrs(const mf_ckpt_file *f, const char *object, char *buf, size_t size)
{
    if (!f || !object || !buf || !size) MF_FAIL(MF_ERR_ARG, "mf_ckpt_attrs: NULL argument");
    buf[0] = 0;
    if (strcmp(object, "/") && H5Lexists(f->file, object, H5P_DEFAULT) <= 0) return MF_OK;
    hid_t o = H5Oopen(f->file, object, H5P_DEFAULT);
    if (o < 0) return MF_OK;
    attr_text t = {buf, size, 0};
    hsize_t idx = 0;
    if (H5Aiterate2(o, H5_INDEX_CRT_ORDER, H5_ITER_INC, &idx, format_attr, &t) < 0) {   /* untracked order */
        idx = 0;
        t.len = 0;
        H5Aiterate2(o, H5_INDEX_NAME, H5_ITER_INC, &idx, format_attr, &t);
    }
    H5Oclose(o);
    return MF_OK;
}

bool mf_ckpt_attr_i64(const mf_ckpt_file *f, const char *object, const char *name, int64_t *v)
{
    if (!f || !object || !name || !v) return false;
    if (strcmp(object, "/") && H5Lexists(f->file, object, H5P_DEFAULT) <= 0) return false;
    hid_t o = H5Oopen(f->file, object, H5P_DEFAULT);
    if (o < 0) return false;
    bool ok = mfi_h5_get_i64(o, name, v);
    H5Oclose(o);
    return ok;
}

/* rows [row0, row0+nrows) of entry i into out, as memory type mt */
static mf_status read_rows(const mf_ckpt_file *f, int i, int64_t row0, int64_t nrows, hid_t mt, void *out)
{
    const mf_ckpt_entry *e = mf_ckpt_entry_at(f, i);
    if (!e || !out) MF_FAIL(MF_ERR_ARG, "mf_ckpt_read: no entry %d", i);
    if (e->ndim && (row0 < 0 || nrows < 0 || row0 + nrows > e->shape[0]))
        MF_FAIL(MF_ERR_ARG, "mf_ckpt_read: rows %lld+%lld outside %s's %lld", (long long)row0, (long long)nrows, e->name,
                (long long)e->shape[0]);
    hid_t ds = H5Dopen2(f->file, e->name, H5P_DEFAULT);
    if (ds < 0) MF_FAIL(MF_ERR_FORMAT, "%s: cannot open '%s'", f->path, e->name);
    hid_t fs = H5Dget_space(ds), ms;
    if (e->ndim) {
        hsize_t start[MF_MAX_DIMS] = {0}, count[MF_MAX_DIMS];
        for (int d = 0; d < e->ndim; d++) count[d] = (hsize_t)e->shape[d];
        start[0] = (hsize_t)row0;
        count[0] = (hsize_t)nrows;
        H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL);
        ms = H5Screate_simple(e->ndim, count, NULL);
    } else {
        ms = H5Screate(H5S_SCALAR);
    }
    herr_t r = nrows == 0 && e->ndim ? 0 : H5Dread(ds, mt, ms, fs, H5P_DEFAULT, out);
    H5Sclose(ms);
    H5Sclose(fs);
    H5Dclose(ds);
    if (r < 0)
        MF_FAIL(MF_ERR_FORMAT, "%s: cannot read tensor '%s' (the file is truncated or a Fletcher32 check failed)",
                f->path, e->name);
    return MF_OK;
}

mf_status mf_ckpt_read_f64(const mf_ckpt_file *f, int i, int64_t row0, int64_t nrows, double *out)
{
    return read_rows(f, i, row0, nrows, H5T_NATIVE_DOUBLE, out);
}

mf_status mf_ckpt_verify_entry(const mf_ckpt_file *f, int i, uint64_t *computed)
{
    const mf_ckpt_entry *e = mf_ckpt_entry_at(f, i);
    if (!e || !computed) MF_FAIL(MF_ERR_ARG, "mf_ckpt_verify_entry: no entry %d", i);
    size_t es = mf_dtype_size(e->dtype);
    int64_t rows = e->ndim ? e->shape[0] : 1, row = 1;
    for (int d = 1; d < e->ndim; d++) row *= e->shape[d];
    int64_t step = row > 0 && row < SLAB_ELEMS ? SLAB_ELEMS / row : 1;
    if (step > rows) step = rows > 0 ? rows : 1;
    void *buf = malloc((size_t)(step * row) * es + 1);
    if (!buf) MF_FAIL(MF_ERR_NOMEM, "mf_ckpt_verify_entry: out of memory for %s", e->name);
    uint64_t sum = 0;
    mf_status st = MF_OK;
    for (int64_t r0 = 0; r0 < rows && st == MF_OK; r0 += step) {
        int64_t n = rows - r0 < step ? rows - r0 : step, start[MF_MAX_DIMS] = {0}, count[MF_MAX_DIMS];
        st = read_rows(f, i, r0, n, mfi_h5_mem_type(e->dtype), buf);
        for (int d = 0; d < e->ndim; d++) count[d] = e->shape[d];
        if (e->ndim) {
            start[0] = r0;
            count[0] = n;
        }
        if (st == MF_OK) sum += mfi_ckpt_checksum(buf, es, e->ndim, e->shape, start, count);
    }
    free(buf);
    *computed = sum;
    if (st == MF_OK && !e->valid)
        st = mfi_error(MF_ERR_FORMAT, "%s", e->problem);
    else if (st == MF_OK && !e->has_checksum && f->h.checksums)
        st = mfi_error(MF_ERR_FORMAT, "%s: tensor '%s' has no checksum attribute", f->path, e->name);
    else if (st == MF_OK && e->has_checksum && sum != e->checksum)
        st = mfi_error(MF_ERR_FORMAT, "%s: tensor '%s' fails its checksum (stored %016llx, read %016llx): the file is damaged",
                       f->path, e->name, (unsigned long long)e->checksum, (unsigned long long)sum);
    return st;
}
