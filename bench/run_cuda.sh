#!/bin/sh
# The GPU checks and figures of doc/performance.md in one run, for a
# machine with a GPU (sized to finish within 10 minutes on one H100 or
# H200; not yet timed on one):
#   bench/run_cuda.sh [OUTDIR]
# 1. tests/test_cuda: every kernel of the backend table on CUDA against
#    the CPU, forward and backward, f32, f64 and bf16 autocast;
# 2. tests/cuda_train.sh: mpiflow-train --device cuda against the CPU:
#    mlp and LeNet in every mode, the GPT on 1 rank, dp, tp + sp, ZeRO-3,
#    recompute and a pipeline, checkpoints from the GPU resumed on the
#    CPU, bf16;
# 3. bench/bench_cuda: GEMM TFLOP/s against bare cuBLAS, mlp/lenet
#    samples/s against the CPU, the GPU step-time breakdown.
# Every part runs even when an earlier one failed. Each part's output goes
# to OUTDIR (default .) as cuda_*.log, and cuda_summary.txt gets one
# table: each kernel and each training job, its result, its worst error
# and its time. Exit 0 when every part passed, 1 when one failed, 77
# when parts were skipped for want of a GPU. Run from the build directory.
set -u
out=${1:-.}
mkdir -p "$out" || exit 1
mpiexec=${MPIEXEC:-mpiexec}
export MPIEXEC="$mpiexec" top_srcdir=${top_srcdir:-.} top_builddir=${top_builddir:-.}
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | tee "$out/cuda_gpu.log"
else
    printf 'name\nno nvidia-smi on this machine\n' | tee "$out/cuda_gpu.log"
fi
date -u +"run at %Y-%m-%dT%H:%MZ" | tee -a "$out/cuda_gpu.log"
failed="" skipped=""
part() {   # part NAME LOG COMMAND...: runs it, its exit status in $rc
    name=$1 log=$2
    shift 2
    t0=$(date +%s)
    "$@" >"$log" 2>&1
    rc=$?
    echo "run_cuda: $name: exit $rc after $(($(date +%s) - t0)) s"
    case $rc in
    0) ;;
    77) skipped="$skipped $name" ;;
    *) failed="$failed $name" ;;
    esac
}
part test_cuda "$out/cuda_parity.log" "$mpiexec" -n 1 tests/test_cuda
part cuda_train "$out/cuda_train.log" sh tests/cuda_train.sh
part bench_cuda "$out/cuda_bench.log" bench/bench_cuda --repeat 5

# the summary: the parity lines of test_cuda, the job lines of cuda_train.sh,
# and any failure either printed
{
    echo "mpiflow GPU check, $(sed -n 's/^run at //p' "$out/cuda_gpu.log"): $(sed -n 2p "$out/cuda_gpu.log")"
    printf '%-32s %-6s %-34s %s\n' "kernel or job" result "worst error" time
    # without a GPU the kernels' cases ran on the CPU (f32 against f64):
    # listed as "cpu", not "ok"
    res=ok
    grep -q '^SKIP: ' "$out/cuda_parity.log" && res=cpu
    sed -n "s/^parity kernel \([a-z0-9_]*\) *\([0-9]*\) cases.*worst \([0-9.]*\) of the tolerance *\([0-9.]*\) s *ok\$/kernel \1|$res|\3 of the tolerance (\2 cases)|\4 s/p" \
        "$out/cuda_parity.log" | awk -F'|' '{ printf "%-32s %-6s %-34s %s\n", $1, $2, $3, $4 }'
    grep -E '^[^ ]*test_cuda\.c:[0-9]+:[EF]:' "$out/cuda_parity.log" | sed 's/^/FAIL /'
    grep -q '^SKIP: ' "$out/cuda_parity.log" && sed -n 's/^SKIP: /test_cuda SKIPPED: /p' "$out/cuda_parity.log"
    sed -n 's/^job \([^ ]*\) *\([a-zA-Z]*\) *\([0-9]*\) losses *worst relative difference \([^ ]*\) *(tolerance \([^)]*\)) *\([0-9.]*\) s$/job \1|\2|\4 relative (tolerance \5)|\6 s/p' \
        "$out/cuda_train.log" | awk -F'|' '{ printf "%-32s %-6s %-34s %s\n", $1, $2, $3, $4 }'
    grep -E '^(FAIL|SKIP|ERROR)' "$out/cuda_train.log"
    grep -i 'TFLOP/s\|samples/s' "$out/cuda_bench.log" | head -20
    echo "parts skipped (no GPU):${skipped:- none}"
    echo "parts failed:${failed:- none}"
} >"$out/cuda_summary.txt"
cat "$out/cuda_summary.txt"
[ -z "$failed" ] || exit 1
[ -z "$skipped" ] || exit 77
