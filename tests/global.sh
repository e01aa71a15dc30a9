#!/bin/sh
# The global-tensor suites (test_global: placements, SBP, boxing, random
# numbers, errors; test_global_ops: every op under every signature) on
# 2, 3 and 4 ranks, oversubscribed, one BLAS thread per rank. make check
# runs them on 1 rank as ordinary suites too.
. "$top_srcdir/tests/lib.sh"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
for np in 2 3 4; do
    for suite in test_global test_global_ops; do
        MF_NP=$np timeout 600 "$top_srcdir/tests/mpirun.sh" "$top_builddir/tests/$suite" >"$TMPDIR_TEST/out" 2>&1
        rc=$?
        cat "$TMPDIR_TEST/out"
        [ "$rc" -eq 0 ] || fail "$suite on $np ranks exited with $rc"
        grep -q "100%: Checks" "$TMPDIR_TEST/out" || fail "$suite on $np ranks: no summary"
    done
done
echo "global suites pass on 2, 3 and 4 ranks"
