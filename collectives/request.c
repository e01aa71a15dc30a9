/*
 * collectives/request.c - non-blocking collectives: every algorithm, run
 * as a request by one progress thread while the caller computes.
 *
 * The caller's thread queues the request; the progress thread takes the
 * queue in order and runs the blocking algorithm on the communicator's
 * twin (an MPI duplicate made by the caller at the first request, so
 * that its messages never mix with blocking calls on the original). Every
 * rank queues the same requests in the same order, so every rank runs
 * them in the same order. mfi_wait blocks on a condition variable, not
 * in MPI: the waiting thread uses no CPU.
 *
 * This needs MPI_THREAD_MULTIPLE (requested by mf_init). When MPI gives
 * less (an application that initialised MPI itself), requests run to
 * completion when they are started, and the results are the same.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "collectives/coll_algo.h"
#include "collectives/comm.h"
#include "base/error.h"

struct mf_request {
    mfi_coll_op op;
    mfi_comm *c;              /* the twin it runs on */
    const void *send;
    void *recv;
    int64_t count;           /* allreduce */
    int64_t *counts;         /* reduce-scatter, allgather */
    mf_dtype dt;
    mf_coll_algo algo;
    mf_status status;
    char msg[512];
    bool done;
    double t_start, t_end;   /* when it ran, on mf_time's clock */
    char label[192];         /* the caller's ledger context (MF_TIMEOUT) */
    struct mf_request *next;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work = PTHREAD_COND_INITIALIZER, finished = PTHREAD_COND_INITIALIZER;
static mfi_request *head, *tail;
static pthread_t worker;
static bool running, stopping;
static int threaded = -1;    /* MPI_THREAD_MULTIPLE available */

static double now(void)   /* mf_time's clock */
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void run(mfi_request *r)
{
    mfi_ledger_context(r->label);   /* what the watchdog names, on this thread */
    r->t_start = now();
    switch (r->op) {
    case MFI_ALLREDUCE: r->status = mfi_allreduce_algo(r->c, r->recv, r->recv, r->count, r->dt, r->algo); break;
    default: r->status = mfi_pieces_algo(r->op, r->c, r->send, r->recv, r->counts, r->dt, r->algo); break;
    }
    r->t_end = now();
    mfi_ledger_context("");
    if (r->status != MF_OK) snprintf(r->msg, sizeof r->msg, "%s", mf_last_error());
}

static void *progress(void *arg)
{
    (void)arg;
    mfi_coll_polite = true;
    pthread_mutex_lock(&lock);
    for (;;) {
        while (!head && !stopping) pthread_cond_wait(&work, &lock);
        if (!head) break;
        mfi_request *r = head;
        pthread_mutex_unlock(&lock);
        run(r);
        pthread_mutex_lock(&lock);
        head = r->next;
        if (!head) tail = NULL;
        r->done = true;
        pthread_cond_broadcast(&finished);
    }
    pthread_mutex_unlock(&lock);
    mfi_ledger_thread_done();
    return NULL;
}

static bool use_thread(void)
{
    if (threaded < 0) {
        int level = MPI_THREAD_SINGLE;
        MPI_Query_thread(&level);
        threaded = level == MPI_THREAD_MULTIPLE && !getenv("MF_COLL_NO_THREAD");
    }
    return threaded;
}

/* The twin of c, made on the first request (collective over c). */
static mf_status twin_of(mfi_comm *c, mfi_comm **out)
{
    if (!c->twin) {
        mfi_comm *t = calloc(1, sizeof *t);
        if (!t) MF_FAIL(MF_ERR_NOMEM, "non-blocking collective: out of memory");
        int tok = mfi_ledger_enter(c, "communicator duplicate");
        int rc = MPI_Comm_dup(c->comm, &t->comm);
        mfi_ledger_leave(tok);
        if (rc != MPI_SUCCESS) {
            free(t);
            return mfi_mpi_fail(rc, "MPI_Comm_dup");
        }
        MPI_Comm_set_errhandler(t->comm, MPI_ERRORS_RETURN);
        t->rank = c->rank;
        t->size = c->size;
        t->is_twin = true;
        c->twin = t;
    }
    *out = c->twin;
    return MF_OK;
}

static mf_status submit(mfi_request *r, mfi_comm *c, mfi_request **out)
{
    *out = NULL;
    mfi_ledger_context_copy(r->label, sizeof r->label);
    if (c->sim) {   /* counted now, complete at once */
        r->c = c;
        mfi_sim_async(true);
        run(r);
        mfi_sim_async(false);
        r->done = true;
        *out = r;
        return MF_OK;
    }
    mf_status st = twin_of(c, &r->c);
    if (st != MF_OK) {
        free(r->counts);
        free(r);
        return st;
    }
    if (!use_thread()) {   /* run now; mfi_wait reports */
        run(r);
        r->done = true;
        *out = r;
        return MF_OK;
    }
    pthread_mutex_lock(&lock);
    if (!running) {
        stopping = false;
        if (pthread_create(&worker, NULL, progress, NULL) != 0) {
            pthread_mutex_unlock(&lock);
            free(r->counts);
            free(r);
            MF_FAIL(MF_ERR_INTERNAL, "non-blocking collective: cannot start the progress thread");
        }
        running = true;
    }
    if (tail) tail->next = r;
    else head = r;
    tail = r;
    pthread_cond_signal(&work);
    pthread_mutex_unlock(&lock);
    *out = r;
    return MF_OK;
}

mf_status mfi_iallreduce(mfi_comm *c, void *buf, int64_t count, mf_dtype dt, mf_coll_algo algo, mfi_request **out)
{
    *out = NULL;
    if (!c || (c->comm == MPI_COMM_NULL && !c->sim)) MF_FAIL(MF_ERR_STATE, "allreduce: no communicator (is mf_init done?)");
    mfi_request *r = calloc(1, sizeof *r);
    if (!r) MF_FAIL(MF_ERR_NOMEM, "non-blocking allreduce: out of memory");
    *r = (mfi_request){.op = MFI_ALLREDUCE, .send = buf, .recv = buf, .count = count, .dt = dt, .algo = algo};
    return submit(r, c, out);
}

mf_status mfi_ipieces(mfi_coll_op op, mfi_comm *c, const void *send, void *recv, const int64_t *counts, mf_dtype dt,
                      mf_coll_algo algo, mfi_request **out)
{
    *out = NULL;
    if (!c || (c->comm == MPI_COMM_NULL && !c->sim)) MF_FAIL(MF_ERR_STATE, "collective: no communicator (is mf_init done?)");
    mfi_request *r = calloc(1, sizeof *r);
    int64_t *cc = malloc((size_t)c->size * sizeof *cc);
    if (!r || !cc) {
        free(r);
        free(cc);
        MF_FAIL(MF_ERR_NOMEM, "non-blocking collective: out of memory");
    }
    memcpy(cc, counts, (size_t)c->size * sizeof *cc);
    *r = (mfi_request){.op = op, .send = send, .recv = recv, .counts = cc, .dt = dt, .algo = algo};
    return submit(r, c, out);
}

bool mfi_test(mfi_request *r)
{
    if (!r) return true;
    pthread_mutex_lock(&lock);
    bool d = r->done;
    pthread_mutex_unlock(&lock);
    return d;
}

mf_status mfi_wait_times(mfi_request *r, double *t_start, double *t_end)
{
    if (!r) return MF_OK;
    pthread_mutex_lock(&lock);
    while (!r->done) pthread_cond_wait(&finished, &lock);
    pthread_mutex_unlock(&lock);
    if (t_start) *t_start = r->t_start;
    if (t_end) *t_end = r->t_end;
    mf_status st = r->status;
    if (st != MF_OK) mfi_error(st, "%s", r->msg);
    free(r->counts);
    free(r);
    return st;
}

mf_status mfi_wait(mfi_request *r)
{
    return mfi_wait_times(r, NULL, NULL);
}

void mfi_request_shutdown(void)
{
    pthread_mutex_lock(&lock);
    if (!running) {
        pthread_mutex_unlock(&lock);
        return;
    }
    stopping = true;   /* the worker drains the queue, then leaves */
    pthread_cond_signal(&work);
    pthread_mutex_unlock(&lock);
    pthread_join(worker, NULL);
    running = false;
}

mf_status mfi_ireduce_scatter(mfi_comm *c, const void *send, void *recv, const int64_t *counts, mf_dtype dt,
                              mfi_request **out)
{
    return mfi_ipieces(MFI_REDUCE_SCATTER, c, send, recv, counts, dt, MF_COLL_AUTO, out);
}

mf_status mfi_iallgather(mfi_comm *c, const void *send, void *recv, const int64_t *counts, mf_dtype dt,
                         mfi_request **out)
{
    return mfi_ipieces(MFI_ALLGATHER, c, send, recv, counts, dt, MF_COLL_AUTO, out);
}
