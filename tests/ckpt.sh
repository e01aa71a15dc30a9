#!/bin/sh
# Parallel-HDF5 checkpoints: the test_ckpt suite on 1 to 4 ranks, then
# resharding across world sizes and layouts (saved on 4 ranks as 2-D,
# loaded on 1 and on 3 as model parallel; saved on 1 and on 3, loaded on
# 4), and what h5dump and h5ls show of a checkpoint.
[ -r "${top_srcdir:-.}/tests/lib.sh" ] || { echo "ERROR: no tests/lib.sh: run by make check, or set top_srcdir" >&2; exit 99; }
. "${top_srcdir:-.}/tests/lib.sh"
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

# mpiflow-train: 100 steps straight equal 50 + save + resume + 50, bit for
# bit on the same ranks (lenet: dropout masks and momentum too), and within
# 1e-5 when resumed on another rank count and mode
c="--model lenet --dataset synthetic --synthetic-size 1600,100 --batch-size 32 --optimizer momentum --lr 0.002 --seed 3
    --log-every 1 --threads 1 --no-eval"
losses() { tail -n +2 "$1" | cut -d, -f1-3; }
# shellcheck disable=SC2086
run_train 2 $c --steps 100 --metrics "$TMPDIR_TEST/straight.csv" >/dev/null
[ "$rc" -eq 0 ] || fail "straight run: exit $rc"
# shellcheck disable=SC2086
run_train 2 $c --steps 50 --checkpoint "$TMPDIR_TEST/half.h5" --save-every 25 --metrics "$TMPDIR_TEST/first.csv" >/dev/null
[ "$rc" -eq 0 ] || fail "first half: exit $rc"
grep -q "checkpoint .*half.h5: step 50" "$TMPDIR_TEST/out" || fail "no checkpoint message"
# shellcheck disable=SC2086
run_train 2 $c --steps 100 --resume "$TMPDIR_TEST/half.h5" --metrics "$TMPDIR_TEST/second.csv" >/dev/null
[ "$rc" -eq 0 ] || fail "resumed run: exit $rc"
grep -q "resumed from .*half.h5 at step 50" "$TMPDIR_TEST/out" || fail "no resume message"
{ losses "$TMPDIR_TEST/first.csv"; losses "$TMPDIR_TEST/second.csv"; } >"$TMPDIR_TEST/resumed.loss"
losses "$TMPDIR_TEST/straight.csv" >"$TMPDIR_TEST/straight.loss"
[ "$(wc -l <"$TMPDIR_TEST/straight.loss")" -eq 100 ] || fail "expected 100 losses"
cmp "$TMPDIR_TEST/straight.loss" "$TMPDIR_TEST/resumed.loss" || fail "resumed losses differ from the straight run"
echo "ok: 100 steps = 50 + resume + 50, bit for bit on 2 ranks"
# shellcheck disable=SC2086
run_train 3 $c --steps 100 --resume "$TMPDIR_TEST/half.h5" --parallel mp --metrics "$TMPDIR_TEST/other.csv" >/dev/null
[ "$rc" -eq 0 ] || fail "resumed on 3 ranks: exit $rc"
losses "$TMPDIR_TEST/other.csv" | cut -d, -f3 >"$TMPDIR_TEST/other.loss"
tail -50 "$TMPDIR_TEST/straight.loss" | cut -d, -f3 | paste -d' ' - "$TMPDIR_TEST/other.loss" |
    awk '{ d = $1 - $2; if (d < 0) d = -d; r = d / (1e-3 + ($1 < 0 ? -$1 : $1)); if (r > w) w = r; n++ }
         END { printf "ok: resumed on 3 ranks (mp): worst relative loss difference %.3g over %d steps\n", w, n;
               exit !(n == 50 && w <= 1e-5) }' || fail "resumed on 3 ranks: losses differ"
# --keep-last 3 with a save every 5 of 20 steps: PATH (20), PATH.1 (15), PATH.2 (10)
# shellcheck disable=SC2086
run_train 2 --steps 20 --dataset synthetic --synthetic-size 800,100 --no-eval --threads 1 \
    --checkpoint "$TMPDIR_TEST/keep.h5" --save-every 5 --keep-last 3 >/dev/null
[ "$rc" -eq 0 ] || fail "--keep-last run: exit $rc"
for f in "keep.h5 20" "keep.h5.1 15" "keep.h5.2 10"; do
    # shellcheck disable=SC2086
    set -- $f
    "${H5DUMP:-h5dump}" -a /step "$TMPDIR_TEST/$1" | grep -q "(0): $2\$" || fail "--keep-last: $1 is not step $2"
done
[ ! -e "$TMPDIR_TEST/keep.h5.3" ] || fail "--keep-last 3 kept a fourth checkpoint"
echo "ok: --keep-last 3 keeps steps 20, 15 and 10"

# a bad --resume: every rank says so, exit 2, nothing hangs
"$MPIEXEC" -n 2 "$TRAIN" $c --steps 10 --resume "$TMPDIR_TEST/none.h5" >"$TMPDIR_TEST/out" 2>&1
rc=$?
[ "$rc" -eq 2 ] || fail "--resume of a missing file: exit $rc"
[ "$(grep -c "none.h5: cannot read the checkpoint" "$TMPDIR_TEST/out")" -eq 2 ] || fail "--resume: message not on every rank"
echo "checkpoints: round trips, resharding across 1-4 ranks and layouts, bad input, h5dump/h5ls, resume"
