#!/bin/sh
# bench/run_memory.sh - a mid-size GPT (4 layers, 256 wide, T 256,
# vocabulary 8192, batch 8) under every parallel scheme on 1, 2 and 4
# ranks, and as 2- and 4-stage pipelines; then LeNet and the ViT data
# parallel with ZeRO-1/2/3 on 2 and 4 ranks: memory per rank by
# category, communication per step and throughput, each next to theory's
# figure (bench/bench_memory.c says how each is measured and predicted).
# Recorded in doc/performance.md.
#   bench/run_memory.sh [BENCH_MEMORY_FLAGS...]   (from the build directory, after make)
set -u
case "${1:-}" in
-h | --help)
    sed -n '2,10s/^# \{0,1\}//p' "$0"
    exit 0
    ;;
esac
here=$(dirname "$0")
extra="$*"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
echo "== $(date -u '+%Y-%m-%d %H:%M UTC'), $(getconf _NPROCESSORS_ONLN) cores,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
first=--header
run() {   # run NP FLAGS...
    np=$1
    shift
    mpiexec -n "$np" "$here/bench_memory" $first $extra "$@" 2>&1 | grep -v '^$' || echo "(np $np $*: failed)"
    first=""
}
run 1
run 1 --recompute attn
run 1 --recompute block
for np in 2 4; do
    run "$np"
    run "$np" --tp "$np"
    run "$np" --tp "$np" --sp
    run "$np" --zero 2
    run "$np" --zero 3
    run "$np" --zero 3 --recompute block
done
run 4 --tp 2
run 4 --tp 2 --zero 3
run 2 --pp 2
run 4 --pp 2
run 4 --pp 4
run 4 --pp 2 --tp 2
run 4 --pp 2 --tp 2 --sp
# the image models: any model's ZeRO, from a plan (extra flags are the GPT's)
extra=""
for model in lenet vit; do
    first=--header
    run 1 --model $model --batch 32
    for np in 2 4; do
        for z in 0 1 2 3; do run "$np" --model $model --zero $z --batch 32; done
    done
done
