#!/bin/sh
# The collectives and gradient-sync figures of doc/performance.md:
#   bench/run_coll.sh [STEPS]
# 1. mpiflow-bench allreduce, reduce_scatter and allgather on 2 ranks
#    (4 KiB - 256 MiB), on 4 ranks of one node and on 4 ranks as 2
#    emulated nodes (4 KiB - 64 MiB, 5 repetitions: oversubscribed here);
# 2. LeNet data parallel on 2 ranks for STEPS steps (default 100) with no
#    buckets, the default 25 MiB, 1 MiB and 0.05 MiB buckets, and ZeRO-1:
#    samples/s and the share of gradient communication hidden behind
#    backward, read from the --trace file.
# Run from the build directory, with nothing else using the CPUs.
set -eu
steps=${1:-100}
mpiexec=${MPIEXEC:-mpiexec}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
for op in allreduce reduce_scatter allgather; do
    $mpiexec -n 2 ./mpiflow-bench "$op"
    echo
    $mpiexec -n 4 ./mpiflow-bench "$op" --max-mb 64 --reps 5
    echo
    $mpiexec -n 4 -genv MF_RANKS_PER_NODE 2 ./mpiflow-bench "$op" --max-mb 64 --reps 5
    echo
done
dir=$(mktemp -d /tmp/mf_bench_coll.XXXXXX)
printf '%-28s %12s %12s %10s\n' "lenet dp, 2 ranks" "samples/s" "comm ms/step" "hidden"
for args in "--bucket-mb 0" "--bucket-mb 25" "--bucket-mb 1" "--bucket-mb 0.05" "--zero 1 --bucket-mb 1"; do
    # shellcheck disable=SC2086
    $mpiexec -n 2 ./mpiflow-train --model lenet --dataset synthetic --steps "$steps" --no-eval --progress lines \
        --log-every 1000 --threads 1 $args --trace "$dir/t.json" >"$dir/out" 2>&1
    sps=$(sed -n 's/.*samples_per_sec=\([0-9]*\).*/\1/p' "$dir/out")
    comm=$(sed -n 's/.*gradient communication \([0-9.]*\) ms.*/\1/p' "$dir/out")
    hid=$(sed -n 's/.*, \([0-9]*%\) of it hidden.*/\1/p' "$dir/out")
    printf '%-28s %12s %12s %10s\n' "$args" "$sps" "${comm:--}" "${hid:--}"
done
rm -rf "$dir"
