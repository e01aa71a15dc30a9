#!/bin/sh
# mpiflow-train --device cuda against the CPU (needs a GPU: SKIP without
# one; FAIL when a GPU is there but CUDA cannot start). Every model and parallel mode: mlp and lenet on 1 rank, dp, mp,
# hybrid and 2d on 2 and 4 ranks (ranks share the GPUs when there are
# fewer), a 2-stage pipeline, checkpoints written on the GPU and resumed
# on the CPU, and bf16 autocast against fp32. Losses agree with the CPU
# run of the same layout within 1e-4 relative (float sums in another
# order); bf16 within 2e-2.
. "$top_srcdir/tests/lib.sh"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
common="--dataset synthetic --synthetic-size 3200,400 --batch-size 32 --optimizer adam --lr 0.001 --seed 3
    --log-every 1 --threads 1 --progress lines"

run_train 1 $common --steps 1 --no-eval --device cuda >/dev/null
if [ "$rc" -eq 2 ] && grep -q "CUDA is unavailable" "$TMPDIR_TEST/out"; then
    skip_unless_cuda "$TMPDIR_TEST/out"
fi
[ "$rc" -eq 0 ] || fail "--device cuda: exit $rc: $(tail -3 "$TMPDIR_TEST/out")"

compare() {   # compare A B TOL: worst relative difference of two loss columns
    paste -d' ' "$1" "$2" | awk -v tol="$3" '
        { d = $1 - $2; if (d < 0) d = -d; m = $2 < 0 ? -$2 : $2; r = d / (1e-3 + m)
          if (r > worst) worst = r; n++ }
        END { printf "%d losses, worst relative difference %.3g\n", n, worst; exit !(n > 0 && worst <= tol) }'
}

# run TAG NP ARGS... -> $TMPDIR_TEST/TAG.loss (one loss per step)
run() {
    tag=$1 np=$2
    shift 2
    # shellcheck disable=SC2086
    run_train "$np" $common "$@" --metrics "$TMPDIR_TEST/$tag.csv" >/dev/null
    [ "$rc" -eq 0 ] || fail "$tag exited with $rc: $(tail -3 "$TMPDIR_TEST/out")"
    tail -n +2 "$TMPDIR_TEST/$tag.csv" | cut -d, -f3 >"$TMPDIR_TEST/$tag.loss"
    cp "$TMPDIR_TEST/out" "$TMPDIR_TEST/$tag.out"
}

same() {   # same TAG_A TAG_B TOL
    echo "$1 vs $2:"
    compare "$TMPDIR_TEST/$1.loss" "$TMPDIR_TEST/$2.loss" "$3" || fail "$1 and $2 differ"
}

for model in mlp lenet; do
    run "$model.cpu" 1 --model "$model" --steps 40
    run "$model.cuda" 1 --model "$model" --steps 40 --device cuda
    grep -q "device cuda: " "$TMPDIR_TEST/$model.cuda.out" || fail "$model: no device line"
    same "$model.cuda" "$model.cpu" 1e-4
    a=$(grep '^final' "$TMPDIR_TEST/$model.cpu.out" | tr ' ' '\n' | sed -n 's/^test_loss=//p')
    b=$(grep '^final' "$TMPDIR_TEST/$model.cuda.out" | tr ' ' '\n' | sed -n 's/^test_loss=//p')
    awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 1e-3 * a) }' ||
        fail "$model: test loss $b on cuda vs $a on the cpu"
done

for mode in dp mp hybrid 2d; do
    for np in 2 4; do
        run "mlp.$mode.$np" "$np" --model mlp --steps 30 --no-eval --parallel "$mode" --device cuda
        grep -q "parallel $mode" "$TMPDIR_TEST/mlp.$mode.$np.out" || fail "mlp.$mode.$np: not --parallel $mode"
        head -30 "$TMPDIR_TEST/mlp.cpu.loss" >"$TMPDIR_TEST/ref30.loss"
        same "mlp.$mode.$np" ref30 1e-4
    done
done
run lenet.dp.2 2 --model lenet --steps 20 --no-eval --parallel dp --device cuda
head -20 "$TMPDIR_TEST/lenet.cpu.loss" >"$TMPDIR_TEST/lref20.loss"
same lenet.dp.2 lref20 1e-4

# a pipeline of 2 stages (one rank each), 4 micro-batches, against the CPU's
run pipe.cpu 2 --model lenet --steps 20 --no-eval --pipeline-stages 2 --micro-batches 4
run pipe.cuda 2 --model lenet --steps 20 --no-eval --pipeline-stages 2 --micro-batches 4 --device cuda
same pipe.cuda pipe.cpu 1e-4

# a checkpoint written from the GPU resumes on the CPU
run ck.a 2 --model mlp --steps 20 --no-eval --device cuda --checkpoint "$TMPDIR_TEST/gpu.h5"
run ck.b 1 --model mlp --steps 40 --no-eval --resume "$TMPDIR_TEST/gpu.h5"
tail -20 "$TMPDIR_TEST/mlp.cpu.loss" >"$TMPDIR_TEST/tail20.loss"
same ck.b tail20 1e-4

# bf16 autocast on the GPU (tensor cores) follows fp32 within bf16's precision
# (plain SGD: Adam's normalised steps magnify bf16's differences once the
# loss nears 0)
run lenet.sgd 1 --model lenet --steps 40 --device cuda --optimizer sgd --lr 0.02
run lenet.bf16 1 --model lenet --steps 40 --device cuda --optimizer sgd --lr 0.02 --precision bf16
same lenet.bf16 lenet.sgd 2e-2
cmp -s "$TMPDIR_TEST/lenet.bf16.loss" "$TMPDIR_TEST/lenet.sgd.loss" && fail "bf16 gave the fp32 losses exactly"

# ZeRO-1 keeps its shards on the host: refused on the GPU, on every rank
run_train 2 $common --steps 1 --device cuda --zero 1 >/dev/null
[ "$rc" -eq 2 ] || fail "--zero 1 on cuda: exit $rc"
echo "cuda training agrees with the cpu"
