/*
 * collectives/ledger.c - recording every wait on other ranks for the
 * watchdog (MF_TIMEOUT; collectives/ledger.h, watchdog.c).
 *
 * enter and leave cost one uncontended mutex and a few copies, and only
 * when MF_TIMEOUT is set; a communicator's name and world ranks are
 * worked out once and kept with it (doc/performance.md measures the
 * overhead).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "collectives/coll_internal.h"
#include "collectives/ledger.h"

mfi_ledger mfi_ledger_state = {.mu = PTHREAD_MUTEX_INITIALIZER};
#define L mfi_ledger_state

static int generation;                      /* bumped by every reset */
static _Thread_local int my_slot = -1, my_generation, depth;
static _Thread_local char context[MFI_LEDGER_WHAT];   /* mfi_ledger_context */

double mfi_ledger_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

bool mfi_ledger_on(void) { return L.on; }

void mfi_ledger_context(const char *text)
{
    if (L.on) snprintf(context, sizeof context, "%s", text ? text : "");
}

void mfi_ledger_context_copy(char *buf, size_t size)
{
    if (size) snprintf(buf, size, "%s", L.on ? context : "");
}

void mfi_ledger_reset(bool on)
{
    pthread_mutex_lock(&L.mu);
    L.ncomms = 0;
    memset(L.slots, 0, sizeof L.slots);
    generation++;
    L.on = on;
    pthread_mutex_unlock(&L.mu);
}

/* "ranks 0-3" / "ranks 0,2,5": a list of world ranks, runs joined */
static void ranks_text(const int *ranks, int n, char *name, size_t len)
{
    size_t at = (size_t)snprintf(name, len, "rank%s ", n == 1 ? "" : "s");
    for (int i = 0; i < n && at < len; i++) {
        int j = i;
        while (j + 1 < n && ranks[j + 1] == ranks[j] + 1) j++;
        at += (size_t)snprintf(name + at, len - at, "%s%d", i ? "," : "", ranks[i]);
        if (j > i + 1 && at < len) at += (size_t)snprintf(name + at, len - at, "-%d", ranks[j]);
        else if (j == i + 1 && at < len) at += (size_t)snprintf(name + at, len - at, ",%d", ranks[j]);
        i = j;
    }
}

/* c's name and its members' world ranks, worked out at its first wait
 * (with mu held); false when out of memory */
static bool describe_comm(mfi_comm *c)
{
    if (c->ledger_name) return true;
    int *ranks = malloc((size_t)c->size * sizeof *ranks), *idx = malloc((size_t)c->size * sizeof *idx);
    char *name = malloc(MFI_LEDGER_NAME);
    if (!ranks || !idx || !name) {
        free(ranks);
        free(idx);
        free(name);
        return false;
    }
    MPI_Group g, wg;
    MPI_Comm_group(c->comm, &g);
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    for (int i = 0; i < c->size; i++) idx[i] = i;
    MPI_Group_translate_ranks(g, c->size, idx, wg, ranks);
    MPI_Group_free(&g);
    MPI_Group_free(&wg);
    free(idx);
    ranks_text(ranks, c->size, name, MFI_LEDGER_NAME);
    if (c->is_twin) {
        size_t at = strlen(name);
        snprintf(name + at, MFI_LEDGER_NAME - at, ", non-blocking");
    }
    c->world_ranks = ranks;
    c->ledger_name = name;
    return true;
}

/* this thread's slot (with mu held), or NULL when all are taken */
static mfi_ledger_slot *slot_of_thread(void)
{
    if (my_slot >= 0 && my_generation == generation) return &L.slots[my_slot];
    for (int k = 0; k < MFI_LEDGER_SLOTS; k++)
        if (!L.slots[k].used) {
            L.slots[k].used = true;
            my_slot = k;
            my_generation = generation;
            return &L.slots[k];
        }
    return NULL;
}

/* the number of communicator c, counting this entry; -1 when the table
 * is full (the wait is still recorded, unnumbered). Its place in the
 * table is kept with c. */
static int count_on(mfi_comm *c, long *seq)
{
    int k = c->ledger_gen == generation + 1 ? c->ledger_index : -1;
    if (k < 0) {
        k = 0;
        while (k < L.ncomms && strcmp(L.comms[k].name, c->ledger_name)) k++;
        if (k == L.ncomms) {
            if (L.ncomms == MFI_LEDGER_COMMS) return *seq = 0, -1;
            snprintf(L.comms[k].name, sizeof L.comms[k].name, "%s", c->ledger_name);
            L.comms[k].seq = 0;
            L.ncomms++;
        }
        c->ledger_index = k;
        c->ledger_gen = generation + 1;   /* 0: never placed (calloc'd communicators) */
    }
    *seq = ++L.comms[k].seq;
    return k;
}

/* Records this thread's wait: the collective op on c (peers NULL), or a
 * point-to-point op with the given ranks of c. The token for leave: 0
 * not recorded, -1 nested in (or not fitting) another, 1 recorded. */
static int enter(mfi_comm *c, const char *op, const int *peers, int npeers)
{
    if (!L.on || !c || c->size < 2 || c->sim) return 0;
    if (depth++ > 0) return -1;
    double t = mfi_ledger_now();
    pthread_mutex_lock(&L.mu);
    mfi_ledger_slot *s = slot_of_thread();
    if (!s || !describe_comm(c)) {
        pthread_mutex_unlock(&L.mu);
        return -1;
    }
    s->comm = peers ? -1 : count_on(c, &s->seq);
    if (peers) s->seq = 0;
    s->op = op;
    s->what = context;
    s->where = c->ledger_name;
    s->world = c->world_ranks;
    s->peers = peers;
    s->n = peers ? npeers : c->size;
    s->size = c->size;
    s->since = t;
    s->reported = false;
    s->in = true;
    pthread_mutex_unlock(&L.mu);
    return 1;
}

int mfi_ledger_enter(mfi_comm *c, const char *op) { return enter(c, op, NULL, 0); }

int mfi_ledger_enter_p2p(mfi_comm *c, const char *op, const int *peers, int npeers)
{
    return npeers > 0 ? enter(c, op, peers, npeers) : 0;
}

void mfi_ledger_leave(int token)
{
    if (!token) return;
    depth--;
    if (token < 0) return;
    pthread_mutex_lock(&L.mu);
    if (my_slot >= 0 && my_generation == generation) L.slots[my_slot].in = false;
    pthread_mutex_unlock(&L.mu);
}

void mfi_ledger_thread_done(void)
{
    pthread_mutex_lock(&L.mu);
    if (my_slot >= 0 && my_generation == generation) memset(&L.slots[my_slot], 0, sizeof L.slots[my_slot]);
    my_slot = -1;
    pthread_mutex_unlock(&L.mu);
}

long mfi_ledger_seq_locked(const char *name)
{
    for (int k = 0; k < L.ncomms; k++)
        if (!strcmp(L.comms[k].name, name)) return L.comms[k].seq;
    return 0;
}

void mfi_ledger_copy_locked(const mfi_ledger_slot *s, mfi_ledger_wait *w)
{
    w->comm = s->comm;
    w->seq = s->seq;
    w->since = s->since;
    snprintf(w->op, sizeof w->op, "%s", s->op);
    snprintf(w->what, sizeof w->what, "%s", s->what);
    w->nmembers = 0;
    for (int i = 0; i < s->n && w->nmembers < MFI_LEDGER_MEMBERS; i++) {
        int r = s->peers ? s->peers[i] : i, wr = r >= 0 && r < s->size ? s->world[r] : -1;
        bool seen = wr < 0;
        for (int j = 0; j < w->nmembers && !seen; j++) seen = w->members[j] == wr;
        if (!seen) w->members[w->nmembers++] = wr;
    }
    if (s->peers) ranks_text(w->members, w->nmembers, w->where, sizeof w->where);
    else snprintf(w->where, sizeof w->where, "%s", s->where);
}

void mfi_ledger_describe_locked(char *buf, size_t size)
{
    size_t at = 0;
    double t = mfi_ledger_now();
    mfi_ledger_wait *w = malloc(sizeof *w);
    for (int k = 0; w && k < MFI_LEDGER_SLOTS && at < size; k++) {
        const mfi_ledger_slot *s = &L.slots[k];
        if (!s->in) continue;
        mfi_ledger_copy_locked(s, w);
        if (w->comm >= 0)
            at += (size_t)snprintf(buf + at, size - at, "%s %s #%ld on %s for %.1f s", at ? "; and in" : "now in",
                                   w->op, w->seq, w->where, t - w->since);
        else
            at += (size_t)snprintf(buf + at, size - at, "%s %s%s%s%s with %s for %.1f s", at ? "; and in" : "now in",
                                   w->op, *w->what ? " (" : "", w->what, *w->what ? ")" : "", w->where, t - w->since);
    }
    free(w);
    if (!at && size) snprintf(buf, size, "now not communicating");
}
