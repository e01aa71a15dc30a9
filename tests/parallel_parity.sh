#!/bin/sh
# doc/design.md section 5's main correctness test: dp, mp, hybrid and 2d training of mlp
# for 100 steps on 2, 3 and 4 ranks (a 2x2 mesh for 2d on 4) gives
# the losses of the 1-rank run within 1e-5 relative, and the same
# parameters after training within 1e-5. lenet runs dp and mp on 2 ranks,
# hybrid on 3 and 2d on 4
# for 20 steps (conv layers, pooling and dropout under S(0) and B), and
# the test-set evaluation under dp, 2d and mp reports the 1-rank numbers.
[ -r "${top_srcdir:-.}/tests/lib.sh" ] || { echo "ERROR: no tests/lib.sh: run by make check, or set top_srcdir" >&2; exit 99; }
. "${top_srcdir:-.}/tests/lib.sh"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
common="--dataset synthetic --synthetic-size 3200,100 --batch-size 32 --optimizer sgd --lr 0.002 --seed 5
    --log-every 1 --threads 1 --no-eval --progress lines"

# compare A B TOL: max relative difference of two number columns (values
# below 1e-3 in size count as 1e-3, so a parameter near 0 is not judged
# by float noise alone)
compare() {
    paste -d' ' "$1" "$2" | awk -v tol="$3" '
        /#/ { next }
        { d = $1 - $2; if (d < 0) d = -d; m = $2 < 0 ? -$2 : $2; r = d / (1e-3 + m)
          if (r > worst) worst = r; n++ }
        END { printf "%d values, worst relative difference %.3g\n", n, worst; exit !(n > 0 && worst <= tol) }'
}

# run MODEL STEPS NP MODE [MESH] -> $TMPDIR_TEST/MODEL.NP.MODE.{loss,params}
run() {
    model=$1 steps=$2 np=$3 mode=$4 tag="$1.$3.$4"
    shift 4
    # shellcheck disable=SC2086
    run_train "$np" --model "$model" --steps "$steps" $common --parallel "$mode" "$@" \
        --metrics "$TMPDIR_TEST/$tag.csv" --dump-params "$TMPDIR_TEST/$tag.params" >/dev/null
    [ "$rc" -eq 0 ] || fail "$tag exited with $rc: $(tail -3 "$TMPDIR_TEST/out")"
    grep -q "parallel $mode" "$TMPDIR_TEST/out" || fail "$tag did not run --parallel $mode"
    tail -n +2 "$TMPDIR_TEST/$tag.csv" | cut -d, -f3 >"$TMPDIR_TEST/$tag.loss"
    [ "$(wc -l <"$TMPDIR_TEST/$tag.loss")" -eq "$steps" ] || fail "$tag: expected $steps losses"
}

check() {   # check MODEL NP MODE
    ref="$TMPDIR_TEST/$1.1.none" got="$TMPDIR_TEST/$1.$2.$3"
    echo "$1 --parallel $3 on $2 ranks:"
    compare "$got.loss" "$ref.loss" 1e-5 || fail "$1 $3 on $2 ranks: losses differ from the 1-rank run"
    compare "$got.params" "$ref.params" 1e-5 || fail "$1 $3 on $2 ranks: parameters differ from the 1-rank run"
}

run mlp 100 1 none
for mode in dp mp hybrid 2d; do
    for np in 2 3; do
        run mlp 100 "$np" "$mode"
        check mlp "$np" "$mode"
    done
done
run mlp 100 4 2d --mesh 2x2
check mlp 4 2d
for mode in dp mp hybrid; do
    run mlp 100 4 "$mode"
    check mlp 4 "$mode"
done

# evaluation under a parallel mode reports the 1-rank accuracy and loss
evalargs="--model mlp --steps 30 --dataset synthetic --synthetic-size 3200,500 --batch-size 32 --optimizer sgd
    --lr 0.002 --seed 5 --threads 1 --eval-batch-size 128"
# shellcheck disable=SC2086
run_train 1 $evalargs >/dev/null
ref=$(grep '^final' "$TMPDIR_TEST/out" | sed 's/ train_loss.*//')
for cfg in "3 dp" "4 2d" "2 mp"; do
    # shellcheck disable=SC2086
    set -- $cfg
    # shellcheck disable=SC2086
    run_train "$1" $evalargs --parallel "$2" >/dev/null
    got=$(grep '^final' "$TMPDIR_TEST/out" | sed 's/ train_loss.*//')
    echo "eval $2 on $1 ranks: $got"
    [ -n "$ref" ] && [ "$got" = "$ref" ] || fail "eval $2 on $1 ranks: '$got', 1 rank: '$ref'"
done

run lenet 20 1 none --lr 0.01
for mode in dp mp; do
    run lenet 20 2 "$mode" --lr 0.01
    check lenet 2 "$mode"
done
run lenet 20 3 hybrid --lr 0.01
check lenet 3 hybrid
run lenet 20 4 2d --lr 0.01 --mesh 2x2
check lenet 4 2d

# a different seed changes the losses, or the comparison proves nothing
run_train 1 --model mlp --steps 100 $common --seed 6 --metrics "$TMPDIR_TEST/other.csv" >/dev/null
tail -n +2 "$TMPDIR_TEST/other.csv" | cut -d, -f3 >"$TMPDIR_TEST/other.loss"
if compare "$TMPDIR_TEST/other.loss" "$TMPDIR_TEST/mlp.1.none.loss" 1e-5 >/dev/null; then
    fail "another seed gave the same losses"
fi
echo "all parallel modes match the 1-rank run"
