#!/bin/sh
# The collective algorithms (test_coll) on 2, 3 and 4 ranks (3: not a
# power of two), and the global-tensor suite with each allreduce
# algorithm forced (boxing P -> B runs through it). make check runs
# test_coll on 1 rank as an ordinary suite too.
. "$top_srcdir/tests/lib.sh"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
suite() {   # suite NP NAME [ENV=VALUE...]
    np=$1
    name=$2
    shift 2
    env "$@" MF_NP="$np" timeout 600 "$top_srcdir/tests/mpirun.sh" "$top_builddir/tests/$name" >"$TMPDIR_TEST/out" 2>&1
    rc=$?
    cat "$TMPDIR_TEST/out"
    [ "$rc" -eq 0 ] || fail "$name on $np ranks $*: exit $rc"
    grep -q "100%: Checks" "$TMPDIR_TEST/out" || fail "$name on $np ranks $*: no summary"
}
for np in 2 3 4; do
    suite "$np" test_coll
done
for algo in ring rhd; do
    suite 3 test_global MF_ALLREDUCE_ALGO=$algo
done
echo "collectives: every algorithm on 1-4 ranks; boxing through ring and rhd"
