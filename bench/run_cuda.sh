#!/bin/sh
# The GPU checks and figures of doc/performance.md, as one run for a
# machine with a GPU (a session's device time is short: this is the
# whole script):
#   bench/run_cuda.sh [OUTDIR]
# 1. tests/test_cuda: every kernel of the backend table on CUDA against
#    the CPU, forward and backward, and bf16 autocast on the tensor cores;
# 2. tests/cuda_train.sh: mpiflow-train --device cuda in every mode
#    against the CPU, checkpoints from the GPU resumed on the CPU, bf16;
# 3. bench/bench_cuda: GEMM TFLOP/s against bare cuBLAS, mlp/lenet
#    samples/s against the CPU, the GPU step-time breakdown.
# Each part's output goes to OUTDIR (default .) as cuda_*.log, and the
# script stops at the first failure. Run from the build directory.
set -u
out=${1:-.}
mpiexec=${MPIEXEC:-mpiexec}
export MPIEXEC="$mpiexec" top_srcdir=${top_srcdir:-.} top_builddir=${top_builddir:-.}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | tee "$out/cuda_gpu.log"
date -u +"run at %Y-%m-%dT%H:%MZ" | tee -a "$out/cuda_gpu.log"
"$mpiexec" -n 1 tests/test_cuda >"$out/cuda_parity.log" 2>&1
rc=$?
tail -5 "$out/cuda_parity.log"
[ "$rc" -eq 0 ] || { echo "run_cuda: test_cuda exit $rc"; exit 1; }
sh tests/cuda_train.sh >"$out/cuda_train.log" 2>&1
rc=$?
tail -3 "$out/cuda_train.log"
[ "$rc" -eq 0 ] || { echo "run_cuda: cuda_train.sh exit $rc"; exit 1; }
bench/bench_cuda --repeat 5 2>&1 | tee "$out/cuda_bench.log"
