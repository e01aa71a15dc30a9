/*
 * apps/preempt.c - stopping cleanly before a job's end or on preemption.
 *
 * A signal handler may only set a flag: after each training step the
 * ranks add their flags up (one small allreduce), so they all stop after
 * the same step, write the checkpoint together and exit 0. The job
 * script then requeues the job, which resumes from that checkpoint.
 *
 * One request often arrives several times: mpiexec forwards the signal
 * it got while the scheduler (scancel, `timeout`, `kill -TERM -PGID`,
 * Ctrl-C's SIGINT to the terminal's process group) signals the ranks
 * directly, or a job script sends SIGUSR1 as Slurm sends SIGTERM. Every
 * signal within PREEMPT_GAP_S seconds of the first is that same request.
 * Only one after that gap asks to stop at once: the rank then exits at
 * once with 128 + the signal's number and says that no checkpoint was
 * written (unless the stop's checkpoint is already on disk), so a zero
 * exit always means the checkpoint was written (doc/slurm.md).
 */
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "apps/preempt.h"
#include "mpiflow.h"

static atomic_int got;             /* the request's first signal (0: none) */
static atomic_llong first_ms;      /* when it came (CLOCK_MONOTONIC), 0 while being set */
static atomic_bool finished;       /* the stop's checkpoint is written: later signals change nothing */

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);   /* async-signal-safe */
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

const char *preempt_name(int sig)
{
    return sig == SIGUSR1 ? "SIGUSR1" : sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "a signal";
}

/* write(2) of the pieces: the only output a handler may make */
static void say(const char *const *parts)
{
    for (; *parts; parts++) {
        size_t n = strlen(*parts);
        if (write(STDERR_FILENO, *parts, n) < 0) return;
    }
}

static void on_signal(int sig)
{
    int none = 0;
    if (atomic_compare_exchange_strong(&got, &none, sig)) {   /* the request */
        atomic_store(&first_ms, now_ms());
        return;
    }
    long long t0 = atomic_load(&first_ms);
    if (atomic_load(&finished) || t0 == 0 || now_ms() - t0 < (long long)PREEMPT_GAP_S * 1000)
        return;   /* the same request again (the launcher's copy, another signal of it) */
    const char *parts[] = {"mpiflow-train: ", preempt_name(sig), " again, ", PREEMPT_GAP_TEXT,
                           " or more after the first stop request: stopping at once; no checkpoint of this run "
                           "was written by this stop (an earlier complete one is kept)\n",
                           NULL};
    say(parts);
    _exit(128 + sig);
}

void preempt_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;   /* MPI and file calls go on; the flag is read after the step */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
}

int preempt_agreed(void)
{
    int sig = atomic_load(&got);
    int n[3] = {sig == SIGUSR1, sig == SIGTERM, sig == SIGINT};   /* how many ranks got each */
    if (mf_allreduce(n, 3, MF_I32, MF_COLL_MPI) != MF_OK) return sig;
    return n[0] ? SIGUSR1 : n[1] ? SIGTERM : n[2] ? SIGINT : 0;
}

void preempt_finished(void) { atomic_store(&finished, true); }
