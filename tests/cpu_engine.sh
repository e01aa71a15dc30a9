#!/bin/sh
# mpiflow-train and the CPU engines (doc/cpu.md): the header names the
# engine in use; MF_CPU_ENGINE forces one, and a bad value is refused on
# every rank; --precision bf16 on the cpu trains where the CPU multiplies
# bfloat16 natively (oneDNN, AVX512_BF16 or AMX), with losses within 2e-2
# of fp32 for LeNet, the MLP and a small GPT, the same bits run to run
# and on 1 or 2 ranks under --deterministic, and is refused elsewhere.
# SKIP after the engine checks where the CPU or the build has no bf16.
[ -r "${top_srcdir:-.}/tests/lib.sh" ] || { echo "ERROR: no tests/lib.sh: run by make check, or set top_srcdir" >&2; exit 99; }
. "${top_srcdir:-.}/tests/lib.sh"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
T="$TMPDIR_TEST"
quick="--dataset synthetic --synthetic-size 640,64 --batch-size 32 --threads 1 --no-eval"

export MF_CPU_ENGINE=simd
refused 2 "MF_CPU_ENGINE='simd': expected openblas or onednn" $quick --steps 1
export MF_CPU_ENGINE=openblas
run_train 1 $quick --steps 2 --model lenet >/dev/null
[ "$rc" -eq 0 ] || fail "MF_CPU_ENGINE=openblas: exit $rc"
grep -q '^mpiflow-train: cpu engine: gemm/linear/matmul: openblas' "$T/out" || fail "no openblas engine line"
unset MF_CPU_ENGINE

run_train 1 $quick --steps 2 --model lenet >/dev/null
[ "$rc" -eq 0 ] || fail "default engine: exit $rc"
line=$(grep '^mpiflow-train: cpu engine: ' "$T/out") || fail "no engine line"
echo "$line"
case $line in
*"conv2d: onednn, isa "*)
    MF_CPU_ENGINE=openblas refused 2 "MF_CPU_ENGINE=openblas chose OpenBLAS, which has no bf16 kernels" $quick --steps 1 --precision bf16 ;;
*"conv2d: im2col + openblas"*)
    refused 2 "oneDNN is not in this build" $quick --steps 1 --precision bf16
    export MF_CPU_ENGINE=onednn
    refused 2 "MF_CPU_ENGINE=onednn: oneDNN is not in this build" $quick --steps 1
    skip "oneDNN is not in this build: no native bf16 to test" ;;
*) fail "the engine line names no engine" ;;
esac
# a checkpoint written on OpenBLAS resumes on oneDNN, and the run goes on
# as the unbroken OpenBLAS one within float precision
ck="$quick --model lenet --log-every 1"
MF_CPU_ENGINE=openblas run_train 1 $ck --steps 20 --metrics "$T/whole.csv" >/dev/null
[ "$rc" -eq 0 ] || fail "openblas run: exit $rc"
MF_CPU_ENGINE=openblas run_train 1 $ck --steps 10 --checkpoint "$T/e.h5" >/dev/null
[ "$rc" -eq 0 ] || fail "openblas run to the checkpoint: exit $rc"
run_train 1 $ck --steps 20 --resume "$T/e.h5" --metrics "$T/resumed.csv" >/dev/null
[ "$rc" -eq 0 ] || { cat "$T/out"; fail "resuming on onednn: exit $rc"; }
tail -n +12 "$T/whole.csv" >"$T/whole.tail"
sed -n 1p "$T/whole.csv" | cat - "$T/whole.tail" >"$T/whole10.csv"
same_losses "$T/resumed.csv" "$T/whole10.csv" "resumed on onednn against the unbroken openblas run" 1e-4

case $line in
*"bf16 native"*) ;;
*)
    refused 2 "this CPU has neither AVX512_BF16 nor AMX" $quick --steps 1 --precision bf16
    skip "this CPU has no AVX512_BF16 or AMX" ;;
esac

# run TAG NP ARGS... -> $T/TAG.csv
run() {
    tag=$1 np=$2
    shift 2
    run_train "$np" "$@" --log-every 1 --metrics "$T/$tag.csv" >/dev/null
    [ "$rc" -eq 0 ] || { cat "$T/out"; fail "$tag: exit $rc"; }
    cp "$T/out" "$T/$tag.out"
}
differ() {   # differ A B: bf16 changed the numbers (it is really in use)
    cmp -s "$T/$1.csv" "$T/$2.csv" && fail "$1 gave the losses of $2 bit for bit"
    echo "ok: $1 and $2 differ"
}

# plain SGD: Adam's normalised steps turn bf16's last-digit differences
# into whole steps once the loss is near 0, and this data is easy
img="--dataset synthetic --synthetic-size 3200,400 --batch-size 32 --optimizer sgd --lr 0.02 --seed 3 --threads 1 --no-eval"
for model in lenet mlp; do
    run "$model.fp32" 1 $img --model "$model" --steps 40
    run "$model.bf16" 1 $img --model "$model" --steps 40 --precision bf16
    grep -q 'precision bf16' "$T/$model.bf16.out" || fail "$model: the header does not say bf16"
    same_losses "$T/$model.bf16.csv" "$T/$model.fp32.csv" "$model bf16 against fp32" 2e-2
    differ "$model.bf16" "$model.fp32"
    losses "$T/$model.bf16.csv" | awk 'NR == 1 { a = $1 } { b = $1 } END { printf "ok: bf16 loss %g -> %g\n", a, b; exit !(b < 0.9 * a) }' ||
        fail "$model: bf16 training did not learn"
done
# the start-up measure of bf16 against fp32: its two rates, and the
# warning exactly when bf16 is the slower
adv=$(grep -E "bf16 pays on this CPU|warning: --precision bf16 will be slower" "$T/lenet.bf16.out") ||
    fail "bf16 run: no line says whether bf16 pays on this CPU"
echo "$adv" | awk '{ for (i = 1; i < NF; i++) if ($(i + 1) == "GFLOP/s") b = $i; else if ($i == "against") f = $(i + 1) }
    END { slow = /will be slower/; exit !(b > 0 && f > 0 && slow == (b < 0.9 * f)) }' ||
    fail "bf16 advice: '$adv' (the rates missing, or the warning does not follow them)"
echo "ok: $adv"
grep -q "pays on this CPU\|will be slower" "$T/lenet.fp32.out" && fail "an fp32 run measured bf16"
run lenet.bf16.again 1 $img --model lenet --steps 40 --precision bf16
same_losses "$T/lenet.bf16.again.csv" "$T/lenet.bf16.csv" "lenet bf16 run twice" 0

# --deterministic: 1 and 2 ranks give the same bits in bf16 too
run det1 1 $img --model lenet --steps 20 --precision bf16 --deterministic=4
run det2 2 $img --model lenet --steps 20 --precision bf16 --deterministic=4 --parallel dp
same_losses "$T/det2.csv" "$T/det1.csv" "lenet bf16 --deterministic on 1 and 2 ranks" 0

word_text "$T/text.txt" 1200
gpt="--model gpt --dataset text:$T/text.txt --n-layer 2 --n-head 2 --n-embd 32 --seq-len 32 --batch-size 8 --threads 1 --lr 3e-3"
run gpt.fp32 1 $gpt --steps 30
run gpt.bf16 1 $gpt --steps 30 --precision bf16
same_losses "$T/gpt.bf16.csv" "$T/gpt.fp32.csv" "gpt bf16 against fp32" 2e-2
differ gpt.bf16 gpt.fp32
echo "the cpu engines and bf16 on the cpu behave"
