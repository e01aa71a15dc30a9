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
#include "lib/internal.h"

enum { ST_MAX_HEADER = 100 << 20 };

struct mf_safetensors {
    char path[512];
    unsigned char *buf;   /* the whole file */
    int64_t size, data0;  /* where the data starts */
    int n, cap;
    mf_st_tensor *t;
};

/* ------------------------------------------------------ a JSON reader */
typedef struct jp {
    const char *s, *end, *start;
    char err[400];
} jp;

static void ws(jp *p)
{
    while (p->s < p->end && (*p->s == ' ' || *p->s == '\n' || *p->s == '\r' || *p->s == '\t')) p->s++;
}

static bool expect(jp *p, char c)
{
    ws(p);
    if (p->s < p->end && *p->s == c) {
        p->s++;
        return true;
    }
    if (!p->err[0]) snprintf(p->err, sizeof p->err, "expected '%c' at byte %ld of the header", c, (long)(p->s - p->start));
    return false;
}

/* a string into buf (escapes \" \\ \/ and \uXXXX below 128 only) */
static bool str(jp *p, char *buf, size_t size)
{
    if (!expect(p, '"')) return false;
    size_t n = 0;
    while (p->s < p->end && *p->s != '"') {
        char c = *p->s++;
        if (c == '\\' && p->s < p->end) {
            char e = *p->s++;
            if (e == 'u' && p->end - p->s >= 4) {
                unsigned v = 0;
                for (int i = 0; i < 4; i++) {
                    char h = *p->s++;
                    v = v * 16 + (unsigned)(h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : 99);
                }
                if (v > 127) {
                    snprintf(p->err, sizeof p->err, "a name holds \\u%04x: only ASCII escapes are read", v);
                    return false;
                }
                c = (char)v;
            } else {
                c = e == 'n' ? '\n' : e == 't' ? '\t' : e;
            }
        }
        if (n + 1 >= size) {
            snprintf(p->err, sizeof p->err, "a string of the header is longer than %zu bytes", size - 1);
            return false;
        }
        buf[n++] = c;
    }
    buf[n] = 0;
    if (p->s >= p->end) {
        snprintf(p->err, sizeof p->err, "a string of the header is not closed");
        return false;
    }
    p->s++;
    return true;
}

static bool integer(jp *p, int64_t *v)
{
    ws(p);
    char *e;
    errno = 0;
    long long x = p->s < p->end ? strtoll(p->s, &e, 10) : 0;
    if (p->s >= p->end || e == p->s || errno || x < 0 || e > p->end) {
        snprintf(p->err, sizeof p->err, "expected a non-negative integer");
        return false;
    }
    p->s = e;
    *v = x;
    return true;
}

/* skips any value (the metadata's) */
static bool skip(jp *p, int depth)
{
    ws(p);
    if (depth > 32 || p->s >= p->end) {
        snprintf(p->err, sizeof p->err, "the header ends inside a value");
        return false;
    }
    char c = *p->s;
    if (c == '"') {
        char tmp[4096];
        return str(p, tmp, sizeof tmp);
    }
    if (c == '{' || c == '[') {
        p->s++;
        char close = c == '{' ? '}' : ']';
        ws(p);
        if (p->s < p->end && *p->s == close) return p->s++, true;
        for (;;) {
            if (c == '{') {
                char key[4096];
                if (!str(p, key, sizeof key) || !expect(p, ':')) return false;
            }
            if (!skip(p, depth + 1)) return false;
            ws(p);
            if (p->s < p->end && *p->s == ',') {
                p->s++;
                continue;
            }
            return expect(p, close);
        }
    }
    while (p->s < p->end && (*p->s == '-' || *p->s == '+' || *p->s == '.' || (*p->s >= '0' && *p->s <= '9') ||
                             (*p->s >= 'a' && *p->s <= 'z') || (*p->s >= 'A' && *p->s <= 'Z')))
        p->s++;
    return true;
}

static bool dtype_of(const char *s, mf_dtype *dt)
{
    if (!strcmp(s, "F32")) *dt = MF_F32;
    else if (!strcmp(s, "F64")) *dt = MF_F64;
    else if (!strcmp(s, "I32")) *dt = MF_I32;
    else if (!strcmp(s, "I64")) *dt = MF_I64;
    else return false;
    return true;
}

/* one tensor's entry: {"dtype": .., "shape": [..], "data_offsets": [a, b]} */
static bool entry(jp *p, mf_st_tensor *t, int64_t *off)
{
    if (!expect(p, '{')) return false;
    bool have[3] = {false, false, false};
    for (;;) {
        char key[64];
        if (!str(p, key, sizeof key) || !expect(p, ':')) return false;
        if (!strcmp(key, "dtype")) {
            char d[32];
            if (!str(p, d, sizeof d)) return false;
            if (!dtype_of(d, &t->dtype)) {
                snprintf(p->err, sizeof p->err, "tensor '%s' has dtype %s; F32, F64, I32 and I64 are read", t->name, d);
                return false;
            }
            have[0] = true;
        } else if (!strcmp(key, "shape") || !strcmp(key, "data_offsets")) {
            bool shape = key[0] == 's';
            int64_t v[MF_MAX_DIMS + 1];
            int n = 0;
            if (!expect(p, '[')) return false;
            ws(p);
            if (p->s < p->end && *p->s == ']') p->s++;
            else
                for (;;) {
                    if (n == (shape ? MF_MAX_DIMS : 2) || !integer(p, &v[n++])) {
                        if (!p->err[0] || n > 1)
                            snprintf(p->err, sizeof p->err, "tensor '%s': %s has too many entries or a bad one", t->name, key);
                        return false;
                    }
                    ws(p);
                    if (p->s < p->end && *p->s == ',') {
                        p->s++;
                        continue;
                    }
                    if (!expect(p, ']')) return false;
                    break;
                }
            if (shape) {
                t->ndim = n;
                memcpy(t->shape, v, (size_t)n * sizeof *v);
                have[1] = true;
            } else {
                if (n != 2) {
                    snprintf(p->err, sizeof p->err, "tensor '%s': data_offsets is not [begin, end]", t->name);
                    return false;
                }
                off[0] = v[0];
                off[1] = v[1];
                have[2] = true;
            }
        } else if (!skip(p, 1)) {
            return false;
        }
        ws(p);
        if (p->s < p->end && *p->s == ',') {
            p->s++;
            continue;
        }
        if (!expect(p, '}')) return false;
        break;
    }
    if (!have[0] || !have[1] || !have[2]) {
        snprintf(p->err, sizeof p->err, "tensor '%s' lacks %s", t->name, !have[0] ? "dtype" : !have[1] ? "shape" : "data_offsets");
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
    jp p = {(const char *)s->buf + 8, (const char *)s->buf + 8 + n, (const char *)s->buf + 8, ""};
    if (!expect(&p, '{')) return fail(s, MF_ERR_FORMAT, "the header is not a JSON object");
    ws(&p);
    bool empty = p.s < p.end && *p.s == '}';
    if (empty) p.s++;
    while (!empty) {
        char name[256];
        if (!str(&p, name, sizeof name) || !expect(&p, ':')) return fail(s, MF_ERR_FORMAT, p.err);
        if (!strcmp(name, "__metadata__")) {
            if (!skip(&p, 1)) return fail(s, MF_ERR_FORMAT, p.err);
        } else {
            if (s->n == s->cap) {
                int cap = s->cap ? 2 * s->cap : 64;
                mf_st_tensor *t = realloc(s->t, (size_t)cap * sizeof *t);
                if (!t) return fail(s, MF_ERR_NOMEM, "out of memory");
                s->t = t;
                s->cap = cap;
            }
            mf_st_tensor *t = &s->t[s->n];
            memset(t, 0, sizeof *t);
            snprintf(t->name, sizeof t->name, "%s", name);
            int64_t off[2] = {0, 0};
            if (!entry(&p, t, off)) return fail(s, MF_ERR_FORMAT, p.err);
            int64_t want = (int64_t)mf_dtype_size(t->dtype);
            for (int d = 0; d < t->ndim; d++) want = t->shape[d] && want > INT64_MAX / t->shape[d] ? -1 : want * t->shape[d];
            if (off[0] > off[1] || off[1] > s->size - s->data0 || off[1] - off[0] != want) {
                char m[400];
                snprintf(m, sizeof m, "tensor '%s': data_offsets [%lld, %lld] do not hold its %lld bytes inside the %lld of data",
                         name, (long long)off[0], (long long)off[1], (long long)want, (long long)(s->size - s->data0));
                return fail(s, MF_ERR_FORMAT, m);
            }
            t->data = s->buf + s->data0 + off[0];
            s->n++;
        }
        ws(&p);
        if (p.s < p.end && *p.s == ',') {
            p.s++;
            continue;
        }
        if (!expect(&p, '}')) return fail(s, MF_ERR_FORMAT, p.err);
        break;
    }
    ws(&p);
    if (p.s != p.end) return fail(s, MF_ERR_FORMAT, "bytes after the header's JSON object");
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
