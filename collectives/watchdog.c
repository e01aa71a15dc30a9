/*
 * collectives/watchdog.c - MF_TIMEOUT=secs: a collective that does not
 * complete in time is reported, with who has not arrived, and the job is
 * aborted instead of hanging until its time limit.
 *
 * The ledger: each rank counts the collectives it enters on each
 * communicator (sequence numbers #1, #2, ... per communicator, named by
 * its world ranks) and records the one it is in now: the collective, its
 * number and what it moves (the tensor and SBPs boxing hands down).
 *
 * A watchdog thread per rank, on a communicator of its own, serves
 * queries about its rank's ledger and watches its own rank: when the main
 * thread has been in one collective for MF_TIMEOUT seconds, it asks every
 * other member of that communicator how far it has got, prints one report
 *
 *   mpiflow watchdog: rank 0 has waited 10.0 s in allreduce #42 on ranks
 *   0-3 (boxing 'hidden.weight' f32 [512,784] P -> B); not arrived: rank 2
 *   (at #41 there; now not in a collective); arrived: ranks 0, 1, 3
 *
 * and calls MPI_Abort, so the launcher (mpiexec, srun) ends the job with
 * a non-zero code. It needs MPI_THREAD_MULTIPLE; without it MF_TIMEOUT is
 * refused at mf_init.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "collectives/coll_internal.h"
#include "lib/error.h"

enum { MAXC = 64, TAG_Q = 1, TAG_A = 2 };

typedef struct used { char name[96]; long seq; } used;

static struct {
    pthread_mutex_t mu;
    pthread_t main, thread;
    bool on, reported;
    double timeout;
    MPI_Comm comm;            /* the watchdog threads' own */
    used comms[MAXC];         /* communicators used, with their last sequence number */
    int ncomms;
    bool in;                  /* the main thread is in a collective: */
    int cur;                  /* ... comms[cur], number comms[cur].seq */
    char op[32], what[192];
    int members[1024], nmembers;
    double since;
} w = {.mu = PTHREAD_MUTEX_INITIALIZER};

static atomic_bool stopping;
static _Thread_local char context[192];   /* what boxing moves (mfi_ledger_context) */

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

bool mfi_ledger_on(void) { return w.on; }

void mfi_ledger_context(const char *text)
{
    if (w.on) snprintf(context, sizeof context, "%s", text ? text : "");
}

/* "ranks 0-3" / "ranks 0,2" for c's members in world ranks */
static void members_of(mf_comm *c, char *name, size_t len, int *ranks, int *n)
{
    MPI_Group g, wg;
    MPI_Comm_group(c->comm, &g);
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    int k = c->size < 1024 ? c->size : 1024, idx[1024];
    for (int i = 0; i < k; i++) idx[i] = i;
    MPI_Group_translate_ranks(g, k, idx, wg, ranks);
    MPI_Group_free(&g);
    MPI_Group_free(&wg);
    *n = k;
    size_t at = (size_t)snprintf(name, len, "ranks ");
    for (int i = 0; i < k && at < len; i++) {
        int j = i;
        while (j + 1 < k && ranks[j + 1] == ranks[j] + 1) j++;
        at += (size_t)snprintf(name + at, len - at, "%s%d", i ? "," : "", ranks[i]);
        if (j > i + 1 && at < len) at += (size_t)snprintf(name + at, len - at, "-%d", ranks[j]);
        else if (j == i + 1 && at < len) at += (size_t)snprintf(name + at, len - at, ",%d", ranks[j]);
        i = j;
    }
}

int mfi_ledger_enter(mf_comm *c, const char *op)
{
    if (!w.on || !c || c->size < 2 || !pthread_equal(pthread_self(), w.main)) return 0;
    char name[96];
    int ranks[1024], n;
    members_of(c, name, sizeof name, ranks, &n);
    pthread_mutex_lock(&w.mu);
    int k = 0;
    while (k < w.ncomms && strcmp(w.comms[k].name, name)) k++;
    if (k == w.ncomms && w.ncomms < MAXC) snprintf(w.comms[w.ncomms++].name, sizeof name, "%s", name);
    if (k < w.ncomms) {
        w.comms[k].seq++;
        w.cur = k;
        w.in = true;
        snprintf(w.op, sizeof w.op, "%s", op);
        snprintf(w.what, sizeof w.what, "%s", context);
        memcpy(w.members, ranks, (size_t)n * sizeof *ranks);
        w.nmembers = n;
        w.since = now();
    }
    pthread_mutex_unlock(&w.mu);
    return k < MAXC ? 1 : 0;
}

void mfi_ledger_leave(int token)
{
    if (!token) return;
    pthread_mutex_lock(&w.mu);
    w.in = false;
    pthread_mutex_unlock(&w.mu);
}

/* a query names a communicator; the answer: this rank's number there,
 * and what it is in now */
typedef struct answer { long seq; char now[256]; } answer;

static void answer_for(const char *name, answer *a)
{
    pthread_mutex_lock(&w.mu);
    a->seq = 0;
    for (int k = 0; k < w.ncomms; k++)
        if (!strcmp(w.comms[k].name, name)) a->seq = w.comms[k].seq;
    if (w.in)
        snprintf(a->now, sizeof a->now, "now in %s #%ld on %s for %.1f s", w.op, w.comms[w.cur].seq,
                 w.comms[w.cur].name, now() - w.since);
    else
        snprintf(a->now, sizeof a->now, "now not in a collective");
    pthread_mutex_unlock(&w.mu);
}

static void serve(void)
{
    int flag = 1;
    while (flag) {
        MPI_Status s;
        MPI_Iprobe(MPI_ANY_SOURCE, TAG_Q, w.comm, &flag, &s);
        if (!flag) break;
        char name[96];
        MPI_Recv(name, sizeof name, MPI_CHAR, s.MPI_SOURCE, TAG_Q, w.comm, MPI_STATUS_IGNORE);
        answer a;
        answer_for(name, &a);
        MPI_Send(&a, (int)sizeof a, MPI_BYTE, s.MPI_SOURCE, TAG_A, w.comm);
    }
}

/* asks the members and prints the report */
static void report(void)
{
    pthread_mutex_lock(&w.mu);
    char name[96], op[32], what[192];
    snprintf(name, sizeof name, "%s", w.comms[w.cur].name);
    snprintf(op, sizeof op, "%s", w.op);
    snprintf(what, sizeof what, "%s", w.what);
    long seq = w.comms[w.cur].seq;
    int n = w.nmembers, *members = malloc((size_t)n * sizeof *members);
    double waited = now() - w.since;
    if (members) memcpy(members, w.members, (size_t)n * sizeof *members);
    pthread_mutex_unlock(&w.mu);
    int me;
    MPI_Comm_rank(w.comm, &me);
    answer *ans = calloc((size_t)n, sizeof *ans);
    MPI_Request *req = calloc((size_t)n, sizeof *req);
    MPI_Status *sts = calloc((size_t)n + 1, sizeof *sts);
    char *msg = malloc(8192);
    if (!members || !ans || !req || !sts || !msg) {
        fprintf(stderr, "mpiflow watchdog: rank %d has waited %.1f s in %s #%ld on %s (no memory to ask the others)\n",
                me, waited, op, seq, name);
        n = 0;
    }
    for (int i = 0; i < n; i++) {
        req[i] = MPI_REQUEST_NULL;
        if (members[i] == me) continue;
        ans[i].seq = -1;
        MPI_Irecv(&ans[i], (int)sizeof ans[i], MPI_BYTE, members[i], TAG_A, w.comm, &req[i]);
        MPI_Send(name, (int)sizeof name, MPI_CHAR, members[i], TAG_Q, w.comm);
    }
    double t0 = now();
    int done = 0;
    while (!done && now() - t0 < 5) {   /* keep answering others meanwhile: they may be asking us */
        serve();
        MPI_Testall(n, req, &done, sts);
        if (!done) nanosleep(&(struct timespec){0, 10000000}, NULL);
    }
    if (!msg) goto out;
    size_t at = (size_t)snprintf(msg, 8192, "mpiflow watchdog: rank %d has waited %.1f s in %s #%ld on %s%s%s%s; "
                                            "not arrived:", me, waited, op, seq, name, *what ? " (" : "", what,
                                 *what ? ")" : "");
    int late = 0;
    for (int i = 0; i < n && at < 8192; i++)
        if (members[i] != me && ans[i].seq < seq) {
            late++;
            if (ans[i].seq < 0)
                at += (size_t)snprintf(msg + at, 8192 - at, " rank %d (no answer in 5 s)", members[i]);
            else
                at += (size_t)snprintf(msg + at, 8192 - at, " rank %d (at #%ld there; %s)", members[i], ans[i].seq,
                                       ans[i].now);
        }
    if (!late && at < 8192) at += (size_t)snprintf(msg + at, 8192 - at, " none (a deadlock inside MPI?)");
    if (at < 8192) at += (size_t)snprintf(msg + at, 8192 - at, "; arrived:");
    for (int i = 0; i < n && at < 8192; i++)
        if (members[i] == me || ans[i].seq >= seq) at += (size_t)snprintf(msg + at, 8192 - at, " %d", members[i]);
    fprintf(stderr, "%s\n", msg);
out:
    free(members);
    free(ans);
    free(req);
    free(sts);
    free(msg);
}

/* The one place the library ends the job itself: the user asked for it
 * with MF_TIMEOUT, and the job is hung (tests/layering.sh allows it). */
static void end_job(void)
{
    fprintf(stderr, "mpiflow watchdog: aborting the job (MF_TIMEOUT=%g)\n", w.timeout);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);   /* MF_TIMEOUT asked for it */
}

static void *watch(void *arg)
{
    (void)arg;
    while (!atomic_load(&stopping)) {
        serve();
        pthread_mutex_lock(&w.mu);
        bool late = w.in && !w.reported && now() - w.since > w.timeout;
        if (late) w.reported = true;
        pthread_mutex_unlock(&w.mu);
        if (late) {
            report();
            end_job();
        }
        nanosleep(&(struct timespec){0, 20000000}, NULL);
    }
    return NULL;
}

mf_status mfi_watchdog_start(void)
{
    const char *e = getenv("MF_TIMEOUT");
    if (!e || !*e) return MF_OK;
    char *end;
    double t = strtod(e, &end);
    if (*end || !(t > 0)) MF_FAIL(MF_ERR_ARG, "MF_TIMEOUT='%s' is not a number of seconds > 0", e);
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    if (level != MPI_THREAD_MULTIPLE)
        MF_FAIL(MF_ERR_ARG, "MF_TIMEOUT needs MPI_THREAD_MULTIPLE for its watchdog thread; this MPI gives less");
    MFI_MPI_TRY(MPI_Comm_dup(MPI_COMM_WORLD, &w.comm));
    w.timeout = t;
    w.main = pthread_self();
    atomic_store(&stopping, false);
    w.reported = false;
    w.ncomms = 0;
    if (pthread_create(&w.thread, NULL, watch, NULL) != 0) {
        MPI_Comm_free(&w.comm);
        MF_FAIL(MF_ERR_INTERNAL, "MF_TIMEOUT: cannot start the watchdog thread");
    }
    w.on = true;
    return MF_OK;
}

void mfi_watchdog_stop(void)
{
    if (!w.on) return;
    atomic_store(&stopping, true);
    pthread_join(w.thread, NULL);
    MPI_Comm_free(&w.comm);
    w.on = false;
}
