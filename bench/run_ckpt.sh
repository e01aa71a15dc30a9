#!/bin/sh
# Checkpoint bandwidth on 1, 2 and 4 ranks (bench/bench_ckpt.c), the
# tables recorded in doc/performance.md:
#   bench/run_ckpt.sh [MB] [REPS] [DIR]
# MB defaults to 1024 (a 1 GiB model), REPS to 5, DIR to a fresh
# directory under /tmp (the same disk for the checkpoint and write()).
# Then the Fletcher32 layout at a quarter of the size (it is slow), and
# with BENCH_CKPT_COLD=1 also cold reads (the page cache dropped; root).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
mb=${1:-1024}
reps=${2:-5}
dir=${3:-$(mktemp -d /tmp/mf_bench_ckpt.XXXXXX)}
export OPENBLAS_NUM_THREADS=1
for np in 1 2 4; do
    ${MPIEXEC:-mpiexec} -n "$np" "$here/bench_ckpt" --mb "$mb" --reps "$reps" --dir "$dir" --layouts S,B
    echo
done
for np in 1 2 4; do
    ${MPIEXEC:-mpiexec} -n "$np" "$here/bench_ckpt" --mb $((mb / 4)) --reps 3 --dir "$dir" --layouts S,F | tail -2
done
if [ "${BENCH_CKPT_COLD:-0}" = 1 ]; then
    echo
    for np in 1 2 4; do
        ${MPIEXEC:-mpiexec} -n "$np" "$here/bench_ckpt" --mb "$mb" --reps 3 --dir "$dir" --layouts S --cold
    done
fi
[ -n "${3:-}" ] || rm -rf "$dir"
