#!/bin/sh
# Parallel-HDF5 checkpoints: the test_ckpt suite on 1 to 4 ranks, then
# resharding across world sizes and layouts (saved on 4 ranks as 2-D,
# loaded on 1 and on 3 as model parallel; saved on 1 and on 3, loaded on
# 4), and what h5dump and h5ls show of a checkpoint.
. "$top_srcdir/tests/lib.sh"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
suite="$top_builddir/tests/test_ckpt"
runs() {   # runs NP [ENV=VALUE...]: the suite on NP ranks
    np=$1
    shift
    MF_NP=$np timeout 600 "$top_srcdir/tests/mpirun.sh" -genv MF_TEST_TMPDIR "$TMPDIR_TEST" "$@" "$suite" \
        >"$TMPDIR_TEST/out" 2>&1
    rc=$?
    cat "$TMPDIR_TEST/out"
    [ "$rc" -eq 0 ] || fail "test_ckpt on $np ranks $*: exit $rc"
}
for np in 1 2 3 4; do
    runs "$np"
done
across() {   # across SAVE_NP LOAD_NP...
    file="$TMPDIR_TEST/across.$1.h5"
    runs "$1" -genv MF_CKPT_FILE "$file" -genv MF_CKPT_MODE save
    shift
    for np in "$@"; do
        runs "$np" -genv MF_CKPT_FILE "$file" -genv MF_CKPT_MODE load
        echo "ok: saved on $saved ranks, loaded on $np"
    done
}
saved=4 across 4 1 3
saved=1 across 1 4 3
saved=3 across 3 4 1
# stock tools list every tensor with its global shape
f="$TMPDIR_TEST/across.4.h5"
h5ls -r "$f" >"$TMPDIR_TEST/ls" 2>&1 || fail "h5ls failed on a checkpoint"
cat "$TMPDIR_TEST/ls"
grep -q '^/model/hidden.weight *Dataset {512, 36}' "$TMPDIR_TEST/ls" || fail "h5ls: no hidden.weight {512, 36}"
grep -q '^/model/output.bias *Dataset {5}' "$TMPDIR_TEST/ls" || fail "h5ls: no output.bias {5}"
"${H5DUMP:-h5dump}" -H "$f" >"$TMPDIR_TEST/dump" 2>&1 || fail "h5dump -H failed"
grep -q 'DATASET "hidden.weight"' "$TMPDIR_TEST/dump" || fail "h5dump: no hidden.weight"
grep -q 'DATASPACE  SIMPLE { ( 512, 36 ) / ( 512, 36 ) }' "$TMPDIR_TEST/dump" || fail "h5dump: no global shape"
"${H5DUMP:-h5dump}" -a /model/hidden.weight/sbp -a /model/hidden.weight/placement -a /format "$f" \
    >"$TMPDIR_TEST/attrs" 2>&1 || fail "h5dump -a failed"
grep -q '"B,S(0)"' "$TMPDIR_TEST/attrs" || fail "h5dump: sbp attribute"
grep -q '"0-3 mesh 2x2"' "$TMPDIR_TEST/attrs" || fail "h5dump: placement attribute"
grep -q '"mpiflow-checkpoint"' "$TMPDIR_TEST/attrs" || fail "h5dump: format attribute"
echo "checkpoints: round trips, resharding across 1-4 ranks and layouts, bad input, h5dump/h5ls"
