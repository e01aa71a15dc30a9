#!/bin/sh
# The global-tensor suites (test_global: placements, SBP, boxing, random
# numbers, errors; test_global_ops: every op under every signature;
# test_plan: plans applied to a model; test_graph: the step graph, and
# each rank simulating itself as it really ran) on
# 2, 3 and 4 ranks, oversubscribed, one BLAS thread per rank. make check
# runs them on 1 rank as ordinary suites too.
[ -r "${top_srcdir:-.}/tests/lib.sh" ] || { echo "ERROR: no tests/lib.sh: run by make check, or set top_srcdir" >&2; exit 99; }
. "${top_srcdir:-.}/tests/lib.sh"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
for np in 2 3 4; do
    for suite in test_global test_global_ops test_plan test_graph; do
        run_suite "$np" "$suite"
    done
done
echo "global suites pass on 2, 3 and 4 ranks"
