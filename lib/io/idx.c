/*
 * lib/io/idx.c - the IDX format of MNIST and Fashion-MNIST, plain or
 * gzip-compressed (lib/io/zfile.c reads both, to their exact end).
 *
 * Layout: magic = 0x00 0x00 <type> <ndim>, then ndim big-endian 32-bit
 * sizes, then the elements in row-major order, big-endian.
 *
 * Nothing in the header is trusted: the buffer grows with what the file
 * really holds, so a header promising terabytes fails as a truncated file
 * rather than as an allocation, and the file must end where its header
 * says, a gzip file with its CRC and length checked.
 */
#include <stdio.h>
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

/* Reads exactly n bytes: 1, or 0 when the file ends first (*got then
 * says how many came), or -1 on an error (recorded). */
static int read_upto(mfi_zfile *f, void *buf, size_t n, size_t *got)
{
    int64_t r = mfi_zread(f, buf, n);
    *got = r > 0 ? (size_t)r : 0;
    return r < 0 ? -1 : (size_t)r == n;
}

static int read_full(mfi_zfile *f, void *buf, size_t n)
{
    size_t got;
    return read_upto(f, buf, n, &got);
}

#define CHUNK ((size_t)64 << 20)

/* Reads the total bytes the header promises into a buffer that grows by
 * what arrives, then checks that the file ends there. */
static mf_status read_data(mfi_zfile *f, const char *path, size_t total, void **out)
{
    unsigned char *buf = NULL;
    size_t got = 0, cap = 0;
    mf_status st = MF_OK;
    while (got < total) {
        size_t want = total - got < CHUNK ? total - got : CHUNK;
        if (got + want > cap) {
            size_t ncap = cap ? 2 * cap : want;
            if (ncap > total) ncap = total;
            if (ncap < got + want) ncap = got + want;
            unsigned char *nb = realloc(buf, ncap);
            if (!nb) MF_FAIL_OUT(MF_ERR_NOMEM, "%s: out of memory for %zu bytes of data", path, ncap);
            buf = nb;
            cap = ncap;
        }
        size_t n = 0;
        int r = read_upto(f, buf + got, want, &n);
        got += n;
        if (r < 0) MF_TRY_OUT(mf_last_status());
        if (r == 0)
            MF_FAIL_OUT(MF_ERR_FORMAT, "%s: truncated, or a damaged header: the header promises %zu bytes of data "
                        "but the file holds %zu", path, total, got);
    }
    MF_TRY_OUT(mfi_zend(f));
    *out = buf ? buf : malloc(1);
    if (!*out) MF_FAIL_OUT(MF_ERR_NOMEM, "%s: out of memory", path);
    return MF_OK;
out:
    free(buf);
    return st;
}

mf_status mf_idx_read(const char *path, mf_idx *out)
{
    memset(out, 0, sizeof *out);
    if (!path) MF_FAIL(MF_ERR_ARG, "mf_idx_read: path is NULL");
    mfi_zfile *f = mfi_zopen(path);
    if (!f) return mf_last_status();
    mf_status st = MF_OK;
    unsigned char magic[4];
    int r = read_full(f, magic, 4);
    if (r < 0) MF_TRY_OUT(mf_last_status());
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
        if (r < 0) MF_TRY_OUT(mf_last_status());
        if (r == 0) MF_FAIL_OUT(MF_ERR_FORMAT, "%s: truncated IDX header (dim %d of %d missing)", path, i, out->ndim);
        uint32_t d = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
        out->dims[i] = d;
        if (d && total > ((size_t)1 << 40) / d)
            MF_FAIL_OUT(MF_ERR_FORMAT, "%s: IDX dims are implausibly large (dim %d is %u)", path, i, d);
        total *= d;
    }
    out->nbytes = total;
    MF_TRY_OUT(read_data(f, path, total, &out->data));
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
    mfi_zclose(f);
    if (st != MF_OK) {
        free(out->data);
        out->data = NULL;
    }
    return st;
}
