#!/bin/sh
# --deterministic: the same bits on any number of ranks.
# - mlp and LeNet (dropout, Adam, gradient clipping) data-parallel on 1, 2,
#   3 and 4 ranks, LeNet as 2 pipeline stages x 4 micro-batches, 2 stages
#   x 2 data-parallel ranks, and with ZeRO-1: the metrics CSV's losses are
#   byte for byte the 1-rank run's, and `mpiflow-ckpt diff` finds no
#   difference in the final parameters and optimizer state;
# - a GPT data-parallel on 1, 2 and 3 ranks and with ZeRO-1 likewise, and
#   under tensor (and sequence) parallelism of 2 the same bits with 1 or
#   2 data-parallel ranks beside it, and with ZeRO-3 on 3 ranks; GPT
#   pipelines refused;
# - a run saved on 1 rank and resumed on 3 ends with the straight run's bits;
# - without --deterministic the same runs differ in the last digits, so the
#   comparison can fail;
# - bad requests fail on every rank with exit 2.
[ -r "${top_srcdir:-.}/tests/lib.sh" ] || { echo "ERROR: no tests/lib.sh: run by make check, or set top_srcdir" >&2; exit 99; }
. "${top_srcdir:-.}/tests/lib.sh"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
T=$TMPDIR_TEST
CKPT="$top_builddir/mpiflow-ckpt"

# run NAME NP ARGS...: a run whose losses land in T/NAME.loss and final state in T/NAME.h5
run() {
    name=$1
    np=$2
    shift 2
    run_train "$np" "$@" --metrics "$T/$name.csv" --checkpoint "$T/$name.h5" >/dev/null
    [ "$rc" -eq 0 ] || fail "$name ($np ranks, $*): exit $rc"
    cut -d, -f1-4 "$T/$name.csv" >"$T/$name.loss"
}

# same REF NAME WHAT: losses and state bit for bit
same() {
    cmp "$T/$1.loss" "$T/$2.loss" || fail "$3: the losses differ from 1 rank's"
    "$CKPT" diff -q "$T/$1.h5" "$T/$2.h5" || fail "$3: the final state differs from 1 rank's"
    echo "ok: $3: $(($(wc -l <"$T/$2.loss") - 1)) losses and every tensor bit for bit as on 1 rank"
}

mlp="--model mlp --dataset synthetic --synthetic-size 960,60 --batch-size 96 --steps 30 --log-every 1 --seed 5
    --threads 1 --no-eval"
# shellcheck disable=SC2086
run mlp1 1 $mlp --deterministic
grep -q "deterministic: 12 shards summed in order" "$T/out" || fail "the header does not describe the shards"
for np in 2 3 4; do
    # shellcheck disable=SC2086
    run "mlp$np" "$np" $mlp --deterministic
    same mlp1 "mlp$np" "mlp, data parallel on $np ranks"
done
# the control: the plain sums differ between 1 and 2 ranks
# shellcheck disable=SC2086
run plain1 1 $mlp
# shellcheck disable=SC2086
run plain2 2 $mlp
if cmp -s "$T/plain1.loss" "$T/plain2.loss"; then fail "mlp without --deterministic: 2 ranks equal 1 bit for bit; the test proves nothing"; fi
same_losses "$T/plain1.csv" "$T/plain2.csv" "mlp without --deterministic, 2 ranks (close, not equal)"

lenet="--model lenet --dataset synthetic --synthetic-size 480,60 --batch-size 48 --steps 12 --log-every 1 --seed 5
    --threads 1 --no-eval --optimizer adam --clip-grad 1 --deterministic"
# shellcheck disable=SC2086
run lenet1 1 $lenet
for np in 2 3 4; do
    # shellcheck disable=SC2086
    run "lenet$np" "$np" $lenet
    same lenet1 "lenet$np" "lenet, data parallel on $np ranks"
done
for sched in gpipe 1f1b; do
    # shellcheck disable=SC2086
    run "pp2$sched" 2 $lenet --pipeline-stages 2 --micro-batches 4 --schedule "$sched"
    same lenet1 "pp2$sched" "lenet, 2 stages x 4 micro-batches, $sched"
done
# shellcheck disable=SC2086
run pp2dp2 4 $lenet --pipeline-stages 2
same lenet1 pp2dp2 "lenet, 2 stages x 2 data-parallel ranks"
# shellcheck disable=SC2086
run zero 2 $lenet --zero 1 --bucket-mb 0.05
same lenet1 zero "lenet, ZeRO-1 on 2 ranks"

# saved on 1 rank after 6 steps, resumed on 3
# shellcheck disable=SC2086
run_train 1 $lenet --steps 6 --checkpoint "$T/half.h5" >/dev/null
[ "$rc" -eq 0 ] || fail "lenet, 6 steps: exit $rc"
# shellcheck disable=SC2086
run resumed 3 $lenet --resume "$T/half.h5"
tail -n +8 "$T/lenet1.loss" >"$T/want"
tail -n +2 "$T/resumed.loss" | cmp "$T/want" - || fail "resumed on 3 ranks: the losses differ from the straight run's"
"$CKPT" diff -q "$T/lenet1.h5" "$T/resumed.h5" || fail "resumed on 3 ranks: the final state differs"
echo "ok: saved on 1 rank at step 6, resumed on 3: steps 7-12 and the final state bit for bit"

# a GPT: data parallel on 1, 2 and 3 ranks and with ZeRO-1 against 1
# rank; with tensor (and sequence) parallelism of 2, the bits do not
# depend on the data-parallel ranks beside it (tp itself splits the
# matrix products, so it is compared with itself, not with 1 rank)
word_text "$T/text.txt" 1200
gpt="--model gpt --dataset text:$T/text.txt --n-layer 2 --n-head 4 --n-embd 32 --seq-len 16 --vocab-size 258
    --batch-size 12 --optimizer adam --lr 0.01 --clip-grad 1 --threads 1 --log-every 1 --no-eval --seed 3
    --deterministic"
# shellcheck disable=SC2086
run gpt1 1 $gpt --steps 30
grep -q "deterministic: 12 shards summed in order" "$T/out" || fail "gpt: the header does not describe the shards"
for np in 2 3; do
    # shellcheck disable=SC2086
    run "gpt$np" "$np" $gpt --steps 30
    same gpt1 "gpt$np" "gpt, data parallel on $np ranks"
done
# shellcheck disable=SC2086
run gptzero 2 $gpt --steps 30 --zero 1
same gpt1 gptzero "gpt, ZeRO-1 on 2 ranks"
for sp in "" --sequence-parallel; do
    # shellcheck disable=SC2086
    run "gpttp$sp" 2 $gpt --steps 6 --tensor-parallel 2 $sp
    # shellcheck disable=SC2086
    run "gptdptp$sp" 4 $gpt --steps 6 --tensor-parallel 2 $sp
    grep -q "2 data-parallel x 2 tensor-parallel" "$T/out" || fail "gpt tp 2 on 4 ranks: not 2 x 2"
    cmp "$T/gpttp$sp.loss" "$T/gptdptp$sp.loss" || fail "gpt tp 2 $sp: 2 data-parallel ranks change the losses"
    "$CKPT" diff -q "$T/gpttp$sp.h5" "$T/gptdptp$sp.h5" || fail "gpt tp 2 $sp: 2 data-parallel ranks change the state"
    echo "ok: gpt, tensor parallel 2 $sp: 2 data-parallel ranks beside it give the bits of 1 (6 steps and the state)"
done
# ZeRO-3: each use's whole gradient summed in shard order, each rank then keeps its rows
# shellcheck disable=SC2086
run gptzero3 3 $gpt --steps 30 --zero 3
same gpt1 gptzero3 "gpt, ZeRO-3 on 3 ranks"
# shellcheck disable=SC2086
refused 2 "--deterministic with pipeline stages for gpt" $gpt --steps 1 --pipeline-stages 2

# bad requests: exit 2 and the message on every rank
bad() {
    np=$1 want=$2
    shift 2
    refused "$np" "$want" --model mlp --dataset synthetic --synthetic-size 96,8 --steps 1 --no-eval "$@"
}
bad 1 "--deterministic=5 does not divide --batch-size 64" --deterministic=5
bad 1 "--deterministic=x: not a shard count" --deterministic=x
bad 3 "--deterministic=8: the shards do not split evenly over 3 data-parallel rank(s)" --deterministic=8
bad 2 "--deterministic: --parallel mp; the shards' sums cover data parallelism" --deterministic --parallel mp
bad 2 "--micro-batches 3 must divide the shards" --deterministic=8 --batch-size 48 --micro-batches 3
echo "bitwise: mlp and lenet on 1-4 ranks, pipelines and ZeRO-1, a GPT on 1-3 ranks, with ZeRO-1 and tp, bit for bit with --deterministic"
