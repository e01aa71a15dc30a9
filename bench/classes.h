/*
 * bench/classes.h - the benchmarks' --profile line: where a training
 * step's time goes, per kernel class (mf_profile_seconds).
 */
#ifndef MPIFLOW_BENCH_CLASSES_H
#define MPIFLOW_BENCH_CLASSES_H

/* Prints "  us/step: gemm 812.3 (5 calls) ... outside 40.1 (step 930.0)":
 * microseconds and kernel calls per step in each class that ran during
 * the profiled window of `steps` steps and `seconds`, and the time outside
 * every kernel. */
void bench_print_classes(double seconds, int steps);

#endif
