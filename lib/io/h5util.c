/*
 * lib/io/h5util.c - HDF5 types, scalar attributes and the checkpoint
 * checksum, shared by the checkpoint writer and reader.
 */
#include "lib/io/h5util.h"
#include <ctype.h>
#include <stdio.h>
#include <string.h>

hid_t mfi_h5_mem_type(mf_dtype dt)
{
    switch (dt) {
    case MF_F32: return H5T_NATIVE_FLOAT;
    case MF_F64: return H5T_NATIVE_DOUBLE;
    case MF_I32: return H5T_NATIVE_INT32;
    default: return H5T_NATIVE_INT64;
    }
}

hid_t mfi_h5_file_type(mf_dtype dt)
{
    switch (dt) {
    case MF_F32: return H5T_IEEE_F32LE;
    case MF_F64: return H5T_IEEE_F64LE;
    case MF_I32: return H5T_STD_I32LE;
    default: return H5T_STD_I64LE;
    }
}

bool mfi_h5_dtype_of(hid_t ftype, mf_dtype *dt)
{
    H5T_class_t c = H5Tget_class(ftype);
    size_t size = H5Tget_size(ftype);
    if (c == H5T_FLOAT && size == 4) *dt = MF_F32;
    else if (c == H5T_FLOAT && size == 8) *dt = MF_F64;
    else if (c == H5T_INTEGER && size == 4) *dt = MF_I32;
    else if (c == H5T_INTEGER && size == 8) *dt = MF_I64;
    else return false;
    return true;
}

static void set_attr(hid_t obj, const char *name, hid_t ftype, hid_t mtype, const void *v)
{
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT);
    if (a >= 0) {
        H5Awrite(a, mtype, v);
        H5Aclose(a);
    }
    H5Sclose(sp);
}

void mfi_h5_set_str(hid_t obj, const char *name, const char *value)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, strlen(value) + 1);
    set_attr(obj, name, t, t, value);
    H5Tclose(t);
}

void mfi_h5_set_i64(hid_t obj, const char *name, int64_t v)
{
    set_attr(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &v);
}

void mfi_h5_set_f64(hid_t obj, const char *name, double v)
{
    set_attr(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v);
}

/* attribute name of obj opened, when it exists and holds one element of
 * class c (HDF5 converts within the class); -1 otherwise */
static hid_t open_scalar(hid_t obj, const char *name, H5T_class_t c)
{
    if (H5Aexists(obj, name) <= 0) return -1;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    if (a < 0) return -1;
    hid_t ft = H5Aget_type(a), sp = H5Aget_space(a);
    bool ok = ft >= 0 && sp >= 0 && H5Tget_class(ft) == c && H5Sget_simple_extent_npoints(sp) == 1;
    if (ok && c == H5T_STRING) ok = !H5Tis_variable_str(ft);
    if (ft >= 0) H5Tclose(ft);
    if (sp >= 0) H5Sclose(sp);
    if (!ok) H5Aclose(a);
    return ok ? a : -1;
}

bool mfi_h5_get_i64(hid_t obj, const char *name, int64_t *v)
{
    hid_t a = open_scalar(obj, name, H5T_INTEGER);
    if (a < 0) return false;
    bool ok = H5Aread(a, H5T_NATIVE_INT64, v) >= 0;
    H5Aclose(a);
    return ok;
}

bool mfi_h5_get_f64(hid_t obj, const char *name, double *v)
{
    hid_t a = open_scalar(obj, name, H5T_FLOAT);
    if (a < 0) return false;
    bool ok = H5Aread(a, H5T_NATIVE_DOUBLE, v) >= 0;
    H5Aclose(a);
    return ok;
}

bool mfi_h5_get_str(hid_t obj, const char *name, char *buf, size_t size)
{
    buf[0] = 0;
    hid_t a = open_scalar(obj, name, H5T_STRING);
    if (a < 0) return false;
    hid_t ft = H5Aget_type(a);
    bool ok = H5Tget_size(ft) <= size;
    if (ok) {
        hid_t mt = H5Tcopy(H5T_C_S1);
        H5Tset_size(mt, H5Tget_size(ft));
        ok = H5Aread(a, mt, buf) >= 0;
        buf[size - 1] = 0;
        H5Tclose(mt);
    }
    H5Tclose(ft);
    H5Aclose(a);
    return ok;
}

typedef struct reason {
    char *buf;
    size_t size, best;   /* best: the length of the longest OS reason found */
} reason;

static herr_t find_reason(unsigned n, const H5E_error2_t *e, void *data)
{
    reason *r = data;
    const char *d = e->desc ? e->desc : "";
    for (int code = 1; code < 134; code++) {
        const char *os = strerror(code);
        size_t len = strlen(os);
        if (len > r->best && strstr(d, os)) {
            snprintf(r->buf, r->size, "%s", os);
            r->best = len;
        }
    }
    if (n == 0 && !r->best) {   /* the innermost, on one line */
        size_t k = 0;
        for (const char *p = d; *p && k + 1 < r->size; p++) r->buf[k++] = isspace((unsigned char)*p) ? ' ' : *p;
        r->buf[k] = 0;
    }
    return 0;
}

char *mfi_h5_reason(char *buf, size_t size)
{
    if (!size) return buf;
    snprintf(buf, size, "HDF5 gives no reason");
    reason r = {buf, size, 0};
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, find_reason, &r);
    return buf;
}

/* one element's term: a bijection of its bits keyed by its global index,
 * so that any changed element changes the sum */
static inline uint64_t term(uint64_t bits, uint64_t key)
{
    uint64_t h = (bits ^ key) * 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 29;
    return h * 0x94d049bb133111ebULL;
}

#define KEY_STEP 0x9e3779b97f4a7c15ULL   /* key = global index * KEY_STEP */

/* The sums over a run of elements: vectorized where the CPU has 64-bit
 * vector multiplies (AVX-512DQ), chosen at load time. */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11 && defined(__x86_64__)
#define MF_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default"), optimize("O3")))
#else
#define MF_CLONES
#endif

MF_CLONES static uint64_t run_sum32(const uint32_t *p, int64_t n, uint64_t key)
{
    uint64_t s = 0;
    for (int64_t j = 0; j < n; j++) s += term(p[j], key + (uint64_t)j * KEY_STEP);
    return s;
}

MF_CLONES static uint64_t run_sum64(const uint64_t *p, int64_t n, uint64_t key)
{
    uint64_t s = 0;
    for (int64_t j = 0; j < n; j++) s += term(p[j], key + (uint64_t)j * KEY_STEP);
    return s;
}

uint64_t mfi_ckpt_checksum(const void *data, size_t esize, int ndim, const int64_t *gshape, const int64_t *start,
                           const int64_t *count)
{
    int64_t gstr[MF_MAX_DIMS], n = 1, stride = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        gstr[i] = stride;
        stride *= gshape[i];
    }
    for (int i = 0; i < ndim; i++) n *= count[i];
    int64_t inner = ndim ? count[ndim - 1] : 1;   /* elements contiguous in the global order */
    int64_t rows = inner ? n / inner : 0;
    uint64_t sum = 0;
    /* data is a tensor's (aligned) storage: elements of 4 or 8 bytes */
    #pragma omp parallel for reduction(+ : sum) if (n >= (1 << 20)) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        int64_t g = ndim ? start[ndim - 1] : 0, rem = r;
        for (int i = ndim - 2; i >= 0; i--) {
            g += (start[i] + rem % count[i]) * gstr[i];
            rem /= count[i];
        }
        const char *p = (const char *)data + (size_t)(r * inner) * esize;
        uint64_t key = (uint64_t)g * KEY_STEP;
        sum += esize == 4 ? run_sum32((const uint32_t *)(const void *)p, inner, key)
                          : run_sum64((const uint64_t *)(const void *)p, inner, key);
    }
    return sum;
}
