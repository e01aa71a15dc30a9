/*
 * apps/preempt.h - stopping cleanly before a job's end or on preemption.
 */
#ifndef MPIFLOW_APPS_PREEMPT_H
#define MPIFLOW_APPS_PREEMPT_H

/* Catches SIGUSR1 (sbatch --signal=B:USR1@T, forwarded to the ranks by
 * the job script) and SIGTERM (Slurm's preemption, scancel): each sets a
 * flag. A second signal of either kind ends the process as usual. */
void preempt_install(void);
/* Collective: whether any rank got a signal since the start, agreed by
 * all, so every rank stops after the same step. Returns SIGUSR1 if any
 * rank got it, else SIGTERM if any rank got that, else 0. */
int preempt_agreed(void);

#endif
