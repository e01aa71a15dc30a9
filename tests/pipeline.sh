#!/bin/sh
# Pipeline parallelism end to end:
# - the stage cuts, transfers and schedules (test_pipeline) and the
#   executor against one rank (test_pipe_exec) on 2, 3 and 4 ranks;
# - mpiflow-train's LeNet pipeline: GPipe and 1F1B on 2, 3 and 4 ranks
#   give the 1-rank run's losses (same micro-batches) digit for digit,
#   and its test loss; with data or tensor parallelism inside the stages
#   (4 ranks) and the 2x2x2 dp x tp x pp case on 8 ranks, within 1e-5;
# - the pipeline trains like the plain 1-rank run without micro-batches,
#   dropout included (masks follow samples, not micro-batches);
# - checkpoints: saved with 2 stages and resumed on 1 rank, and the
#   reverse, continue the straight run's losses;
# - --trace shows each stage's micro-batches;
# - bad requests fail on every rank with exit 2.
[ -r "${top_srcdir:-.}/tests/lib.sh" ] || { echo "ERROR: no tests/lib.sh: run by make check, or set top_srcdir" >&2; exit 99; }
. "${top_srcdir:-.}/tests/lib.sh"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
T=$TMPDIR_TEST
for np in 2 3 4; do
    run_suite "$np" test_pipeline
    run_suite "$np" test_pipe_exec
done

lenet="--model lenet --dataset synthetic --synthetic-size 640,60 --batch-size 32 --steps 6 --log-every 1 --seed 5
    --threads 1 --micro-batches 4 --eval-batch-size 30 --optimizer adam"
# shellcheck disable=SC2086
run_train 1 $lenet --metrics "$T/ref.csv" >/dev/null
[ "$rc" -eq 0 ] || fail "lenet with 4 micro-batches on 1 rank: exit $rc"
ref_test=$(final_field test_loss)
for np in 2 3 4; do
    for sched in gpipe 1f1b; do
        # shellcheck disable=SC2086
        run_train "$np" $lenet --pipeline-stages "$np" --schedule "$sched" --metrics "$T/got.csv" >/dev/null
        [ "$rc" -eq 0 ] || fail "lenet, $np stages, $sched: exit $rc"
        grep -q "pipeline of $np stage(s) x dp on 1 rank(s) each, $sched schedule, 4 micro-batches" "$T/out" ||
            fail "lenet, $np stages: the header does not describe the pipeline"
        same_losses "$T/ref.csv" "$T/got.csv" "lenet, $np stages of 1 rank, $sched" 0
        [ "$(final_field test_loss)" = "$ref_test" ] || fail "lenet, $np stages: test loss $(final_field test_loss), 1 rank $ref_test"
    done
done
# shellcheck disable=SC2086
run_train 2 $lenet --pipeline-cuts 6 --metrics "$T/got.csv" >/dev/null
grep -q "stage 0: layers 0-5 on 0; stage 1: layers 6-10 on 1" "$T/out" || fail "--pipeline-cuts 6: wrong stages"
same_losses "$T/ref.csv" "$T/got.csv" "lenet cut before layer 6" 0
for par in "dp" "mp"; do
    # shellcheck disable=SC2086
    run_train 4 $lenet --pipeline-stages 2 --parallel "$par" --metrics "$T/got.csv" >/dev/null
    [ "$rc" -eq 0 ] || fail "lenet, 2 stages x $par on 2 ranks: exit $rc"
    same_losses "$T/ref.csv" "$T/got.csv" "lenet, 2 stages x $par on 2 ranks"
done
# ZeRO-1 and small gradient buckets inside the stages: the sums start in the last backward
# shellcheck disable=SC2086
run_train 4 $lenet --pipeline-stages 2 --zero 1 --bucket-mb 0.05 --metrics "$T/got.csv" >/dev/null
[ "$rc" -eq 0 ] || fail "lenet, 2 stages x dp 2 with ZeRO-1: exit $rc"
same_losses "$T/ref.csv" "$T/got.csv" "lenet, 2 stages x dp 2, ZeRO-1, 0.05 MiB buckets"
for sched in gpipe 1f1b; do
    # shellcheck disable=SC2086
    run_train 8 $lenet --pipeline-stages 2 --parallel 2d --mesh 2x2 --schedule "$sched" --metrics "$T/got.csv" >/dev/null
    [ "$rc" -eq 0 ] || fail "lenet dp x tp x pp 2x2x2 on 8 ranks, $sched: exit $rc"
    grep -q "stage 1: layers .* on 4-7 mesh 2x2" "$T/out" || fail "8 ranks: stage 1 is not ranks 4-7 as a 2x2 mesh"
    same_losses "$T/ref.csv" "$T/got.csv" "lenet dp x tp x pp 2x2x2 on 8 ranks, $sched"
done

# dropout keyed by sample: 2 stages x 4 micro-batches train as the plain
# whole batch (no --micro-batches) over 20 steps, GPipe and 1F1B
plain="--model lenet --dataset synthetic --synthetic-size 640,60 --batch-size 32 --steps 20 --log-every 1 --seed 5
    --threads 1 --no-eval"
for opt in sgd momentum; do
    # shellcheck disable=SC2086
    run_train 1 $plain --optimizer "$opt" --metrics "$T/plain.csv" >/dev/null
    [ "$rc" -eq 0 ] || fail "plain lenet, $opt: exit $rc"
    for sched in gpipe 1f1b; do
        # shellcheck disable=SC2086
        run_train 2 $plain --optimizer "$opt" --pipeline-stages 2 --micro-batches 4 --schedule "$sched" \
            --metrics "$T/got.csv" >/dev/null
        [ "$rc" -eq 0 ] || fail "lenet, 2 stages x 4 micro-batches, $opt, $sched: exit $rc"
        same_losses "$T/plain.csv" "$T/got.csv" "lenet with dropout, 2 stages x 4 micro-batches ($opt, $sched) against the plain 1-rank run"
    done
done

# no dropout: 4 micro-batches over 2 stages train as the plain whole batch
mlp="--model mlp --dataset synthetic --synthetic-size 640,60 --batch-size 32 --steps 8 --log-every 1 --seed 5
    --threads 1 --no-eval"
# shellcheck disable=SC2086
run_train 1 $mlp --metrics "$T/plain.csv" >/dev/null
# shellcheck disable=SC2086
run_train 2 $mlp --pipeline-stages 2 --micro-batches 4 --metrics "$T/got.csv" >/dev/null
[ "$rc" -eq 0 ] || fail "mlp, 2 stages: exit $rc"
same_losses "$T/plain.csv" "$T/got.csv" "mlp, 2 stages x 4 micro-batches against the plain 1-rank run"

# checkpoints across pipeline layouts
# shellcheck disable=SC2086
run_train 2 $lenet --pipeline-stages 2 --steps 3 --checkpoint "$T/pp2.h5" >/dev/null
[ "$rc" -eq 0 ] || fail "saving with 2 stages: exit $rc"
"$top_builddir/mpiflow-ckpt" list "$T/pp2.h5" >"$T/list" || fail "mpiflow-ckpt list: exit $?"
grep -q "model/hidden.weight .* B  *1 " "$T/list" || { cat "$T/list"; fail "hidden.weight is not on stage 1's rank"; }
grep -q "model/conv1.weight .* B  *0 " "$T/list" || fail "conv1.weight is not on stage 0's rank"
tail -3 "$T/ref.csv" | sed '1i step' >"$T/ref3.csv"
# shellcheck disable=SC2086
run_train 1 $lenet --resume "$T/pp2.h5" --metrics "$T/got.csv" >/dev/null
[ "$rc" -eq 0 ] || fail "resuming the 2-stage checkpoint on 1 rank: exit $rc"
same_losses "$T/ref3.csv" "$T/got.csv" "saved with 2 stages, resumed on 1 rank" 0
# shellcheck disable=SC2086
run_train 1 $lenet --steps 3 --checkpoint "$T/pp1.h5" >/dev/null
# shellcheck disable=SC2086
run_train 4 $lenet --pipeline-stages 2 --resume "$T/pp1.h5" --metrics "$T/got.csv" >/dev/null
[ "$rc" -eq 0 ] || fail "resuming the 1-rank checkpoint as 2 stages x 2 ranks: exit $rc"
same_losses "$T/ref3.csv" "$T/got.csv" "saved on 1 rank, resumed as 2 stages x dp 2"

# the trace shows each stage's forwards and backwards
# shellcheck disable=SC2086
run_train 2 $lenet --pipeline-stages 2 --trace "$T/trace.json" >/dev/null
[ "$rc" -eq 0 ] || fail "--trace with 2 stages: exit $rc"
for span in '"forward 0"' '"backward 3"' '"pid":0' '"pid":1'; do
    grep -q "$span" "$T/trace.json" || fail "the trace lacks $span"
done

# bad requests: exit 2 and the message on every rank
bad() {
    np=$1 want=$2
    shift 2
    refused "$np" "$want" --model lenet --dataset synthetic --synthetic-size 64,8 --steps 1 --no-eval "$@"
}
bad 2 "--micro-batches 5 does not divide --batch-size 64" --pipeline-stages 2 --micro-batches 5
bad 2 "12 stages for a model of 11 layers" --pipeline-stages 12
bad 3 "cannot be cut into equal groups, one per stage" --pipeline-stages 2
bad 2 "are fewer than the stages" --pipeline-stages 4
bad 2 "--pipeline-cuts: .*cut 2 must be greater than 6" --pipeline-cuts 6,2
bad 2 "--pipeline-cuts 6 makes 2 stages but --pipeline-stages is 3" --pipeline-cuts 6 --pipeline-stages 3
bad 2 "--schedule: 'interleaved' is not gpipe or 1f1b" --pipeline-stages 2 --schedule interleaved
bad 2 "--schedule: only with --pipeline-stages" --schedule gpipe
echo "pipeline: GPipe and 1F1B equal the 1-rank run on 2-4 ranks and 2x2x2 on 8; checkpoints across layouts"
