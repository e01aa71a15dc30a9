#!/bin/sh
# selftest.sh: this bundle (made by scripts/gpu-bundle.sh) on the CPU
# alone, to prove it carries everything it needs: run it as
#   env -i ./selftest.sh
# Checks that every program's libraries resolve inside the bundle, trains
# mlp on 2 ranks with a checkpoint, verifies it with mpiflow-ckpt and
# reads it with h5dump, runs a Check suite, and that test_cuda and
# --device cuda answer cleanly without a GPU (or pass with one).
set -u
here=$(cd "$(dirname "$0")" && pwd)
x=$(mktemp -d "${TMPDIR:-/tmp}/mpiflow-bundle.XXXXXX") || exit 1
trap 'rm -rf "$x"' EXIT
fail() {
    echo "selftest: FAIL: $*"
    exit 1
}
gzip -dc "$here/bundle.tar.gz" | tar -C "$x" -xf - || fail "cannot unpack $here/bundle.tar.gz"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 CK_FORK=no
cd "$x/tree" || exit 1
for f in "$x"/elf/*; do
    "$x/lib/ld-linux-x86-64.so.2" --list --library-path "$x/lib" "$f" >"$x/libs" 2>&1 || fail "$(basename "$f"): $(cat "$x/libs")"
    # the GPU's libraries (cuBLAS, the CUDA runtime) are the node's own
    gpu=$(awk '$2 == "=>" && $1 ~ /^lib(cublas|cublasLt|cudart)\.so/ { print $1 }' "$x/libs" | tr '\n' ' ')
    outside=$(awk '$2 == "=>" && $1 !~ /^lib(cublas|cublasLt|cudart)\.so/ { print $3 }' "$x/libs" | grep -v "^$x/lib/")
    [ -z "$outside" ] || fail "$(basename "$f") loads libraries outside the bundle: $outside"
    [ -z "$gpu" ] || echo "ok: $(basename "$f") takes $gpu from the node's CUDA toolkit"
done
echo "ok: every other library of $(ls "$x/elf" | wc -l) programs resolves inside the bundle"
mpiexec=$x/bin/mpiexec
"$mpiexec" -n 2 ./mpiflow-train --model mlp --dataset synthetic --synthetic-size 640,64 --batch-size 32 --steps 20 \
    --threads 1 --progress lines --log-every 10 --checkpoint "$x/run.h5" >"$x/out" 2>&1 || { cat "$x/out"; fail "2-rank training"; }
grep -q "^final test_accuracy=" "$x/out" || { cat "$x/out"; fail "no final line"; }
echo "ok: $(grep '^final' "$x/out")"
./mpiflow-ckpt verify "$x/run.h5" >"$x/out" 2>&1 || { cat "$x/out"; fail "mpiflow-ckpt verify"; }
"$x/bin/h5dump" -H "$x/run.h5" >"$x/out" 2>&1 || { cat "$x/out"; fail "h5dump"; }
grep -q "hidden.weight" "$x/out" || fail "h5dump shows no hidden.weight"
echo "ok: the checkpoint verifies and h5dump reads it"
"$mpiexec" -n 1 tests/test_autograd >"$x/out" 2>&1 || { tail -5 "$x/out"; fail "test_autograd"; }
echo "ok: $(grep '^100%' "$x/out" || tail -1 "$x/out")"
"$mpiexec" -n 1 tests/test_cuda >"$x/out" 2>&1
rc=$?
[ "$rc" -eq 0 ] || [ "$rc" -eq 77 ] || { tail -5 "$x/out"; fail "test_cuda: exit $rc"; }
echo "ok: test_cuda exit $rc ($([ "$rc" -eq 77 ] && echo 'skipped: no GPU' || echo passed))"
./mpiflow-train --model mlp --dataset synthetic --synthetic-size 64,8 --steps 1 --no-eval --device cuda >"$x/out" 2>&1
rc=$?
if [ "$rc" -ne 0 ]; then
    [ "$rc" -eq 2 ] && grep -q "CUDA is unavailable" "$x/out" || { cat "$x/out"; fail "--device cuda: exit $rc"; }
    echo "ok: --device cuda without a GPU: $(grep -o 'CUDA is unavailable.*' "$x/out" | head -1)"
else
    echo "ok: --device cuda trained a step"
fi
echo "selftest: passed (mpiflow $(cat "$x/VERSION"))"
