/*
 * apps/preempt.h - stopping cleanly before a job's end or on preemption.
 */
#ifndef MPIFLOW_APPS_PREEMPT_H
#define MPIFLOW_APPS_PREEMPT_H

/* Signals within this many seconds of the first are one stop request. */
#define PREEMPT_GAP_S 5
#define PREEMPT_GAP_TEXT "5 s"

/* Catches SIGUSR1 (sbatch --signal=B:USR1@T, forwarded to the ranks by
 * the job script), SIGTERM (Slurm's preemption, scancel, timeout(1)) and
 * SIGINT (Ctrl-C): the first sets the request; any of them within
 * PREEMPT_GAP_S seconds is the same request; one later exits the
 * process at once with 128 + its number (preempt.c). */
void preempt_install(void);
/* Collective: whether any rank got a signal since the start, agreed by
 * all, so every rank stops after the same step. Returns SIGUSR1 if any
 * rank got it, else SIGTERM, else SIGINT, else 0. */
int preempt_agreed(void);
/* The stop's checkpoint is written: later signals are ignored, so the
 * exit status stays 0. */
void preempt_finished(void);
/* "SIGUSR1", "SIGTERM", "SIGINT" */
const char *preempt_name(int sig);

#endif
