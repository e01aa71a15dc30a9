/*
 * tests/watchdog_skip.c - a program with a bug the watchdog must catch:
 * the last rank skips one boxing (an allgather of the tensor 'weights')
 * and goes on computing. Run with MF_TIMEOUT=2 by tests/watchdog.sh and
 * tests/slurm.sh: the job must end with a non-zero code and a report
 * that names the op, its number, the tensor and the rank that did not
 * arrive, instead of hanging.
 */
#include <stdio.h>
#include <time.h>
#include "mpiflow.h"

int main(int argc, char **argv)
{
    if (mf_init(&argc, &argv) != MF_OK) {
        fprintf(stderr, "watchdog_skip: %s\n", mf_last_error());
        return 1;
    }
    int n = mf_world_size(), me = mf_rank();
    mf_placement *p = mf_placement_world();
    mf_tensor *full = mf_ones(MF_F32, MF_DIMS(4 * n, 3));
    mf_tensor *t = p && full ? mf_global_from_full(full, p, "S(0)") : NULL;
    if (!t || mf_tensor_set_name(t, "weights") != MF_OK) return 1;
    for (int step = 0; step < 3; step++) {
        if (step == 1 && me == n - 1) {   /* the bug: this rank skips the gather and computes for a minute */
            fprintf(stderr, "watchdog_skip: rank %d skips the gather of step %d\n", me, step);
            nanosleep(&(struct timespec){60, 0}, NULL);
            continue;
        }
        mf_tensor *b = mf_redistribute(t, p, "B");   /* an allgather */
        if (!b) return 1;
        mf_tensor_destroy(b);
    }
    printf("watchdog_skip: no hang detected (this should not be printed)\n");
    mf_tensor_destroy(t);
    mf_tensor_destroy(full);
    mf_placement_destroy(p);
    mf_finalize();
    return 0;
}
