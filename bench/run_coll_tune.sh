#!/bin/sh
# Collective selection that follows measurement (doc/performance.md,
# doc/collectives.md):
#   bench/run_coll_tune.sh [TUNING_FILE [ROUNDS [again]]]
# For 2 ranks, 4 ranks, and 4 ranks as 2 emulated nodes
# (MF_RANKS_PER_NODE=2): `mpiflow-bench tune --verify` measures every
# algorithm, writes its rules into TUNING_FILE (default: a temporary
# file), loads them, and prints in the same run the allreduce,
# reduce_scatter and allgather tables from 64 KiB to 64 MiB, each with
# what 'auto' ran, auto's own time over the best algorithm's, and the
# time of the algorithm it ran over the best's (pick/best). With
# "again", the tables are measured once more in new processes that read
# the file through MF_COLL_TUNING, as a later training job would. The
# last lines are the worst of each over all tables.
# Run from the build directory, with nothing else using the CPUs.
set -eu
mpiexec=${MPIEXEC:-mpiexec}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
dir=$(mktemp -d /tmp/mf_bench_tune.XXXXXX)
trap 'rm -rf "$dir"' EXIT
file=${1:-$dir/tuning.txt}
rounds=${2:-3}   # for the tuning and for each table
again=${3:-}
rm -f "$file"
worst() {
    awk '$1 ~ /^[0-9]+$/ { a = $(NF - 3); p = $(NF - 2); if (a > wa) wa = a; if (p > wp) { wp = p; at = $1 } }
         END { printf "worst auto/best: %.2f; worst pick/best: %.2f (at %d bytes)\n", wa, wp, at }' "$1"
}
for cfg in "2" "4" "4 2"; do
    set -- $cfg
    np=$1
    env=""
    [ $# -gt 1 ] && env="-genv MF_RANKS_PER_NODE $2"
    # shellcheck disable=SC2086
    $mpiexec -n "$np" $env ./mpiflow-bench tune --out "$file" --verify --min-kb 32 --max-mb 64 --rounds "$rounds" \
        >"$dir/tune.log"
    sed -n '/^wrote /,$p' "$dir/tune.log" | tail -n +2 | tee -a "$dir/tables"
    echo
done
echo "tuning file:"
cat "$file"
echo
echo "tuned and measured in the same run: $(worst "$dir/tables")"
[ "$again" = again ] || exit 0
echo
for cfg in "2" "4" "4 2"; do
    set -- $cfg
    np=$1
    env=""
    [ $# -gt 1 ] && env="-genv MF_RANKS_PER_NODE $2"
    for op in allreduce reduce_scatter allgather; do
        # shellcheck disable=SC2086
        $mpiexec -n "$np" $env -genv MF_COLL_TUNING "$file" ./mpiflow-bench "$op" --min-kb 64 --max-mb 64 --rounds "$rounds" |
            tee -a "$dir/again"
        echo
    done
done
echo "tables in new processes, auto from the file: $(worst "$dir/again")"
