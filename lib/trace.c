/*
 * lib/trace.c - spans in memory, written as one Chrome/Perfetto JSON
 * trace ("X" complete events, microseconds) for all ranks.
 *
 * Each rank keeps its spans relative to its own time zero, taken right
 * after a barrier when recording starts, so the ranks' timelines line up
 * to within a barrier's skew. mf_trace_write gathers the ranks' JSON text
 * (an allgather of 8-byte words) and rank 0 writes it.
 */
#include <errno.h>
#include <stdio.h>
#include "lib/internal.h"
#include "collectives/coll.h"
#include "collectives/comm.h"

typedef struct span {
    char name[64], cat[16];
    int tid;
    double t0, t1;
} span;

static bool on;
static double zero;
static span *spans;
static int64_t nspans, cap;

bool mf_trace_enabled(void) { return on; }

void mfi_trace_shutdown(void)
{
    free(spans);
    spans = NULL;
    nspans = cap = 0;
    on = false;
}

mf_status mf_trace_enable(bool enable)
{
    if (enable && !on) {
        mfi_comm_barrier();
        zero = mf_time();
        nspans = 0;
    }
    on = enable;
    return MF_OK;
}

void mf_trace_span(const char *name, const char *cat, int tid, double t0, double t1)
{
    if (!on) return;
    if (nspans == cap) {
        int64_t nc = cap ? 2 * cap : 1024;
        span *s = realloc(spans, (size_t)nc * sizeof *s);
        if (!s) return;   /* a trace is best effort: drop the span */
        spans = s;
        cap = nc;
    }
    span *s = &spans[nspans++];
    snprintf(s->name, sizeof s->name, "%s", name ? name : "?");
    snprintf(s->cat, sizeof s->cat, "%s", cat ? cat : "?");
    s->tid = tid;
    s->t0 = t0 - zero;
    s->t1 = t1 - zero;
}

/* this rank's events as JSON objects, each followed by ",\n" */
static char *rank_json(int rank, size_t *len)
{
    size_t size = 256 + (size_t)nspans * 160;
    char *b = malloc(size);
    if (!b) return NULL;
    size_t n = (size_t)snprintf(b, size,
                                "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}},\n"
                                "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"compute\"}},\n"
                                "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":1,\"args\":{\"name\":\"comm\"}},\n",
                                rank, rank, rank, rank);
    for (int64_t i = 0; i < nspans && n < size; i++) {
        const span *s = &spans[i];
        n += (size_t)snprintf(b + n, size - n,
                              "{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f},\n",
                              s->name, s->cat, rank, s->tid, s->t0 * 1e6, (s->t1 - s->t0) * 1e6);
    }
    *len = n < size ? n : size - 1;
    return b;
}

mf_status mf_trace_write(const char *path)
{
    if (!path || !*path) MF_FAIL(MF_ERR_ARG, "mf_trace_write: no path");
    int n = mfi_comm_size(), me = mfi_comm_rank();
    size_t len = 0;
    char *mine = rank_json(me, &len);
    int64_t words = (int64_t)(len + 7) / 8, total = 0;
    int64_t *ones = calloc((size_t)n, sizeof *ones), *counts = calloc((size_t)n, sizeof *counts);
    uint64_t *text = NULL, *all = NULL;
    mf_status st = mine && ones && counts ? MF_OK : mfi_error(MF_ERR_NOMEM, "mf_trace_write: out of memory");
    if (mf_agree(st) != MF_OK) goto out;
    for (int r = 0; r < n; r++) ones[r] = 1;
    MF_TRY_OUT(mfi_allgather(mfi_comm_world(), &words, counts, ones, MF_I64));
    for (int r = 0; r < n; r++) total += counts[r];
    text = calloc((size_t)words + 1, 8);
    all = calloc((size_t)total + 1, 8);
    st = text && all ? MF_OK : mfi_error(MF_ERR_NOMEM, "mf_trace_write: out of memory");
    MF_TRY_OUT(mf_agree(st));
    memcpy(text, mine, len);   /* padded with NULs, skipped below */
    MF_TRY_OUT(mfi_allgather(mfi_comm_world(), text, all, counts, MF_I64));
    if (me == 0) {
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        FILE *f = fopen(tmp, "w");
        if (!f) st = mfi_error(MF_ERR_IO, "mf_trace_write: cannot create %s: %s", tmp, strerror(errno));
        else {
            const char *c = (const char *)all;
            size_t bytes = (size_t)total * 8, last = 0;
            fputs("[\n", f);
            for (size_t k = 0; k < bytes; k++)   /* the events, minus the last ",\n" */
                if (c[k]) last = k;
            for (size_t k = 0; k + 1 < last; k++)
                if (c[k]) fputc(c[k], f);
            fputs("\n]\n", f);
            if (fclose(f) != 0 || rename(tmp, path) != 0) {
                st = mfi_error(MF_ERR_IO, "mf_trace_write: cannot write %s: %s", path, strerror(errno));
                remove(tmp);
            }
        }
    }
    st = mf_agree(st);
out:
    free(ones);
    free(counts);
    free(text);
    free(all);
    free(mine);
    return st;
}

double mf_trace_hidden(const char *comm_cat, const char *inside, double *comm_seconds)
{
    /* the spans named `inside`, in recording order: chronological and
     * disjoint (one backward at a time) */
    int64_t nb = 0, *b = malloc((size_t)(nspans + 1) * sizeof *b);
    size_t len = strlen(inside);   /* "backward" also matches "backward 3" (pipeline micro-batches) */
    for (int64_t j = 0; b && j < nspans; j++)
        if (!strncmp(spans[j].name, inside, len) && (!spans[j].name[len] || spans[j].name[len] == ' ')) b[nb++] = j;
    double total = 0, hidden = 0;
    for (int64_t i = 0; i < nspans; i++) {
        const span *c = &spans[i];
        if (strcmp(c->cat, comm_cat)) continue;
        total += c->t1 - c->t0;
        int64_t lo = 0, hi = nb;   /* the first `inside` span ending after c starts */
        while (lo < hi) {
            int64_t mid = (lo + hi) / 2;
            if (spans[b[mid]].t1 <= c->t0) lo = mid + 1;
            else hi = mid;
        }
        for (int64_t k = lo; k < nb && spans[b[k]].t0 < c->t1; k++) {
            double a0 = c->t0 > spans[b[k]].t0 ? c->t0 : spans[b[k]].t0;
            double a1 = c->t1 < spans[b[k]].t1 ? c->t1 : spans[b[k]].t1;
            if (a1 > a0) hidden += a1 - a0;
        }
    }
    free(b);
    if (comm_seconds) *comm_seconds = total;
    return total > 0 ? hidden / total : 0;
}
