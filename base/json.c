/*
 * base/json.c - the JSON reader (base/json.h): recursive descent over
 * the text, one allocation per value, the first error kept with its
 * line and column.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include "base/json.h"

enum { MAX_DEPTH = 64 };

typedef struct reader {
    const char *start, *s, *end;
    char *err;
    size_t errsize;
    bool failed;
    int line;                 /* the line of s (newlines are only ever whitespace) */
    const char *line_start;   /* and where it starts */
} reader;

static void where(const reader *r, const char *at, int *line, int *col)
{
    *line = 1;
    *col = 1;
    for (const char *p = r->start; p < at; p++) {
        if (*p == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;   /* columns count bytes */
        }
    }
}

static mfi_json *fail(reader *r, const char *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static mfi_json *fail(reader *r, const char *at, const char *fmt, ...)
{
    if (r->failed) return NULL;
    r->failed = true;
    if (!r->err || !r->errsize) return NULL;
    int line, col;
    where(r, at, &line, &col);
    int k = snprintf(r->err, r->errsize, "line %d, column %d: ", line, col);
    if (k < 0 || (size_t)k >= r->errsize) return NULL;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err + k, r->errsize - (size_t)k, fmt, ap);
    va_end(ap);
    return NULL;
}

static void skip_ws(reader *r)
{
    while (r->s < r->end && (*r->s == ' ' || *r->s == '\n' || *r->s == '\r' || *r->s == '\t'))
        if (*r->s++ == '\n') r->line++, r->line_start = r->s;
}

/* what the text holds at p, for a message: "'x'" or "the end" */
static const char *seen(const reader *r, const char *p, char *buf, size_t size)
{
    if (p >= r->end) return "the end of the text";
    unsigned char c = (unsigned char)*p;
    if (c >= 0x20 && c < 0x7F) snprintf(buf, size, "'%c'", c);
    else snprintf(buf, size, "byte 0x%02X", c);
    return buf;
}

static mfi_json *node(reader *r, mfi_json_type t, const char *at)
{
    mfi_json *v = calloc(1, sizeof *v);
    if (!v) return fail(r, at, "out of memory");
    v->type = t;
    v->line = r->line;
    v->col = (int)(at - r->line_start) + 1;
    return v;
}

static int hex4(const char *p)
{
    int v = 0;
    for (int i = 0; i < 4; i++) {
        char h = p[i];
        int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

static size_t put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) return o[0] = (char)cp, 1;
    if (cp < 0x800) return o[0] = (char)(0xC0 | cp >> 6), o[1] = (char)(0x80 | (cp & 0x3F)), 2;
    if (cp < 0x10000)
        return o[0] = (char)(0xE0 | cp >> 12), o[1] = (char)(0x80 | (cp >> 6 & 0x3F)), o[2] = (char)(0x80 | (cp & 0x3F)), 3;
    o[0] = (char)(0xF0 | cp >> 18);
    o[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* a string at r->s (its opening quote); *out is malloc'd */
static bool read_string(reader *r, char **out, size_t *outlen)
{
    const char *open = r->s++;
    const char *close = r->s;
    while (close < r->end && *close != '"') close += *close == '\\' && close + 1 < r->end ? 2 : 1;
    if (close >= r->end) return fail(r, open, "a string is not closed"), false;
    char *buf = malloc((size_t)(close - r->s) + 1);   /* escapes never grow */
    if (!buf) return fail(r, open, "out of memory"), false;
    size_t n = 0;
    while (r->s < close) {
        unsigned char c = (unsigned char)*r->s;
        if (c < 0x20) {
            free(buf);
            return fail(r, r->s, "a control character (0x%02X) inside a string must be escaped", c), false;
        }
        if (c != '\\') {
            buf[n++] = (char)c;
            r->s++;
            continue;
        }
        const char *esc = r->s;
        char e = r->s[1];
        r->s += 2;
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e && simple) {
            static const char to[] = "\"\\/\b\f\n\r\t";
            buf[n++] = to[simple - "\"\\/bfnrt"];
            continue;
        }
        int cp = e == 'u' && close - r->s >= 4 ? hex4(r->s) : -1;
        if (cp < 0) {
            free(buf);
            return fail(r, esc, "a bad escape in a string (\\%c)", e ? e : ' '), false;
        }
        r->s += 4;
        unsigned u = (unsigned)cp;
        if (u >= 0xD800 && u < 0xDC00) {   /* a high surrogate: its low half must follow */
            int lo = close - r->s >= 6 && r->s[0] == '\\' && r->s[1] == 'u' ? hex4(r->s + 2) : -1;
            if (lo < 0xDC00 || lo >= 0xE000) {
                free(buf);
                return fail(r, esc, "\\u%04X is half of a surrogate pair without its other half", u), false;
            }
            r->s += 6;
            u = 0x10000 + ((u - 0xD800) << 10) + ((unsigned)lo - 0xDC00);
        } else if (u >= 0xDC00 && u < 0xE000) {
            free(buf);
            return fail(r, esc, "\\u%04X is half of a surrogate pair without its other half", u), false;
        }
        n += put_utf8(buf + n, u);
    }
    buf[n] = 0;
    r->s = close + 1;
    *out = buf;
    *outlen = n;
    return true;
}

/* a number at r->s, by JSON's grammar */
static mfi_json *read_number(reader *r)
{
    const char *p = r->s, *at = r->s;
    bool integral = true;
    if (p < r->end && *p == '-') p++;
    if (p < r->end && *p == '0') p++;
    else if (p < r->end && *p >= '1' && *p <= '9')
        while (p < r->end && *p >= '0' && *p <= '9') p++;
    else return fail(r, at, "a number has no digits");
    if (p < r->end && *p == '.') {
        integral = false;
        const char *d = ++p;
        while (p < r->end && *p >= '0' && *p <= '9') p++;
        if (p == d) return fail(r, at, "a number has no digits after its '.'");
    }
    if (p < r->end && (*p == 'e' || *p == 'E')) {
        integral = false;
        p++;
        if (p < r->end && (*p == '+' || *p == '-')) p++;
        const char *d = p;
        while (p < r->end && *p >= '0' && *p <= '9') p++;
        if (p == d) return fail(r, at, "a number has no digits in its exponent");
    }
    char buf[512];
    if ((size_t)(p - at) >= sizeof buf) return fail(r, at, "a number of more than %zu characters", sizeof buf - 1);
    memcpy(buf, at, (size_t)(p - at));
    buf[p - at] = 0;
    mfi_json *v = node(r, MFI_JSON_NUMBER, at);
    if (!v) return NULL;
    v->num = strtod(buf, NULL);
    if (integral) {
        errno = 0;
        long long x = strtoll(buf, NULL, 10);
        if (!errno) v->is_int = true, v->i = x;
    }
    r->s = p;
    return v;
}

static bool literal(reader *r, const char *word)
{
    size_t k = strlen(word);
    if ((size_t)(r->end - r->s) < k || memcmp(r->s, word, k)) return false;
    r->s += k;
    return true;
}

static mfi_json *read_value(reader *r, int depth);

/* an array or object at r->s (its opening bracket) */
static mfi_json *read_container(reader *r, int depth)
{
    const char *at = r->s;
    bool obj = *r->s == '{';
    char close = obj ? '}' : ']';
    if (depth >= MAX_DEPTH) return fail(r, at, "values nest deeper than %d levels", MAX_DEPTH);
    mfi_json *v = node(r, obj ? MFI_JSON_OBJECT : MFI_JSON_ARRAY, at);
    if (!v) return NULL;
    r->s++;
    skip_ws(r);
    if (r->s < r->end && *r->s == close) {
        r->s++;
        return v;
    }
    int cap = 0;
    for (;;) {
        char *key = NULL;
        skip_ws(r);
        if (obj) {
            size_t klen;
            char b[16];
            if (r->s >= r->end || *r->s != '"') {
                fail(r, r->s, "expected a key (a string) in the object opened at line %d, column %d, found %s", v->line,
                     v->col, seen(r, r->s, b, sizeof b));
                break;
            }
            if (!read_string(r, &key, &klen)) break;
            skip_ws(r);
            if (r->s >= r->end || *r->s != ':') {
                fail(r, r->s, "expected ':' after the key \"%s\", found %s", key, seen(r, r->s, b, sizeof b));
                free(key);
                break;
            }
            r->s++;
        }
        mfi_json *item = read_value(r, depth + 1);
        if (!item) {
            free(key);
            break;
        }
        if (v->n == cap) {
            int c = cap ? 2 * cap : 4;
            mfi_json **items = realloc(v->items, (size_t)c * sizeof *items);
            char **keys = items && obj ? realloc(v->keys, (size_t)c * sizeof *keys) : NULL;
            if (items) v->items = items;
            if (keys) v->keys = keys;
            if (!items || (obj && !keys)) {
                fail(r, at, "out of memory");
                free(key);
                mfi_json_free(item);
                break;
            }
            cap = c;
        }
        v->items[v->n] = item;
        if (obj) v->keys[v->n] = key;
        v->n++;
        skip_ws(r);
        if (r->s < r->end && *r->s == ',') {
            r->s++;
            skip_ws(r);
            if (r->s < r->end && *r->s == close) {
                fail(r, r->s, "a ',' before '%c' (trailing commas are not JSON)", close);
                break;
            }
            continue;
        }
        if (r->s < r->end && *r->s == close) {
            r->s++;
            return v;
        }
        char b[16];
        fail(r, r->s, "expected ',' or '%c' in the %s opened at line %d, column %d, found %s", close,
             obj ? "object" : "array", v->line, v->col, seen(r, r->s, b, sizeof b));
        break;
    }
    mfi_json_free(v);
    return NULL;
}

static mfi_json *read_value(reader *r, int depth)
{
    skip_ws(r);
    const char *at = r->s;
    if (r->s >= r->end) return fail(r, at, "expected a value, found the end of the text");
    char c = *r->s;
    if (c == '{' || c == '[') return read_container(r, depth);
    if (c == '"') {
        mfi_json *v = node(r, MFI_JSON_STRING, at);
        if (v && !read_string(r, &v->str, &v->len)) {
            mfi_json_free(v);
            return NULL;
        }
        return v;
    }
    if (c == '-' || (c >= '0' && c <= '9')) return read_number(r);
    mfi_json *v = NULL;
    if (literal(r, "true")) {
        if ((v = node(r, MFI_JSON_BOOL, at))) v->b = true;
    } else if (literal(r, "false")) {
        v = node(r, MFI_JSON_BOOL, at);
    } else if (literal(r, "null")) {
        v = node(r, MFI_JSON_NULL, at);
    } else {
        char b[16];
        return fail(r, at, "expected a value, found %s", seen(r, at, b, sizeof b));
    }
    return v;
}

mfi_json *mfi_json_parse(const char *text, size_t len, char *err, size_t errsize)
{
    if (err && errsize) err[0] = 0;
    reader r = {text, text, text + len, err, errsize, false, 1, text};
    if (!text) return fail(&r, text, "no text");
    mfi_json *v = read_value(&r, 0);
    if (!v) return NULL;
    skip_ws(&r);
    if (r.s < r.end) {
        char b[16];
        fail(&r, r.s, "%s after the JSON value", seen(&r, r.s, b, sizeof b));
        mfi_json_free(v);
        return NULL;
    }
    return v;
}

void mfi_json_free(mfi_json *v)
{
    if (!v) return;
    for (int i = 0; i < v->n; i++) {
        mfi_json_free(v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->str);
    free(v);
}

const mfi_json *mfi_json_get(const mfi_json *v, const char *key)
{
    if (!v || v->type != MFI_JSON_OBJECT || !key) return NULL;
    for (int i = 0; i < v->n; i++)
        if (!strcmp(v->keys[i], key)) return v->items[i];
    return NULL;
}

const char *mfi_json_type_name(mfi_json_type t)
{
    static const char *const names[] = {"null", "a boolean", "a number", "a string", "an array", "an object"};
    return (unsigned)t < sizeof names / sizeof *names ? names[t] : "an unknown value";
}

void mfi_json_write_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p == '\n') fputs("\\n", f);
        else if (*p == '\t') fputs("\\t", f);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}
