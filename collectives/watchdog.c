/*
 * collectives/watchdog.c - MF_TIMEOUT=secs: a wait on other ranks that
 * does not end in time is reported, with who has not arrived, and the
 * job is aborted instead of hanging until its time limit.
 *
 * The ledger (ledger.c) records every wait mpiflow starts, on any
 * thread: collectives, the progress thread's gradient buckets,
 * point-to-point transfers and checkpoint I/O. A watchdog thread per
 * rank, on a communicator of its own, serves queries about its rank's
 * ledger and watches its own rank's threads: when one has waited
 * MF_TIMEOUT seconds, it asks every other member how far it has got,
 * prints one report
 *
 *   mpiflow watchdog: rank 0 has waited 10.0 s in allreduce #42 on ranks
 *   0-3 (boxing 'hidden.weight' f32 [512,784] P -> B); not arrived: rank 2
 *   (at #41 there; now not communicating); arrived: 0 1 3
 *
 *   mpiflow watchdog: rank 1 has waited 10.0 s in point-to-point with
 *   rank 0 (pipeline recv of micro-batch 2's activation from stage 0);
 *   waiting for: rank 0 (no answer in 5 s)
 *
 * and calls MPI_Abort, so the launcher (mpiexec, srun) ends the job with
 * a non-zero code. A stopped or dead rank cannot answer: "no answer in
 * 5 s" names it. It needs MPI_THREAD_MULTIPLE; without it MF_TIMEOUT is
 * refused at mf_init.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "collectives/coll_internal.h"
#include "collectives/ledger.h"
#include "base/error.h"

enum { TAG_Q = 1, TAG_A = 2, MSG = 8192 };
#define L mfi_ledger_state

static struct {
    pthread_t thread;
    double timeout;
    long poll_ns;             /* how often it looks: timeout/50, 20 to 250 ms */
    MPI_Comm comm;            /* the watchdog threads' own */
} w;

static atomic_bool stopping;

/* a query names a communicator; the answer: this rank's number there,
 * and what it waits on now */
typedef struct answer { long seq; char now[512]; } answer;

static void serve(void)
{
    int flag = 1;
    while (flag) {
        MPI_Status s;
        MPI_Iprobe(MPI_ANY_SOURCE, TAG_Q, w.comm, &flag, &s);
        if (!flag) break;
        char name[MFI_LEDGER_NAME];
        MPI_Recv(name, sizeof name, MPI_CHAR, s.MPI_SOURCE, TAG_Q, w.comm, MPI_STATUS_IGNORE);
        name[sizeof name - 1] = 0;
        answer a;
        pthread_mutex_lock(&L.mu);
        a.seq = mfi_ledger_seq_locked(name);
        mfi_ledger_describe_locked(a.now, sizeof a.now);
        pthread_mutex_unlock(&L.mu);
        MPI_Send(&a, (int)sizeof a, MPI_BYTE, s.MPI_SOURCE, TAG_A, w.comm);
    }
}

/* Asks every member of wait s but this rank (answers in ans, seq -1
 * when none came in 5 s), answering the others' queries meanwhile: they
 * may be asking us. */
static void ask(const mfi_ledger_wait *s, const char *comm, int me, answer *ans, MPI_Request *req, MPI_Status *sts)
{
    char name[MFI_LEDGER_NAME] = "";   /* sent whole: the fixed size the receiver expects */
    snprintf(name, sizeof name, "%s", comm);
    for (int i = 0; i < s->nmembers; i++) {
        req[i] = MPI_REQUEST_NULL;
        ans[i].seq = -1;
        snprintf(ans[i].now, sizeof ans[i].now, "no answer in 5 s");
        if (s->members[i] == me || s->members[i] < 0) continue;
        MPI_Irecv(&ans[i], (int)sizeof ans[i], MPI_BYTE, s->members[i], TAG_A, w.comm, &req[i]);
        MPI_Send(name, MFI_LEDGER_NAME, MPI_CHAR, s->members[i], TAG_Q, w.comm);
    }
    double t0 = mfi_ledger_now();
    int done = 0;
    while (!done && mfi_ledger_now() - t0 < 5) {
        serve();
        MPI_Testall(s->nmembers, req, &done, sts);
        if (!done) nanosleep(&(struct timespec){0, 10000000}, NULL);
    }
    for (int i = 0; i < s->nmembers; i++)   /* the late stay listed as silent */
        if (req[i] != MPI_REQUEST_NULL) {
            int flag = 0;
            MPI_Test(&req[i], &flag, &sts[i]);
            if (!flag) {
                ans[i].seq = -1;
                snprintf(ans[i].now, sizeof ans[i].now, "no answer in 5 s");
            }
        }
}

#define ADD(...) (at < MSG ? (at += (size_t)snprintf(msg + at, MSG - at, __VA_ARGS__)) : at)

/* Asks the members of the late wait s and prints the report. */
static void report(const mfi_ledger_wait *s)
{
    answer *ans = calloc((size_t)s->nmembers + 1, sizeof *ans);
    MPI_Request *req = calloc((size_t)s->nmembers + 1, sizeof *req);
    MPI_Status *sts = calloc((size_t)s->nmembers + 1, sizeof *sts);
    char *msg = malloc(MSG);
    int me;
    MPI_Comm_rank(w.comm, &me);
    if (!ans || !req || !sts || !msg) {
        fprintf(stderr, "mpiflow watchdog: rank %d has waited over %g s in %s on %s (no memory to ask the others)\n",
                me, w.timeout, s->op, s->where);
        goto out;
    }
    double waited = mfi_ledger_now() - s->since;
    bool p2p = s->comm < 0;
    ask(s, p2p ? "" : s->where, me, ans, req, sts);
    size_t at = 0;
    if (p2p) ADD("mpiflow watchdog: rank %d has waited %.1f s in %s with %s", me, waited, s->op, s->where);
    else ADD("mpiflow watchdog: rank %d has waited %.1f s in %s #%ld on %s", me, waited, s->op, s->seq, s->where);
    if (*s->what) ADD(" (%s)", s->what);
    ADD(p2p ? "; waiting for:" : "; not arrived:");
    int late_n = 0;
    for (int i = 0; i < s->nmembers; i++) {
        if (s->members[i] == me || (!p2p && ans[i].seq >= s->seq)) continue;
        late_n++;
        if (ans[i].seq < 0) ADD(" rank %d (no answer in 5 s)", s->members[i]);
        else if (p2p) ADD(" rank %d (%s)", s->members[i], ans[i].now);
        else ADD(" rank %d (at #%ld there; %s)", s->members[i], ans[i].seq, ans[i].now);
    }
    if (!late_n) ADD(" none (a deadlock inside MPI?)");
    if (!p2p) {
        ADD("; arrived:");
        for (int i = 0; i < s->nmembers; i++)
            if (s->members[i] == me || ans[i].seq >= s->seq) ADD(" %d", s->members[i]);
    }
    fprintf(stderr, "%s\n", msg);
out:
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
    /* The launcher forwards our stderr through a pipe; give it a moment
     * to drain the report before the abort makes it kill everything. */
    nanosleep(&(struct timespec){1, 0}, NULL);
    MPI_Abort(MPI_COMM_WORLD, 3);   /* MF_TIMEOUT asked for it */
}

/* A copy of the first wait that has lasted too long, marked reported
 * (the caller frees it); NULL if none. */
static mfi_ledger_wait *overdue(void)
{
    mfi_ledger_wait *late = NULL;
    double t = mfi_ledger_now();
    pthread_mutex_lock(&L.mu);
    for (int k = 0; k < MFI_LEDGER_SLOTS && !late; k++) {
        mfi_ledger_slot *s = &L.slots[k];
        if (s->in && !s->reported && t - s->since > w.timeout) {
            s->reported = true;
            late = malloc(sizeof *late);
            if (late) mfi_ledger_copy_locked(s, late);
            else fprintf(stderr, "mpiflow watchdog: a wait in %s has lasted over %g s\n", s->op, w.timeout);
        }
    }
    pthread_mutex_unlock(&L.mu);
    return late;
}

static void *watch(void *arg)
{
    (void)arg;
    while (!atomic_load(&stopping)) {
        serve();
        mfi_ledger_wait *late = overdue();
        if (late) {
            report(late);
            free(late);
            end_job();
        }
        nanosleep(&(struct timespec){0, w.poll_ns}, NULL);
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
    double poll = t / 50 < 0.02 ? 0.02 : t / 50 > 0.25 ? 0.25 : t / 50;   /* each look is an MPI call */
    w.poll_ns = (long)(poll * 1e9);
    atomic_store(&stopping, false);
    if (pthread_create(&w.thread, NULL, watch, NULL) != 0) {
        MPI_Comm_free(&w.comm);
        MF_FAIL(MF_ERR_INTERNAL, "MF_TIMEOUT: cannot start the watchdog thread");
    }
    mfi_ledger_reset(true);
    return MF_OK;
}

void mfi_watchdog_stop(void)
{
    if (!mfi_ledger_on()) return;
    atomic_store(&stopping, true);
    pthread_join(w.thread, NULL);
    MPI_Comm_free(&w.comm);
    mfi_ledger_reset(false);
}
