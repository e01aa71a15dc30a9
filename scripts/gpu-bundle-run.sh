#!/bin/sh
# run.sh OUTDIR: mpiflow's GPU checks from this bundle (made by
# scripts/gpu-bundle.sh): unpacks it into a temporary folder and runs
# bench/run_cuda.sh there: tests/test_cuda (every CUDA kernel against the
# CPU), tests/cuda_train.sh (mpiflow-train --device cuda in every mode)
# and bench/bench_cuda (GEMM, training throughput). Logs and figures go to
# OUTDIR as cuda_*.log; exit 0 when every part passed.
# Needs only the NVIDIA driver, the CUDA toolkit (CUDA_HOME, default
# /usr/local/cuda), /bin/sh, tar and gzip.
set -u
[ $# -eq 1 ] || { sed -n '2,9s/^# \{0,1\}//p' "$0"; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$1" || exit 1
out=$(cd "$1" && pwd)
x=$(mktemp -d "${TMPDIR:-/tmp}/mpiflow-bundle.XXXXXX") || exit 1
trap 'rm -rf "$x"' EXIT
gzip -dc "$here/bundle.tar.gz" | tar -C "$x" -xf - || { echo "run.sh: cannot unpack $here/bundle.tar.gz"; exit 1; }
export PATH="$x/bin:${PATH:-/usr/bin:/bin}" MPIEXEC="$x/bin/mpiexec" top_srcdir=. top_builddir=.
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
echo "mpiflow $(cat "$x/VERSION") from $here" | tee "$out/cuda_bundle.log"
cd "$x/tree" && sh bench/run_cuda.sh "$out"
rc=$?
echo "run.sh: exit $rc" | tee -a "$out/cuda_bundle.log"
exit $rc
