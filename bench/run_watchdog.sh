#!/bin/sh
# What MF_TIMEOUT costs a healthy run (doc/performance.md):
#   bench/run_watchdog.sh [ROUNDS]
# In each of ROUNDS rounds (default 5), without and with MF_TIMEOUT=600
# (the ledger records every wait; the watchdog thread looks every 250 ms),
# each going first in every other round:
# 1. mpiflow-bench allreduce on 2 ranks, 4 KiB to 1 MiB, where a fixed
#    cost per call shows most;
# 2. mlp and lenet data parallel on 2 ranks, 1 MiB buckets (many bucket
#    allreduces on the progress thread), samples/s;
# 3. lenet as a 2-stage pipeline with 8 micro-batches (point-to-point).
# Prints the median of each figure over the rounds and with/without.
# Run from the build directory, with nothing else using the CPUs.
set -eu
rounds=${1:-5}
mpiexec=${MPIEXEC:-mpiexec}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
dir=$(mktemp -d /tmp/mf_bench_wd.XXXXXX)
trap 'rm -rf "$dir"' EXIT
med() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

train() {   # train KEY ARGS...: samples/s into $dir/KEY
    key=$1
    shift
    "$mpiexec" -n 2 ./mpiflow-train --dataset synthetic --synthetic-size 4000,100 --no-eval --progress lines \
        --log-every 100000 --threads 1 "$@" >"$dir/out" 2>&1
    sed -n 's/.*samples_per_sec=\([0-9]*\).*/\1/p' "$dir/out" >>"$dir/$key"
}

for r in $(seq "$rounds"); do
    order="off on"
    [ $((r % 2)) -eq 0 ] && order="on off"   # each goes first in every other round
    for mode in $order; do
        if [ "$mode" = on ]; then export MF_TIMEOUT=600; else unset MF_TIMEOUT; fi
        "$mpiexec" -n 2 ./mpiflow-bench allreduce --min-kb 4 --max-mb 1 --reps 200 >"$dir/ar"
        # size and the 'auto' column's microseconds
        awk '$1 ~ /^[0-9]+$/ { print $1, $10 }' "$dir/ar" | while read -r size us; do
            echo "$us" >>"$dir/ar_${size}_$mode"
        done
        train "mlp_$mode" --model mlp --batch-size 64 --steps 3000 --bucket-mb 1
        train "lenet_$mode" --model lenet --batch-size 32 --steps 80 --bucket-mb 1
        train "pipe_$mode" --model lenet --batch-size 32 --steps 80 --pipeline-stages 2 --micro-batches 8
    done
done
unset MF_TIMEOUT
printf '%-34s %12s %12s %8s\n' "median of $rounds rounds" "off" "MF_TIMEOUT" "on/off"
for size in $(ls "$dir" | sed -n 's/^ar_\([0-9]*\)_off$/\1/p' | sort -n); do
    f="$dir/ar_${size}_off"
    a=$(med <"$f")
    b=$(med <"$dir/ar_${size}_on")
    printf '%-34s %12s %12s %8.3f\n' "allreduce $size B, auto (us)" "$a" "$b" "$(echo "$b / $a" | bc -l)"
done
for k in mlp lenet pipe; do
    a=$(med <"$dir/${k}_off")
    b=$(med <"$dir/${k}_on")
    case $k in
    mlp) what="mlp dp, 1 MiB buckets" ;;
    lenet) what="lenet dp, 1 MiB buckets" ;;
    *) what="lenet 2 stages, 8 micro-batches" ;;
    esac
    printf '%-34s %12s %12s %8.3f\n' "$what (samples/s)" "$a" "$b" "$(echo "$b / $a" | bc -l)"
done
