#!/bin/sh
# Pipeline parallelism: the stage cuts and the transfers between stage
# placements (test_pipeline) on 2, 3 and 4 ranks; make check runs it on
# 1 rank as an ordinary suite too.
. "$top_srcdir/tests/lib.sh"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
for np in 2 3 4; do
    MF_NP=$np timeout 300 "$top_srcdir/tests/mpirun.sh" "$top_builddir/tests/test_pipeline" >"$TMPDIR_TEST/out" 2>&1
    rc=$?
    cat "$TMPDIR_TEST/out"
    [ "$rc" -eq 0 ] || fail "test_pipeline on $np ranks: exit $rc"
    grep -q "100%: Checks" "$TMPDIR_TEST/out" || fail "test_pipeline on $np ranks: no summary"
done
echo "pipeline: stage cuts and stage-to-stage transfers on 1-4 ranks"
