#!/bin/sh
# scripts/gpu-bundle.sh assembles a folder of at most 64 MiB (a CUDA
# build of mpiflow and every library it loads) whose CPU self-test passes
# under `env -i`, with nothing from this machine but the kernel and
# coreutils. SKIP without the CUDA toolkit (the bundle is a CUDA build).
[ -r "${top_srcdir:-.}/tests/lib.sh" ] || { echo "ERROR: no tests/lib.sh: run by make check, or set top_srcdir" >&2; exit 99; }
. "${top_srcdir:-.}/tests/lib.sh"
cuda=${CUDA_HOME:-/usr/local/cuda}
[ -x "$cuda/bin/nvcc" ] || skip "no CUDA toolkit in $cuda (set CUDA_HOME)"
command -v git >/dev/null && git -C "$top_srcdir" rev-parse >/dev/null 2>&1 || skip "the sources are not a git checkout"
b=$TMPDIR_TEST/bundle
"$top_srcdir/scripts/gpu-bundle.sh" "$b" >"$TMPDIR_TEST/log" 2>&1 || { tail -30 "$TMPDIR_TEST/log"; fail "gpu-bundle.sh: exit $?"; }
grep "holds" "$TMPDIR_TEST/log" || fail "gpu-bundle.sh did not print the bundle's size"
size=$(du -sk "$b" | cut -f1)
[ "$size" -le 65536 ] || fail "the bundle is $size KiB, over 64 MiB"
for f in bundle.tar.gz run.sh selftest.sh; do [ -f "$b/$f" ] || fail "the bundle lacks $f"; done
env -i "$b/selftest.sh" >"$TMPDIR_TEST/self" 2>&1
rc=$?
cat "$TMPDIR_TEST/self"
[ "$rc" -eq 0 ] || fail "selftest.sh under env -i: exit $rc"
grep -q "^selftest: passed" "$TMPDIR_TEST/self" || fail "selftest.sh did not say it passed"
# run.sh without a GPU: it says so and fails, it does not pass by accident
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi >/dev/null 2>&1; then
    env -i "$b/run.sh" "$TMPDIR_TEST/out" >"$TMPDIR_TEST/run" 2>&1 && { cat "$TMPDIR_TEST/run"; fail "run.sh passed without a GPU"; }
    [ -f "$TMPDIR_TEST/out/cuda_parity.log" ] || { cat "$TMPDIR_TEST/run"; fail "run.sh wrote no cuda_parity.log"; }
    echo "ok: run.sh without a GPU: $(tail -1 "$TMPDIR_TEST/run")"
fi
echo "gpu_bundle: a $((size / 1024)) MiB bundle that runs under env -i"
