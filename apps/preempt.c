/*
 * apps/preempt.c - stopping cleanly before a job's end or on preemption.
 *
 * A signal handler may only set a flag: after each training step the
 * ranks add their flags up (one 4-byte allreduce), so they all stop after
 * the same step, write the checkpoint together and exit 0. The job
 * script then requeues the job, which resumes from that checkpoint.
 */
#include <signal.h>
#include <string.h>
#include "apps/preempt.h"
#include "mpiflow.h"

static volatile sig_atomic_t got;

static void on_signal(int sig)
{
    if (got) {   /* the second: stop now, as without the handler */
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    got = sig;
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
}

int preempt_agreed(void)
{
    int n[2] = {got == SIGUSR1, got == SIGTERM};   /* how many ranks got each */
    if (mf_allreduce(n, 2, MF_I32, MF_COLL_MPI) != MF_OK) return got;
    return n[0] ? SIGUSR1 : n[1] ? SIGTERM : 0;
}
