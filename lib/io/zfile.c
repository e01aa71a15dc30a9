/*
 * lib/io/zfile.c - reading a plain or gzip-compressed file to its exact
 * end (lib/internal.h: mfi_zopen, mfi_zread, mfi_zend, mfi_zclose).
 *
 * gzread is not used: it returns the data of a gzip stream whose trailer
 * (CRC-32 and length) is missing without a word, when the file's bytes
 * run out together with the deflate data. Here inflate runs directly
 * (gzip framing, windowBits 15 + 16): the stream counts as read only when
 * inflate reaches its end, which it does only after checking the
 * trailer. Several concatenated gzip members are one stream, as gzip -d
 * reads them; anything else after the last member is an error.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <zlib.h>
#include "lib/internal.h"

#define IN_BYTES 65536

struct mfi_zfile {
    FILE *fp;
    const char *path;
    bool gz;
    bool ended;              /* the last member's trailer checked (gz) */
    bool inflating;          /* z is initialised */
    z_stream z;
    unsigned char in[IN_BYTES];
};

/* more compressed input; false at the end of the file or on an error (ferror) */
static bool fill(mfi_zfile *f)
{
    if (f->z.avail_in) return true;
    size_t n = fread(f->in, 1, sizeof f->in, f->fp);
    f->z.next_in = f->in;
    f->z.avail_in = (uInt)n;
    return n > 0;
}

mfi_zfile *mfi_zopen(const char *path)
{
    mfi_zfile *f = calloc(1, sizeof *f);
    if (!f) {
        mfi_error(MF_ERR_NOMEM, "cannot open %s: out of memory", path);
        return NULL;
    }
    f->path = path;
    f->fp = fopen(path, "rb");
    if (!f->fp) {
        mfi_error(MF_ERR_IO, "cannot open %s: %s", path, strerror(errno));
        free(f);
        return NULL;
    }
    fill(f);
    f->gz = f->z.avail_in >= 2 && f->in[0] == 0x1f && f->in[1] == 0x8b;
    if (f->gz) {
        if (inflateInit2(&f->z, 15 + 16) != Z_OK) {
            mfi_error(MF_ERR_NOMEM, "cannot open %s: zlib cannot start", path);
            fclose(f->fp);
            free(f);
            return NULL;
        }
        f->inflating = true;
    }
    return f;
}

/* n bytes of plain data: what is buffered, then the file */
static int64_t read_plain(mfi_zfile *f, unsigned char *buf, size_t n)
{
    size_t got = 0;
    if (f->z.avail_in) {
        got = n < f->z.avail_in ? n : f->z.avail_in;
        memcpy(buf, f->z.next_in, got);
        f->z.next_in += got;
        f->z.avail_in -= (uInt)got;
    }
    got += fread(buf + got, 1, n - got, f->fp);
    if (got < n && ferror(f->fp)) {
        mfi_error(MF_ERR_IO, "%s: cannot read: %s", f->path, strerror(errno));
        return -1;
    }
    return (int64_t)got;
}

int64_t mfi_zread(mfi_zfile *f, void *out, size_t n)
{
    unsigned char *buf = out;
    if (!f->gz) return read_plain(f, buf, n);
    size_t got = 0;
    while (got < n && !f->ended) {
        bool have = fill(f);
        if (!have && ferror(f->fp)) {
            mfi_error(MF_ERR_IO, "%s: cannot read: %s", f->path, strerror(errno));
            return -1;
        }
        size_t want = n - got > (1u << 30) ? (1u << 30) : n - got;
        f->z.next_out = buf + got;
        f->z.avail_out = (uInt)want;
        int r = inflate(&f->z, Z_NO_FLUSH);   /* with no input left it still gives what it holds */
        got += want - f->z.avail_out;
        if (r == Z_STREAM_END) {   /* a member ends, its trailer checked; another may follow */
            bool more = fill(f);
            if (more && f->z.avail_in >= 2 && f->z.next_in[0] == 0x1f && f->z.next_in[1] == 0x8b) {
                inflateReset(&f->z);
                continue;
            }
            f->ended = true;
            if (more) {
                mfi_error(MF_ERR_FORMAT, "%s: the file is damaged (%u bytes after its gzip data)", f->path,
                          f->z.avail_in);
                return -1;
            }
        } else if (r == Z_BUF_ERROR && !have) {
            break;   /* the file ends inside the stream: mfi_zend says so */
        } else if (r != Z_OK && r != Z_BUF_ERROR) {
            mfi_error(MF_ERR_FORMAT, "%s: the file is damaged (%s)", f->path, f->z.msg ? f->z.msg : zError(r));
            return -1;
        }
    }
    return (int64_t)got;
}

mf_status mfi_zend(mfi_zfile *f)
{
    unsigned char extra;
    int64_t r = mfi_zread(f, &extra, 1);
    if (r < 0) return mf_last_status();
    if (r > 0) MF_FAIL(MF_ERR_FORMAT, "%s: the file holds more data than its header says", f->path);
    if (f->gz && !f->ended)
        MF_FAIL(MF_ERR_FORMAT, "%s: the file is damaged (it ends inside its gzip stream, before the CRC and length "
                "that end it: truncated)", f->path);
    return MF_OK;
}

void mfi_zclose(mfi_zfile *f)
{
    if (!f) return;
    if (f->inflating) inflateEnd(&f->z);
    fclose(f->fp);
    free(f);
}
