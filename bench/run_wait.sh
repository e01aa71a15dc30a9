#!/bin/sh
# bench/run_wait.sh [RANKS] [STEPS] [ROUNDS]: how ranks that share CPUs
# should wait for each other (doc/collectives.md, "Waiting"). Trains a
# few plans of the ViT and the GPT 10m preset on RANKS ranks (default 4)
# with MF_WAIT=spin and MF_WAIT=yield, the two alternating, ROUNDS times
# (default 3), and prints the median step of each (ms) and their ratio.
# Run from the build directory.
set -u
np=${1:-4}
steps=${2:-12}
rounds=${3:-3}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MF_THREADS=1
T=$(mktemp -d "${TMPDIR:-/tmp}/mf_wait.XXXXXX")
trap 'rm -rf "$T"' EXIT
MPIEXEC=${MPIEXEC:-mpiexec}
vit="--model vit --dataset synthetic --synthetic-size 2048,64 --batch-size 64"
gpt="--model gpt --preset 10m --dataset text:/usr/share/games/fortunes --batch-size 16"

echo "# bench/run_wait.sh $np $steps $rounds: $(date -u +%Y-%m-%d), $(nproc --all) core(s), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
"$MPIEXEC" -n "$np" ./mpiflow-bench topo | head -1 | sed 's/^/# /'

step() {   # step WAIT FLAGS...: the median step of one run, in ms
    w=$1
    shift
    # shellcheck disable=SC2068  # the flags are split on purpose
    MF_WAIT=$w "$MPIEXEC" -n "$np" ./mpiflow-train $@ --steps "$steps" --no-eval --progress lines \
        --log-every "$steps" </dev/null 2>&1 | sed -n 's/.* step_ms=\([0-9.]*\) .*/\1/p'
}
median() { sort -n | awk '{ t[NR] = $1 } END { print NR % 2 ? t[(NR + 1) / 2] : (t[NR / 2] + t[NR / 2 + 1]) / 2 }'; }

printf '%-48s %10s %10s %8s\n' plan spin_ms yield_ms spin/yield
while IFS='|' read -r name model flags; do
    [ -n "$name" ] || continue
    eval "m=\$$model"
    : >"$T/spin"
    : >"$T/yield"
    r=0
    while [ $r -lt "$rounds" ]; do
        step spin "$m $flags" >>"$T/spin"
        step yield "$m $flags" >>"$T/yield"
        r=$((r + 1))
    done
    s=$(median <"$T/spin")
    y=$(median <"$T/yield")
    awk -v n="$name" -v s="$s" -v y="$y" 'BEGIN { printf "%-48s %10.1f %10.1f %8.2f\n", n, s, y, (y > 0 ? s / y : 0) }'
done <<EOF
ViT, data parallel|vit|
ViT, --tensor-parallel 2|vit|--tensor-parallel 2
ViT, --zero 3|vit|--zero 3
ViT, --pipeline-stages 4 --micro-batches 4|vit|--pipeline-stages 4 --micro-batches 4
GPT 10m, data parallel|gpt|
GPT 10m, --zero 3|gpt|--zero 3
GPT 10m, --tensor-parallel 2|gpt|--tensor-parallel 2
EOF
