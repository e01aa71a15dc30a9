#!/bin/sh
# Data-parallel gradient sync end to end with mpiflow-train:
# - gradient buckets of any size (--bucket-mb) and ZeRO-1 (--zero 1)
#   train with the losses of one sync per parameter, on 2 and 3 ranks;
# - a ZeRO-1 checkpoint holds the optimizer state S(0), equals plain DP's
#   checkpoint (mpiflow-ckpt diff), and resumes on 1 rank without ZeRO
#   with the straight run's losses; plain DP's resumes under ZeRO-1;
# - --trace writes a Chrome trace with every rank's spans and reports the
#   share of gradient communication hidden behind backward;
# - bad --bucket-mb and --zero values are refused on every rank.
[ -r "${top_srcdir:-.}/tests/lib.sh" ] || { echo "ERROR: no tests/lib.sh: run by make check, or set top_srcdir" >&2; exit 99; }
. "${top_srcdir:-.}/tests/lib.sh"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
T=$TMPDIR_TEST
CKPT="$top_builddir/mpiflow-ckpt"
lenet="--model lenet --dataset synthetic --synthetic-size 960,64 --batch-size 32 --steps 20 --log-every 1 --no-eval
    --seed 3 --threads 1"
# shellcheck disable=SC2086
run_train 2 $lenet --bucket-mb 0 --metrics "$T/ref.csv" >/dev/null
[ "$rc" -eq 0 ] || fail "lenet dp, no buckets: exit $rc"
for args in "--bucket-mb 25" "--bucket-mb 0.05" "--zero 1" "--zero 1 --bucket-mb 0.05" "--zero 1 --bucket-mb 0"; do
    # shellcheck disable=SC2086
    run_train 2 $lenet $args --metrics "$T/got.csv" >/dev/null
    [ "$rc" -eq 0 ] || fail "lenet dp $args: exit $rc"
    same_losses "$T/ref.csv" "$T/got.csv" "lenet on 2 ranks, $args"
done
mlp="--model mlp --dataset synthetic --synthetic-size 1200,60 --batch-size 48 --optimizer adam --log-every 1 --no-eval
    --seed 4 --threads 1"
# shellcheck disable=SC2086
run_train 3 $mlp --steps 24 --bucket-mb 0 --metrics "$T/ref3.csv" --checkpoint "$T/plain.h5" >/dev/null
[ "$rc" -eq 0 ] || fail "mlp adam on 3 ranks: exit $rc"
# shellcheck disable=SC2086
run_train 3 $mlp --steps 24 --zero 1 --bucket-mb 1 --metrics "$T/zero3.csv" --checkpoint "$T/zero.h5" >/dev/null
[ "$rc" -eq 0 ] || fail "mlp adam ZeRO-1 on 3 ranks: exit $rc"
same_losses "$T/ref3.csv" "$T/zero3.csv" "mlp adam on 3 ranks, ZeRO-1"
"$CKPT" list "$T/zero.h5" >"$T/list" || fail "mpiflow-ckpt list: exit $?"
grep -q "optim/hidden.weight/exp_avg .* S(0) " "$T/list" || { cat "$T/list"; fail "ZeRO-1 state is not S(0)"; }
"$CKPT" diff "$T/plain.h5" "$T/zero.h5" || fail "the ZeRO-1 checkpoint differs from plain DP's"
# resume the ZeRO-1 checkpoint on 1 rank without ZeRO: the straight run's losses
# shellcheck disable=SC2086
run_train 1 $mlp --steps 36 --metrics "$T/straight.csv" >/dev/null
# shellcheck disable=SC2086
run_train 1 $mlp --steps 36 --resume "$T/zero.h5" --metrics "$T/resumed.csv" >/dev/null
[ "$rc" -eq 0 ] || fail "resuming the ZeRO-1 checkpoint on 1 rank: exit $rc"
tail -12 "$T/straight.csv" >"$T/straight12.csv"
sed -i '1i step' "$T/straight12.csv"
same_losses "$T/straight12.csv" "$T/resumed.csv" "ZeRO-1 on 3 ranks, resumed on 1"
# and the other way: plain DP's checkpoint from 3 ranks resumed under ZeRO-1 on 2
# shellcheck disable=SC2086
run_train 2 $mlp --steps 36 --zero 1 --resume "$T/plain.h5" --metrics "$T/resumed2.csv" >/dev/null
[ "$rc" -eq 0 ] || fail "resuming plain DP's checkpoint under ZeRO-1 on 2 ranks: exit $rc"
same_losses "$T/straight12.csv" "$T/resumed2.csv" "plain DP on 3 ranks, resumed under ZeRO-1 on 2"

# --trace: a Chrome trace with every rank's spans and the hidden share
"$MPIEXEC" -n 2 "$top_builddir/mpiflow-train" --model lenet --dataset synthetic --synthetic-size 640,64 --steps 6 \
    --no-eval --progress lines --bucket-mb 0.5 --trace "$TMPDIR_TEST/trace.json" >"$TMPDIR_TEST/train" 2>&1 ||
    { cat "$TMPDIR_TEST/train"; fail "mpiflow-train --trace: exit $?"; }
cat "$TMPDIR_TEST/train"
grep -q "^trace: .*trace.json; gradient communication [0-9.]* ms per step per rank, [0-9]*% of it hidden behind backward" \
    "$TMPDIR_TEST/train" || fail "--trace: no summary line"
t="$TMPDIR_TEST/trace.json"
head -1 "$t" | grep -qx '\[' || fail "trace: not a JSON array"
tail -1 "$t" | grep -qx '\]' || fail "trace: not a JSON array"
for pid in 0 1; do
    for name in forward backward "optimizer step" "allreduce bucket 0"; do
        grep -q "\"name\":\"$name[^\"]*\",\"cat\":\"[a-z]*\",\"ph\":\"X\",\"pid\":$pid," "$t" ||
            fail "trace: no '$name' span for rank $pid"
    done
done
[ "$(grep -c '"name":"backward"' "$t")" -eq 12 ] || fail "trace: expected 6 backward spans per rank"
if command -v python3 >/dev/null 2>&1; then
    python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$t" || fail "trace: python3 cannot parse it"
fi
"$MPIEXEC" -n 2 "$top_builddir/mpiflow-train" --bucket-mb -3 >"$TMPDIR_TEST/train" 2>&1 && fail "--bucket-mb -3 accepted"
grep -q "bucket-mb: '-3' is not a size" "$TMPDIR_TEST/train" || fail "--bucket-mb -3: no clear message"
"$MPIEXEC" -n 2 "$TRAIN" --zero 4 >"$T/train" 2>&1 && fail "--zero 4 accepted"
[ "$(grep -c "zero: '4' is not 0, 1, 2 or 3" "$T/train")" -ge 1 ] || fail "--zero 4: no clear message"
"$MPIEXEC" -n 2 "$TRAIN" --zero 2 --pipeline-stages 2 >"$T/train" 2>&1 && fail "--zero 2 accepted with a pipeline"
[ "$(grep -c "ZeRO-2 and -3 split parameters over the data-parallel ranks, but pipeline stages" "$T/train")" -ge 1 ] ||
    fail "--zero 2 with a pipeline: no clear message"
echo "gradient sync: buckets and ZeRO-1 equal plain DP; ZeRO-1 checkpoints reshard; traces"
