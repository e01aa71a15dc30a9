#!/bin/sh
# Collective selection that follows measurement (doc/performance.md,
# doc/collectives.md):
#   bench/run_coll_tune.sh [TUNING_FILE [ROUNDS]]
# For 2 ranks, 4 ranks, and 4 ranks as 2 emulated nodes
# (MF_RANKS_PER_NODE=2): `mpiflow-bench tune` measures every algorithm
# and writes its rules into TUNING_FILE (default: a temporary file); then
# `mpiflow-bench allreduce|reduce_scatter|allgather --rounds ROUNDS` with
# MF_COLL_TUNING=TUNING_FILE prints each table, 64 KiB - 64 MiB, with what
# 'auto' ran, auto's own time over the best algorithm's, and the time of
# the algorithm it ran over the best's (pick/best). The last lines are the
# worst of each over all tables.
# Run from the build directory, with nothing else using the CPUs.
set -eu
mpiexec=${MPIEXEC:-mpiexec}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
dir=$(mktemp -d /tmp/mf_bench_tune.XXXXXX)
trap 'rm -rf "$dir"' EXIT
file=${1:-$dir/tuning.txt}
rounds=${2:-3}   # for the tuning and for each table
rm -f "$file"
for cfg in "2" "4" "4 2"; do
    set -- $cfg
    np=$1
    env=""
    [ $# -gt 1 ] && env="-genv MF_RANKS_PER_NODE $2"
    # shellcheck disable=SC2086
    $mpiexec -n "$np" $env ./mpiflow-bench tune --out "$file" --min-kb 32 --max-mb 64 --rounds "$rounds" >"$dir/tune.log"
done
echo "tuning file:"
cat "$file"
echo
for cfg in "2" "4" "4 2"; do
    set -- $cfg
    np=$1
    env=""
    [ $# -gt 1 ] && env="-genv MF_RANKS_PER_NODE $2"
    for op in allreduce reduce_scatter allgather; do
        # shellcheck disable=SC2086
        $mpiexec -n "$np" $env -genv MF_COLL_TUNING "$file" ./mpiflow-bench "$op" --min-kb 64 --max-mb 64 --rounds "$rounds" |
            tee -a "$dir/tables"
        echo
    done
done
awk '$1 ~ /^[0-9]+$/ { a = $(NF - 3); p = $(NF - 2); if (a > wa) wa = a; if (p > wp) { wp = p; at = $1 } }
     END { printf "worst auto/best: %.2f; worst pick/best: %.2f (at %d bytes)\n", wa, wp, at }' "$dir/tables"
