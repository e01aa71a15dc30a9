#!/bin/sh
# mpiflow-train --device cuda against the same job on the CPU (needs a
# GPU: SKIP without one; FAIL when a GPU is there but CUDA cannot start):
# - mlp and LeNet on 1 rank; mlp dp, mp, hybrid and 2d on 2 and 4 ranks
#   (ranks share the GPUs when there are fewer); LeNet dp and a 2-stage
#   pipeline; a checkpoint written on the GPU resumed on the CPU;
# - the GPT (attention, tanh GELU, the fused LM head) on 1 rank, data
#   parallel on 2, tensor + sequence parallel on 2, ZeRO-3 on 2, with
#   activation recompute, and as a 2-stage pipeline;
# - bf16 autocast on the GPU against fp32 on the GPU, and against bf16 on
#   the CPU where the CPU multiplies in bfloat16.
# Every rank must report a CUDA device and kernels run on it (a silent
# fall-back to the CPU fails). Losses agree with the CPU run of the same
# layout within 1e-4 relative at every step (10 to 40 steps: float sums
# in another order); bf16 against fp32 within 2e-2, bf16 GPU against
# bf16 CPU within 5e-3. Every job runs even when one fails, and prints
# one "job" line (result, worst difference, seconds) for the summary of
# bench/run_cuda.sh.
[ -r "${top_srcdir:-.}/tests/lib.sh" ] || { echo "ERROR: no tests/lib.sh: run by make check, or set top_srcdir" >&2; exit 99; }
. "${top_srcdir:-.}/tests/lib.sh"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
T=$TMPDIR_TEST
common="--dataset synthetic --synthetic-size 3200,400 --batch-size 32 --optimizer adam --lr 0.001 --seed 3
    --log-every 1 --threads 1 --progress lines"

run_train 1 $common --steps 1 --no-eval --device cuda >/dev/null
if [ "$rc" -eq 2 ] && grep -q "CUDA is unavailable" "$T/out"; then
    skip_unless_cuda "$T/out"
fi
[ "$rc" -eq 0 ] || fail "--device cuda: exit $rc: $(tail -3 "$T/out")"

failures=0
bad() {   # bad WHAT: one failure, reported; the other jobs still run
    echo "FAIL: $*"
    failures=$((failures + 1))
}

# run TAG NP ARGS... -> $T/TAG.loss (one loss per step), $T/TAG.out, $T/TAG.secs
run() {
    tag=$1 np=$2
    shift 2
    t0=$(date +%s%N)
    "$MPIEXEC" -n "$np" "$TRAIN" --progress lines "$@" --metrics "$T/$tag.csv" >"$T/$tag.out" 2>&1
    rc=$?
    awk -v a="$t0" -v b="$(date +%s%N)" 'BEGIN { printf "%.1f", (b - a) / 1e9 }' >"$T/$tag.secs"
    tail -n +2 "$T/$tag.csv" 2>/dev/null | cut -d, -f3 | grep -v '^$' >"$T/$tag.loss"
    [ "$rc" -eq 0 ] || { bad "$tag exited with $rc: $(tail -3 "$T/$tag.out")"; return 1; }
    case " $* " in
    *" --device cuda "*) on_gpu "$tag" "$np" ;;
    esac
    return 0
}

# on_gpu TAG NP: every rank names a CUDA device and ran kernels there
on_gpu() {
    n=$(grep -c "^mpiflow-train: rank [0-9]*: device cuda: " "$T/$1.out")
    [ "$n" -eq "$2" ] || bad "$1: $n of $2 ranks report a CUDA device"
    grep -q "^mpiflow-train: rank [0-9]*: device cuda: unavailable" "$T/$1.out" && bad "$1: a rank has no GPU"
    k=$(grep -c "^mpiflow-train: rank [0-9]*: ran [1-9][0-9]* kernels on cuda" "$T/$1.out")
    [ "$k" -eq "$2" ] || bad "$1: $k of $2 ranks ran kernels on the GPU: $(grep 'kernels on cuda' "$T/$1.out")"
}

# same A B TOL: the loss columns of two runs agree at every step within
# TOL relative; prints the job line
same() {
    [ -s "$T/$1.loss" ] && [ -s "$T/$2.loss" ] || { bad "$1 vs $2: no losses"; return; }
    w=$(paste -d' ' "$T/$1.loss" "$T/$2.loss" | awk '
        { d = $1 - $2; if (d < 0) d = -d; m = $2 < 0 ? -$2 : $2; r = d / (1e-3 + m); if (r > w) w = r; n++ }
        END { printf "%d %.3g", n, w }')
    n=${w% *} w=${w#* }
    ok=$(awk -v w="$w" -v t="$3" -v n="$n" 'BEGIN { print (n > 0 && w <= t) ? "ok" : "FAIL" }')
    printf 'job %-24s %-4s %3d losses  worst relative difference %-9s (tolerance %s)  %s s\n' "$1" "$ok" "$n" "$w" "$3" \
        "$(cat "$T/$1.secs")"
    [ "$ok" = ok ] || bad "$1 and $2 differ: worst $w > $3"
}

for model in mlp lenet; do
    run "$model.cpu" 1 --model "$model" $common --steps 40
    run "$model.cuda" 1 --model "$model" $common --steps 40 --device cuda
    same "$model.cuda" "$model.cpu" 1e-4
    a=$(grep '^final' "$T/$model.cpu.out" | tr ' ' '\n' | sed -n 's/^test_loss=//p')
    b=$(grep '^final' "$T/$model.cuda.out" | tr ' ' '\n' | sed -n 's/^test_loss=//p')
    awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 1e-3 * a) }' ||
        bad "$model: test loss $b on cuda vs $a on the cpu"
done
head -30 "$T/mlp.cpu.loss" >"$T/ref30.loss"
echo 0 >"$T/ref30.secs"
for mode in dp mp hybrid 2d; do
    for np in 2 4; do
        run "mlp.$mode.$np" "$np" --model mlp $common --steps 30 --no-eval --parallel "$mode" --device cuda &&
            same "mlp.$mode.$np" ref30 1e-4
    done
done
head -20 "$T/lenet.cpu.loss" >"$T/lref20.loss"
run lenet.dp.2 2 --model lenet $common --steps 20 --no-eval --parallel dp --device cuda && same lenet.dp.2 lref20 1e-4
# a pipeline of 2 stages (one rank each), 4 micro-batches
run pipe.cpu 2 --model lenet $common --steps 20 --no-eval --pipeline-stages 2 --micro-batches 4
run pipe.cuda 2 --model lenet $common --steps 20 --no-eval --pipeline-stages 2 --micro-batches 4 --device cuda &&
    same pipe.cuda pipe.cpu 1e-4
# a checkpoint written from the GPU resumes on the CPU
run ck.a 2 --model mlp $common --steps 20 --no-eval --device cuda --checkpoint "$T/gpu.h5" &&
    run ck.b 1 --model mlp $common --steps 40 --no-eval --resume "$T/gpu.h5" &&
    tail -20 "$T/mlp.cpu.loss" >"$T/tail20.loss" && same ck.b tail20 1e-4

# the GPT, each layout on the GPU against the same layout on the CPU
word_text "$T/words.txt" 600
gpt="--model gpt --dataset text:$T/words.txt --n-layer 2 --n-head 4 --n-embd 64 --seq-len 32 --batch-size 8
    --lr 3e-3 --steps 10 --no-eval --seed 3 --threads 1 --log-every 1"
for layout in "1 gpt" "2 gpt.dp" "2 gpt.tp_sp --tensor-parallel 2 --sequence-parallel" "2 gpt.zero3 --zero 3" \
    "1 gpt.recompute --recompute block" "2 gpt.pp --pipeline-stages 2 --micro-batches 4"; do
    set -- $layout
    np=$1 tag=$2
    shift 2
    run "$tag.cpu" "$np" $gpt "$@"
    run "$tag.cuda" "$np" $gpt "$@" --device cuda && same "$tag.cuda" "$tag.cpu" 1e-4
done

# bf16 autocast on the GPU (tensor cores): against fp32 there within
# bf16's precision (plain SGD for LeNet: Adam's normalised steps magnify
# bf16's differences once the loss nears 0), and against bf16 on the CPU
run lenet.sgd 1 --model lenet $common --steps 40 --device cuda --optimizer sgd --lr 0.02
run lenet.bf16 1 --model lenet $common --steps 40 --device cuda --optimizer sgd --lr 0.02 --precision bf16 &&
    same lenet.bf16 lenet.sgd 2e-2
cmp -s "$T/lenet.bf16.loss" "$T/lenet.sgd.loss" && bad "bf16 gave the fp32 losses exactly"
run gpt.bf16.cuda 1 $gpt --device cuda --precision bf16 && same gpt.bf16.cuda gpt.cuda 2e-2
cmp -s "$T/gpt.bf16.cuda.loss" "$T/gpt.cuda.loss" && bad "the GPT in bf16 gave the fp32 losses exactly"
"$MPIEXEC" -n 1 "$TRAIN" $gpt --precision bf16 --metrics "$T/gpt.bf16.cpu.csv" >"$T/gpt.bf16.cpu.out" 2>&1
case $? in
0)
    tail -n +2 "$T/gpt.bf16.cpu.csv" | cut -d, -f3 | grep -v '^$' >"$T/gpt.bf16.cpu.loss"
    same gpt.bf16.cuda gpt.bf16.cpu 5e-3
    ;;
2) echo "job gpt.bf16.cuda vs cpu   not compared: $(grep -o 'needs the oneDNN engine.*' "$T/gpt.bf16.cpu.out" | head -1)" ;;
*) bad "bf16 on the CPU: $(tail -2 "$T/gpt.bf16.cpu.out")" ;;
esac

# ZeRO-1 keeps its shards on the host: refused on the GPU, on every rank
run_train 2 $common --model mlp --steps 1 --device cuda --zero 1 >/dev/null
[ "$rc" -eq 2 ] || bad "--zero 1 on cuda: exit $rc"
[ "$failures" -eq 0 ] || fail "$failures check(s) failed"
echo "cuda training agrees with the cpu"
