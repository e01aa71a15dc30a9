/*
 * lib/io/tokens.c - token datasets for language models (doc/gpt.md):
 * any text read as bytes (vocabulary 256), llm.c's token shards and
 * nanoGPT's raw uint16 .bin files.
 *
 * A dataset is one token stream cut into windows of seq_len + 1 tokens:
 * window k starts at token k * seq_len, its first seq_len tokens are the
 * input and its last seq_len the targets. The loader draws windows
 * through the same permutation as images (doc/design.md section 5), so
 * every rank count sees the same batches.
 *
 * llm.c's shards start with 256 int32: the magic 20240520, version 1 and
 * the token count, then the uint16 tokens. A file is taken for such a
 * shard when its int32 3..255 are zero (a header's padding; a raw stream
 * would need 506 zero tokens in a row), and must then carry the magic,
 * version 1 and exactly the tokens its header counts.
 */
#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include "lib/io/dataset_internal.h"

enum { LLMC_MAGIC = 20240520, LLMC_HEADER = 256 };

/* a growing token stream */
typedef struct stream {
    uint16_t *t;
    int64_t n, cap;
} stream;

static mf_status reserve(stream *s, int64_t more)
{
    if (s->n + more <= s->cap) return MF_OK;
    int64_t cap = s->cap ? s->cap : 1 << 16;
    while (cap < s->n + more) cap *= 2;
    uint16_t *t = realloc(s->t, (size_t)cap * sizeof *t);
    if (!t) MF_FAIL(MF_ERR_NOMEM, "token dataset: out of memory for %lld tokens", (long long)cap);
    s->t = t;
    s->cap = cap;
    return MF_OK;
}

/* the whole file; *n its size */
static unsigned char *read_all(const char *path, int64_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        mfi_error(MF_ERR_IO, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat sb;
    unsigned char *buf = NULL;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        mfi_error(MF_ERR_IO, "%s is not a regular file", path);
    } else if (!(buf = malloc((size_t)sb.st_size + 1))) {
        mfi_error(MF_ERR_NOMEM, "out of memory reading %s (%lld bytes)", path, (long long)sb.st_size);
    } else if (fread(buf, 1, (size_t)sb.st_size, f) != (size_t)sb.st_size) {
        mfi_error(MF_ERR_IO, "cannot read %s: %s", path, ferror(f) ? strerror(errno) : "the file shrank");
        free(buf);
        buf = NULL;
    } else {
        *n = sb.st_size;
    }
    fclose(f);
    return buf;
}

static int32_t le32(const unsigned char *p) { return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24); }

/* Appends the tokens of one llm.c shard or raw uint16 file. */
static mf_status append_token_file(stream *s, const char *path)
{
    int64_t size = 0;
    unsigned char *b = read_all(path, &size);
    if (!b) return mf_last_status();
    mf_status st = MF_OK;
    int64_t off = 0, count;
    bool header = size >= 4 * LLMC_HEADER;
    for (int i = 3; header && i < LLMC_HEADER; i++) header = le32(b + 4 * i) == 0;
    if (header) {
        int32_t magic = le32(b), version = le32(b + 4);
        count = le32(b + 8);
        off = 4 * LLMC_HEADER;
        if (magic != LLMC_MAGIC)
            st = mfi_error(MF_ERR_FORMAT, "%s: bad magic number %d: llm.c token shards start with %d", path, magic, LLMC_MAGIC);
        else if (version != 1)
            st = mfi_error(MF_ERR_FORMAT, "%s: llm.c shard version %d; this release reads version 1", path, version);
        else if (count < 0 || off + 2 * count != size)
            st = mfi_error(MF_ERR_FORMAT, "%s: truncated or padded: the header counts %lld tokens (%lld bytes) but the "
                           "file holds %lld bytes after it", path, (long long)count, (long long)(2 * count), (long long)(size - off));
    } else {
        if (size % 2) st = mfi_error(MF_ERR_FORMAT, "%s: %lld bytes, an odd count: not a file of uint16 tokens", path, (long long)size);
        count = size / 2;
    }
    if (st == MF_OK) st = reserve(s, count);
    for (int64_t i = 0; st == MF_OK && i < count; i++) s->t[s->n++] = (uint16_t)(b[off + 2 * i] | b[off + 2 * i + 1] << 8);
    free(b);
    return st;
}

static mf_status append_bytes(stream *s, const char *path)
{
    int64_t size = 0;
    unsigned char *b = read_all(path, &size);
    if (!b) return mf_last_status();
    mf_status st = reserve(s, size);
    for (int64_t i = 0; st == MF_OK && i < size; i++) s->t[s->n++] = b[i];
    free(b);
    return st;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The text files of a directory, sorted: regular files only (no links,
 * no fortune's .dat indexes). */
static mf_status append_dir(stream *s, const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) MF_FAIL(MF_ERR_IO, "cannot open %s: %s", dir, strerror(errno));
    char **names = NULL;
    int n = 0, cap = 0;
    mf_status st = MF_OK;
    for (struct dirent *e; st == MF_OK && (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (e->d_name[0] == '.' || (len > 4 && !strcmp(e->d_name + len - 4, ".dat"))) continue;
        char path[4096];
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (lstat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
        if (n == cap) {
            char **m = realloc(names, (size_t)(cap = cap ? 2 * cap : 64) * sizeof *m);
            if (!m) {
                st = mfi_error(MF_ERR_NOMEM, "out of memory listing %s", dir);
                break;
            }
            names = m;
        }
        if (!(names[n] = strdup(path))) st = mfi_error(MF_ERR_NOMEM, "out of memory listing %s", dir);
        else n++;
    }
    closedir(d);
    if (st == MF_OK && n == 0) st = mfi_error(MF_ERR_IO, "%s holds no text files", dir);
    if (st == MF_OK) qsort(names, (size_t)n, sizeof *names, by_name);
    for (int i = 0; i < n; i++) {
        if (st == MF_OK) st = append_bytes(s, names[i]);
        free(names[i]);
    }
    free(names);
    return st;
}

/* A dataset over tokens [begin, end) of s (taken over when whole). */
static mf_dataset *windows(stream *s, int64_t begin, int64_t end, int seq_len, int vocab, const char *source)
{
    mf_dataset *ds = NULL;
    int64_t n = end - begin;
    if (n < (int64_t)seq_len + 1) {
        mfi_error(MF_ERR_FORMAT, "%s: %lld tokens, fewer than one window of seq_len + 1 = %d", source, (long long)n,
                  seq_len + 1);
        goto fail;
    }
    for (int64_t i = begin; i < end; i++)
        if (s->t[i] >= vocab) {
            mfi_error(MF_ERR_FORMAT, "%s: token %d at position %lld is not below the vocabulary size %d", source,
                      s->t[i], (long long)(i - begin), vocab);
            goto fail;
        }
    ds = calloc(1, sizeof *ds);
    if (!ds) {
        mfi_error(MF_ERR_NOMEM, "token dataset: out of memory");
        goto fail;
    }
    if (begin == 0 && end == s->n) {
        ds->tokens = s->t;
        s->t = NULL;
    } else if ((ds->tokens = malloc((size_t)n * sizeof *ds->tokens))) {
        memcpy(ds->tokens, s->t + begin, (size_t)n * sizeof *ds->tokens);
    } else {
        mfi_error(MF_ERR_NOMEM, "token dataset: out of memory for %lld tokens", (long long)n);
        free(ds);
        ds = NULL;
        goto fail;
    }
    ds->ntokens = n;
    ds->seq_len = seq_len;
    ds->n = (n - 1) / seq_len;
    ds->classes = vocab;
    snprintf(ds->source, sizeof ds->source, "%s", source);
fail:
    return ds;
}

static bool check_args(const char *fn, const char *path, int seq_len, int vocab)
{
    if (!path || !*path) mfi_error(MF_ERR_ARG, "%s: no path", fn);
    else if (seq_len < 1) mfi_error(MF_ERR_ARG, "%s: seq_len %d must be >= 1", fn, seq_len);
    else if (vocab < 2 || vocab > 65536) mfi_error(MF_ERR_ARG, "%s: vocabulary size %d is not in 2 .. 65536", fn, vocab);
    else return true;
    return false;
}

mf_dataset *mf_dataset_text(const char *path, double begin, double end, int seq_len)
{
    if (!check_args("mf_dataset_text", path, seq_len, 256)) return NULL;
    if (!(begin >= 0 && begin < end && end <= 1)) {
        mfi_error(MF_ERR_ARG, "mf_dataset_text: the range [%g, %g) is not inside [0, 1]", begin, end);
        return NULL;
    }
    stream s = {0};
    struct stat sb;
    mf_status st = stat(path, &sb) != 0 ? mfi_error(MF_ERR_IO, "cannot open %s: %s", path, strerror(errno))
                   : S_ISDIR(sb.st_mode) ? append_dir(&s, path)
                                         : append_bytes(&s, path);
    mf_dataset *ds = NULL;
    if (st == MF_OK) {
        char what[600];
        snprintf(what, sizeof what, "%s [%g, %g)", path, begin, end);
        ds = windows(&s, (int64_t)(begin * (double)s.n), (int64_t)(end * (double)s.n), seq_len, 256, what);
    }
    free(s.t);
    return ds;
}

/* "val" in the file's own name */
static bool is_val(const char *path)
{
    const char *base = strrchr(path, '/');
    return strstr(base ? base + 1 : path, "val") != NULL;
}

mf_dataset *mf_dataset_tokens(const char *pattern, bool val, int seq_len, int vocab_size)
{
    if (!check_args("mf_dataset_tokens", pattern, seq_len, vocab_size)) return NULL;
    glob_t g;
    int rc = glob(pattern, 0, NULL, &g);
    if (rc != 0) {
        if (rc == GLOB_NOMATCH) mfi_error(MF_ERR_IO, "mf_dataset_tokens: no file matches %s", pattern);
        else mfi_error(MF_ERR_IO, "mf_dataset_tokens: cannot expand %s", pattern);
        globfree(&g);
        return NULL;
    }
    size_t nval = 0;
    for (size_t i = 0; i < g.gl_pathc; i++) nval += is_val(g.gl_pathv[i]);
    bool by_name = nval > 0 && nval < g.gl_pathc;   /* else the last tenth is the validation split */
    stream s = {0};
    mf_status st = MF_OK;
    for (size_t i = 0; i < g.gl_pathc && st == MF_OK; i++)
        if (!by_name || is_val(g.gl_pathv[i]) == val) st = append_token_file(&s, g.gl_pathv[i]);
    globfree(&g);
    mf_dataset *ds = NULL;
    if (st == MF_OK) {
        char what[600];
        int64_t cut = s.n - s.n / 10;
        snprintf(what, sizeof what, "%s (%s%s)", pattern, val ? "validation" : "training", by_name ? " files" : " split");
        ds = by_name ? windows(&s, 0, s.n, seq_len, vocab_size, what)
             : val   ? windows(&s, cut, s.n, seq_len, vocab_size, what)
                     : windows(&s, 0, cut, seq_len, vocab_size, what);
    }
    free(s.t);
    return ds;
}

bool mf_dataset_is_tokens(const mf_dataset *ds) { return ds && ds->tokens; }
int mf_dataset_seq_len(const mf_dataset *ds) { return ds && ds->tokens ? ds->seq_len : 0; }
int64_t mf_dataset_num_tokens(const mf_dataset *ds) { return ds && ds->tokens ? ds->ntokens : 0; }

const uint16_t *mfi_dataset_tokens(const mf_dataset *ds) { return ds->tokens; }
