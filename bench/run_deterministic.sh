#!/bin/sh
# What --deterministic costs (doc/performance.md):
#   bench/run_deterministic.sh [ROUNDS]
# In each of ROUNDS rounds (default 3), plain and --deterministic (12
# shards), each going first in every other round: mlp (batch 96) and
# lenet (batch 48), on 1 rank and data parallel on 2 ranks, samples/s.
# Prints the median over the rounds and deterministic/plain.
# Run from the build directory, with nothing else using the CPUs.
set -eu
rounds=${1:-3}
mpiexec=${MPIEXEC:-mpiexec}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
dir=$(mktemp -d /tmp/mf_bench_det.XXXXXX)
trap 'rm -rf "$dir"' EXIT
med() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

train() {   # train KEY NP ARGS...: samples/s into $dir/KEY
    key=$1
    np=$2
    shift 2
    "$mpiexec" -n "$np" ./mpiflow-train --dataset synthetic --synthetic-size 4000,100 --no-eval --progress lines \
        --log-every 100000 --threads 1 "$@" >"$dir/out" 2>&1
    sed -n 's/.*samples_per_sec=\([0-9]*\).*/\1/p' "$dir/out" >>"$dir/$key"
}

for r in $(seq "$rounds"); do
    order="plain det"
    [ $((r % 2)) -eq 0 ] && order="det plain"
    for mode in $order; do
        flag=""
        [ "$mode" = det ] && flag="--deterministic=12"
        for np in 1 2; do
            # shellcheck disable=SC2086
            train "mlp_${np}_$mode" "$np" --model mlp --batch-size 96 --steps 1000 $flag
            # shellcheck disable=SC2086
            train "lenet_${np}_$mode" "$np" --model lenet --batch-size 48 --steps 60 $flag
        done
    done
done
printf '%-30s %12s %14s %8s\n' "samples/s, median of $rounds" "plain" "deterministic" "det/plain"
for k in mlp lenet; do
    for np in 1 2; do
        a=$(med <"$dir/${k}_${np}_plain")
        b=$(med <"$dir/${k}_${np}_det")
        printf '%-30s %12s %14s %8.3f\n' "$k, $np rank(s)" "$a" "$b" "$(echo "$b / $a" | bc -l)"
    done
done
