/*
 * lib/io/idx.c - the IDX format of MNIST and Fashion-MNIST, plain or
 * gzip-compressed (zlib's gzread reads both).
 *
 * Layout: magic = 0x00 0x00 <type> <ndim>, then ndim big-endian 32-bit
 * sizes, then the elements in row-major order, big-endian.
 */
#include <errno.h>
#include <stdio.h>
#include <zlib.h>
#include "lib/internal.h"

static int type_size(int type)
{
    switch (type) {
    case 0x08: case 0x09: return 1;
    case 0x0B: return 2;
    case 0x0C: case 0x0D: return 4;
    case 0x0E: return 8;
    default: return 0;
    }
}

/* Reads exactly n bytes; 1 on success, 0 at a short read, -1 on error. */
static int read_full(gzFile f, void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        unsigned chunk = n - got > (1u << 30) ? (1u << 30) : (unsigned)(n - got);
        int r = gzread(f, (char *)buf + got, chunk);
        if (r < 0) return -1;
        if (r == 0) return 0;
        got += (size_t)r;
    }
    return 1;
}

static mf_status gz_fail(gzFile f, const char *path, const char *what)
{
    int code = 0;
    const char *msg = gzerror(f, &code);
    MF_FAIL(code == Z_ERRNO ? MF_ERR_IO : MF_ERR_FORMAT, "%s: %s (%s)", path, what,
            code == Z_ERRNO ? strerror(errno) : msg);
}

mf_status mf_idx_read(const char *path, mf_idx *out)
{
    memset(out, 0, sizeof *out);
    if (!path) MF_FAIL(MF_ERR_ARG, "mf_idx_read: path is NULL");
    gzFile f = gzopen(path, "rb");
    if (!f) MF_FAIL(MF_ERR_IO, "cannot open %s: %s", path, errno ? strerror(errno) : "out of memory");
    mf_status st = MF_OK;
    unsigned char magic[4];
    int r = read_full(f, magic, 4);
    if (r < 0) MF_TRY_OUT(gz_fail(f, path, "cannot read the IDX header"));
    if (r == 0) MF_FAIL_OUT(MF_ERR_FORMAT, "%s: truncated IDX header (the file is shorter than 4 bytes)", path);
    int esz = type_size(magic[2]);
    if (magic[0] || magic[1] || !esz || magic[3] == 0 || magic[3] > MF_MAX_DIMS)
        MF_FAIL_OUT(MF_ERR_FORMAT, "%s: not an IDX file: bad magic 0x%02x%02x%02x%02x (expected 0x0000TTNN with a "
                    "known type TT and 1..%d dims NN)", path, magic[0], magic[1], magic[2], magic[3], MF_MAX_DIMS);
    out->type = magic[2];
    out->ndim = magic[3];
    size_t total = (size_t)esz;
    for (int i = 0; i < out->ndim; i++) {
        unsigned char b[4];
        r = read_full(f, b, 4);
        if (r < 0) MF_TRY_OUT(gz_fail(f, path, "cannot read the IDX dims"));
        if (r == 0) MF_FAIL_OUT(MF_ERR_FORMAT, "%s: truncated IDX header (dim %d of %d missing)", path, i, out->ndim);
        uint32_t d = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
        out->dims[i] = d;
        if (d && total > ((size_t)1 << 40) / d)
            MF_FAIL_OUT(MF_ERR_FORMAT, "%s: IDX dims are implausibly large (dim %d is %u)", path, i, d);
        total *= d;
    }
    out->nbytes = total;
    out->data = malloc(total ? total : 1);
    if (!out->data) MF_FAIL_OUT(MF_ERR_NOMEM, "%s: out of memory for %zu bytes of data", path, total);
    r = read_full(f, out->data, total);
    if (r < 0) MF_TRY_OUT(gz_fail(f, path, "cannot read the IDX data"));
    if (r == 0)
        MF_FAIL_OUT(MF_ERR_FORMAT, "%s: truncated: the header promises %zu bytes of data but the file ends early", path,
                    total);
    /* big-endian to host for multi-byte types */
    if (esz > 1) {
        unsigned char *p = out->data;
        for (size_t i = 0; i < total; i += (size_t)esz)
            for (int a = 0, b = esz - 1; a < b; a++, b--) {
                unsigned char t = p[i + a];
                p[i + a] = p[i + b];
                p[i + b] = t;
            }
    }
out:
    gzclose(f);
    if (st != MF_OK) {
        free(out->data);
        out->data = NULL;
    }
    return st;
}
