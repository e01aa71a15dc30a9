/*
 * bench/classes.c - the benchmarks' --profile line (bench/classes.h).
 */
#include "mpiflow.h"
#include <stdio.h>
#include "bench/classes.h"

void bench_print_classes(double seconds, int steps)
{
    double total = 0;
    printf("  us/step:");
    for (int c = 0; c < MF_PROF_COUNT; c++) {
        int64_t calls;
        double s = mf_profile_seconds((mf_prof_class)c, &calls);
        total += s;
        if (calls > 0)
            printf(" %s %.1f (%.0f calls)", mf_profile_class_name((mf_prof_class)c), 1e6 * s / steps,
                   (double)calls / steps);
    }
    printf(" outside %.1f (step %.1f)\n", 1e6 * (seconds - total) / steps, 1e6 * seconds / steps);
}
