#!/bin/sh
# Bad input gets one clear message that names the thing, exit code 2,
# and no crash: bad flags, missing data files, corrupt IDX headers.
[ -r "${top_srcdir:-.}/tests/lib.sh" ] || { echo "ERROR: no tests/lib.sh: run by make check, or set top_srcdir" >&2; exit 99; }
. "${top_srcdir:-.}/tests/lib.sh"

expect_bad() {   # expect_bad "needle" args...
    needle=$1
    shift
    run_train 1 "$@" >/dev/null
    [ "$rc" -eq 2 ] || fail "mpiflow-train $*: exit $rc, expected 2"
    grep -q -- "$needle" "$TMPDIR_TEST/out" || { cat "$TMPDIR_TEST/out"; fail "mpiflow-train $*: no '$needle' in the message"; }
    if grep -qiE 'segmentation|core dumped|abort|BAD TERMINATION' "$TMPDIR_TEST/out"; then fail "$*: crashed"; fi
    echo "ok: $* -> $(grep error "$TMPDIR_TEST/out" | head -1)"
}

expect_bad "--model: 'resnet'" --model resnet
expect_bad "--batch-size: '0'" --batch-size 0
expect_bad "--batch-size: 'abc'" --batch-size abc
expect_bad "--lr: '-1'" --lr -1
expect_bad "--optimizer: 'lbfgs'" --optimizer lbfgs
expect_bad "unknown option '--frobnicate'" --frobnicate
expect_bad "--epochs and --steps" --epochs 1 --steps 10
expect_bad "--epochs needs a value" --epochs
expect_bad "unexpected argument 'extra'" extra
expect_bad "--lr-schedule piecewise" --lr-schedule piecewise --lr-boundaries 10
expect_bad "not found in $TMPDIR_TEST/empty" --data-dir "$TMPDIR_TEST/empty"
expect_bad "--parallel: 'tp'" --parallel tp
expect_bad "--save-every: needs --checkpoint" --save-every 10
expect_bad "--keep-last: '0'" --checkpoint x.h5 --keep-last 0
expect_bad "none.h5: cannot read the checkpoint" --dataset synthetic --resume /nonexistent/none.h5
expect_bad "--mesh: only for --parallel 2d" --parallel dp --mesh 2x1
expect_bad "--mesh: '2by2'" --parallel 2d --mesh 2by2
expect_bad "--mesh 2x2 has 4 ranks but the job has 1" --dataset synthetic --parallel 2d --mesh 2x2
expect_bad "--device: 'gpu' is not cpu or cuda" --device gpu
expect_bad "--precision: 'fp16' is not fp32 or bf16" --precision fp16
# --device cuda without a GPU (or in a build without CUDA): exit 2 and the
# reason, on every rank; with a GPU it trains (tests/cuda_train.sh)
"$MPIEXEC" -n 2 "$TRAIN" --dataset synthetic --synthetic-size 64,64 --steps 1 --device cuda >"$TMPDIR_TEST/out" 2>&1
rc=$?
if [ "$rc" -ne 0 ]; then
    [ "$rc" -eq 2 ] || { cat "$TMPDIR_TEST/out"; fail "2 ranks, --device cuda without a GPU: exit $rc, expected 2"; }
    [ "$(grep -c "device cuda: .*CUDA is unavailable" "$TMPDIR_TEST/out")" -eq 2 ] ||
        { cat "$TMPDIR_TEST/out"; fail "--device cuda: expected the reason from both ranks"; }
    echo "ok: --device cuda -> $(head -1 "$TMPDIR_TEST/out")"
fi

# corrupt data: a header that is not IDX, and a file cut short
mkdir -p "$TMPDIR_TEST/bad" "$TMPDIR_TEST/short"
for f in train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
    cp "/usr/share/datasets/fashion-mnist/$f.gz" "$TMPDIR_TEST/bad/" 2>/dev/null
    cp "/usr/share/datasets/fashion-mnist/$f.gz" "$TMPDIR_TEST/short/" 2>/dev/null
done
printf 'this is not an IDX file at all' | gzip >"$TMPDIR_TEST/bad/train-images-idx3-ubyte.gz"
expect_bad "train-images-idx3-ubyte.gz: not an IDX file" --data-dir "$TMPDIR_TEST/bad"
if [ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
    gzip -dc /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz | head -c 100000 | gzip \
        >"$TMPDIR_TEST/short/train-images-idx3-ubyte.gz"
    expect_bad "truncated" --data-dir "$TMPDIR_TEST/short"
fi

# the same message on every rank, and still exit 2, under 2 ranks
"$MPIEXEC" -n 2 "$TRAIN" --model resnet >"$TMPDIR_TEST/out" 2>&1
rc=$?
[ "$rc" -eq 2 ] || fail "2 ranks: exit $rc, expected 2"
[ "$(grep -c "'resnet'" "$TMPDIR_TEST/out")" -eq 2 ] || fail "2 ranks: expected the message from both ranks"

# a mesh that does not fit the job: every rank says so, exit 2, no hang
"$MPIEXEC" -n 3 "$TRAIN" --dataset synthetic --parallel 2d --mesh 2x2 >"$TMPDIR_TEST/out" 2>&1
rc=$?
[ "$rc" -eq 2 ] || fail "3 ranks, mesh 2x2: exit $rc, expected 2"
[ "$(grep -c "mesh 2x2 has 4 ranks but the job has 3" "$TMPDIR_TEST/out")" -eq 3 ] ||
    fail "3 ranks, mesh 2x2: expected the message from all 3 ranks"

# help and version succeed
"$TRAIN" --help | grep -q -- '--model mlp|lenet' || fail "--help lacks the model flag"
"$TRAIN" --help | grep -q -- '--parallel none|dp|mp|hybrid|2d' || fail "--help lacks --parallel"
"$TRAIN" --version | grep -q 'mpiflow-train' || fail "--version"
echo "all bad inputs rejected with exit code 2"
