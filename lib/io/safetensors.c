/*
 * lib/io/safetensors.c - Hugging Face's safetensors format (doc/gpt.md):
 * an 8-byte little-endian header length N, N bytes of JSON
 *   {"name": {"dtype": "F32", "shape": [3, 4], "data_offsets": [0, 48]}, ...,
 *    "__metadata__": {"key": "value"}}
 * and the tensors' bytes, little-endian, row-major, at those offsets from
 * the end of the header.
 *
 * The reader trusts nothing: the header must fit the file, be one JSON
 * object of the shape above, name known dtypes, and give each tensor
 * exactly shape x dtype size bytes inside the data; every refusal names
 * the file and what is wrong.
 */
#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>
#include "base/json.h"
#include "lib/internal.h"

enum { ST_MAX_HEADER = 100 << 20 };

struct mf_safetensors {
    char path[512];
    unsigned char *buf;   /* the whole file */
    int64_t size, data0;  /* where the data starts */
    int n;
    mf_st_tensor *t;
};

static bool dtype_of(const char *s, mf_dtype *dt)
{
    if (!strcmp(s, "F32")) *dt = MF_F32;
    else if (!strcmp(s, "F64")) *dt = MF_F64;
    else if (!strcmp(s, "I32")) *dt = MF_I32;
    else if (!strcmp(s, "I64")) *dt = MF_I64;
    else return false;
    return true;
}

/* a non-negative integer of at most max entries' array into v; its count in *n */
static bool int_array(const mfi_json *a, int max, int64_t *v, int *n)
{
    if (!a || a->type != MFI_JSON_ARRAY || a->n > max) return false;
    for (int i = 0; i < a->n; i++) {
        if (a->items[i]->type != MFI_JSON_NUMBER || !a->items[i]->is_int || a->items[i]->i < 0) return false;
        v[i] = a->items[i]->i;
    }
    *n = a->n;
    return true;
}

/* one tensor's entry: {"dtype": .., "shape": [..], "data_offsets": [a, b]} */
static bool entry(const mfi_json *e, mf_st_tensor *t, int64_t *off, char *err, size_t size)
{
    if (e->type != MFI_JSON_OBJECT) {
        snprintf(err, size, "tensor '%s' is %s, not an object", t->name, mfi_json_type_name(e->type));
        return false;
    }
    const mfi_json *dt = mfi_json_get(e, "dtype"), *shape = mfi_json_get(e, "shape"),
                   *offs = mfi_json_get(e, "data_offsets");
    if (!dt || !shape || !offs) {
        snprintf(err, size, "tensor '%s' lacks %s", t->name, !dt ? "dtype" : !shape ? "shape" : "data_offsets");
        return false;
    }
    if (dt->type != MFI_JSON_STRING || !dtype_of(dt->str, &t->dtype)) {
        snprintf(err, size, "tensor '%s' has dtype %s; F32, F64, I32 and I64 are read", t->name,
                 dt->type == MFI_JSON_STRING ? dt->str : mfi_json_type_name(dt->type));
        return false;
    }
    int n = 0;
    if (!int_array(shape, MF_MAX_DIMS, t->shape, &t->ndim)) {
        snprintf(err, size, "tensor '%s': shape is not an array of at most %d non-negative integers", t->name,
                 MF_MAX_DIMS);
        return false;
    }
    if (!int_array(offs, 2, off, &n) || n != 2) {
        snprintf(err, size, "tensor '%s': data_offsets is not [begin, end]", t->name);
        return false;
    }
    return true;
}

static mf_safetensors *fail(mf_safetensors *s, mf_status st, const char *what)
{
    mfi_error(st, "%s: not a safetensors file we read: %s", s->path, what);
    mf_safetensors_close(s);
    return NULL;
}

mf_safetensors *mf_safetensors_open(const char *path)
{
    mf_safetensors *s = calloc(1, sizeof *s);
    if (!s) {
        mfi_error(MF_ERR_NOMEM, "mf_safetensors_open: out of memory");
        return NULL;
    }
    snprintf(s->path, sizeof s->path, "%s", path ? path : "(null)");
    FILE *f = path ? fopen(path, "rb") : NULL;
    struct stat sb;
    if (!f || fstat(fileno(f), &sb) != 0) {
        mfi_error(MF_ERR_IO, "cannot open %s: %s", s->path, strerror(errno));
        if (f) fclose(f);
        mf_safetensors_close(s);
        return NULL;
    }
    s->size = sb.st_size;
    s->buf = malloc((size_t)s->size + 1);
    bool ok = s->buf && fread(s->buf, 1, (size_t)s->size, f) == (size_t)s->size;
    fclose(f);
    if (!ok) return fail(s, MF_ERR_IO, "cannot read it whole");
    if (s->size < 8) return fail(s, MF_ERR_FORMAT, "shorter than the 8-byte header length");
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | s->buf[i];
    if (n < 2 || n > ST_MAX_HEADER || (int64_t)n > s->size - 8) {
        char m[160];
        snprintf(m, sizeof m, "the header length %llu does not fit the file of %lld bytes", (unsigned long long)n, (long long)s->size);
        return fail(s, MF_ERR_FORMAT, m);
    }
    s->data0 = 8 + (int64_t)n;
    char err[400];
    mfi_json *h = mfi_json_parse((const char *)s->buf + 8, n, err, sizeof err);
    if (!h) {
        char m[460];
        snprintf(m, sizeof m, "its header is not JSON: %s", err);
        return fail(s, MF_ERR_FORMAT, m);
    }
    if (h->type != MFI_JSON_OBJECT) {
        mfi_json_free(h);
        return fail(s, MF_ERR_FORMAT, "the header is not a JSON object");
    }
    s->t = calloc((size_t)h->n + 1, sizeof *s->t);
    if (!s->t) {
        mfi_json_free(h);
        return fail(s, MF_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < h->n; i++) {
        const char *name = h->keys[i];
        if (!strcmp(name, "__metadata__")) continue;
        mf_st_tensor *t = &s->t[s->n];
        if (strlen(name) >= sizeof t->name || mf_safetensors_find(s, name) >= 0) {
            snprintf(err, sizeof err, "tensor '%.200s': %s", name,
                     strlen(name) >= sizeof t->name ? "the name is too long" : "the name appears twice");
            mfi_json_free(h);
            return fail(s, MF_ERR_FORMAT, err);
        }
        snprintf(t->name, sizeof t->name, "%s", name);
        int64_t off[2] = {0, 0};
        if (!entry(h->items[i], t, off, err, sizeof err)) {
            mfi_json_free(h);
            return fail(s, MF_ERR_FORMAT, err);
        }
        int64_t want = (int64_t)mf_dtype_size(t->dtype);
        for (int d = 0; d < t->ndim; d++) want = t->shape[d] && want > INT64_MAX / t->shape[d] ? -1 : want * t->shape[d];
        if (off[0] > off[1] || off[1] > s->size - s->data0 || off[1] - off[0] != want) {
            snprintf(err, sizeof err, "tensor '%s': data_offsets [%lld, %lld] do not hold its %lld bytes inside the %lld of data",
                     name, (long long)off[0], (long long)off[1], (long long)want, (long long)(s->size - s->data0));
            mfi_json_free(h);
            return fail(s, MF_ERR_FORMAT, err);
        }
        t->data = s->buf + s->data0 + off[0];
        s->n++;
    }
    mfi_json_free(h);
    return s;
}

void mf_safetensors_close(mf_safetensors *s)
{
    if (!s) return;
    free(s->buf);
    free(s->t);
    free(s);
}

int mf_safetensors_count(const mf_safetensors *s) { return s ? s->n : 0; }
const mf_st_tensor *mf_safetensors_at(const mf_safetensors *s, int i) { return s && i >= 0 && i < s->n ? &s->t[i] : NULL; }

int mf_safetensors_find(const mf_safetensors *s, const char *name)
{
    for (int i = 0; s && name && i < s->n; i++)
        if (!strcmp(s->t[i].name, name)) return i;
    return -1;
}

/* ------------------------------------------------------------- writer */
static const char *st_dtype(mf_dtype dt)
{
    return dt == MF_F32 ? "F32" : dt == MF_F64 ? "F64" : dt == MF_I32 ? "I32" : dt == MF_I64 ? "I64" : NULL;
}

mf_status mf_safetensors_write(const char *path, int n, const char *const *names, mf_tensor *const *tensors)
{
    if (!path || n < 0 || (n && (!names || !tensors))) MF_FAIL(MF_ERR_ARG, "mf_safetensors_write: bad arguments");
    size_t cap = 256 + (size_t)n * 512, len = 0;
    char *h = malloc(cap);
    if (!h) MF_FAIL(MF_ERR_NOMEM, "mf_safetensors_write: out of memory");
    len += (size_t)snprintf(h + len, cap - len, "{");
    int64_t off = 0;
    mf_status st = MF_OK;
    for (int i = 0; i < n && st == MF_OK; i++) {
        mf_tensor *t = tensors[i];
        const char *d = t ? st_dtype(mf_tensor_dtype(t)) : NULL;
        if (!d || strlen(names[i]) > 200 || strpbrk(names[i], "\"\\"))
            st = mfi_error(MF_ERR_ARG, "mf_safetensors_write: tensor %d ('%s') has no dtype safetensors holds here or an unwritable name",
                           i, names[i]);
        if (st != MF_OK) break;
        int64_t bytes = mf_tensor_numel(t) * (int64_t)mf_dtype_size(mf_tensor_dtype(t));
        len += (size_t)snprintf(h + len, cap - len, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", i ? "," : "", names[i], d);
        for (int k = 0; k < mf_tensor_ndim(t); k++)
            len += (size_t)snprintf(h + len, cap - len, "%s%lld", k ? "," : "", (long long)mf_tensor_shape(t)[k]);
        len += (size_t)snprintf(h + len, cap - len, "],\"data_offsets\":[%lld,%lld]}", (long long)off, (long long)(off + bytes));
        off += bytes;
    }
    len += (size_t)snprintf(h + len, cap - len, "}");
    while (st == MF_OK && len % 8) h[len++] = ' ';   /* the data 8-byte aligned, as the Python writer does */
    FILE *f = st == MF_OK ? fopen(path, "wb") : NULL;
    if (st == MF_OK && !f) st = mfi_error(MF_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    unsigned char lenb[8];
    for (int i = 0; i < 8; i++) lenb[i] = (unsigned char)((uint64_t)len >> (8 * i));
    if (st == MF_OK && (fwrite(lenb, 1, 8, f) != 8 || fwrite(h, 1, len, f) != len))
        st = mfi_error(MF_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    for (int i = 0; i < n && st == MF_OK; i++) {
        int64_t cnt = mf_tensor_numel(tensors[i]);
        size_t bytes = (size_t)cnt * mf_dtype_size(mf_tensor_dtype(tensors[i]));
        void *buf = malloc(bytes + 1);
        if (!buf) st = mfi_error(MF_ERR_NOMEM, "mf_safetensors_write: out of memory");
        else if ((st = mf_tensor_copy_out(tensors[i], mf_tensor_dtype(tensors[i]), buf, cnt)) == MF_OK && fwrite(buf, 1, bytes, f) != bytes)
            st = mfi_error(MF_ERR_IO, "cannot write %s: %s", path, strerror(errno));
        free(buf);
    }
    if (f && fclose(f) != 0 && st == MF_OK) st = mfi_error(MF_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    free(h);
    return st;
}
