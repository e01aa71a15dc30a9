#!/bin/sh
# Assembles a folder that runs mpiflow's GPU checks on a node that has
# only the NVIDIA driver and the CUDA toolkit (doc/cuda.md, "A GPU check
# in one command"):
#   scripts/gpu-bundle.sh DIR
# DIR gets (at most 64 MiB):
#   bundle.tar.gz  a --with-cuda build of mpiflow (the programs, test_cuda,
#                  bench_cuda, the test and bench scripts) and every
#                  run-time library they load, from glibc's loader to
#                  MPICH, parallel HDF5, OpenBLAS, hwloc, Check and zlib,
#                  as this Debian machine has them;
#   run.sh OUTDIR  unpacks it and runs bench/run_cuda.sh: test_cuda,
#                  tests/cuda_train.sh and bench_cuda, logs and figures
#                  into OUTDIR;
#   selftest.sh    the same programs on the CPU only (no GPU needed):
#                  every library resolves inside the bundle, a 2-rank
#                  training run with a checkpoint, mpiflow-ckpt verify,
#                  h5dump, a Check suite, and test_cuda skipping cleanly.
#                  `env -i DIR/selftest.sh` proves it needs nothing else.
# Programs run through the bundle's own loader (lib/ld-linux-x86-64.so.2
# --library-path ...), so the node's glibc and packages do not matter;
# the GPU libraries (driver, cuBLAS) come from the node: $CUDA_HOME/lib64
# (default /usr/local/cuda) and the system's library cache.
# Needs a configured toolchain as scripts/install-deps.sh leaves it, and
# the CUDA toolkit (CUDA_HOME, default /usr/local/cuda).
set -eu
[ $# -eq 1 ] && [ "$1" != "-h" ] && [ "$1" != "--help" ] || {
    sed -n '2,25s/^# \{0,1\}//p' "$0"
    [ $# -eq 1 ] && exit 0
    exit 2
}
out=$1
src=$(cd "$(dirname "$0")/.." && pwd)
cuda=${CUDA_HOME:-/usr/local/cuda}
[ -x "$cuda/bin/nvcc" ] || { echo "gpu-bundle.sh: no CUDA toolkit in $cuda (set CUDA_HOME)" >&2; exit 1; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/mf_bundle.XXXXXX")
trap 'rm -rf "$work"' EXIT
jobs=$(nproc 2>/dev/null || echo 2)

# 1. a clean copy of the sources (tracked and new files) and a --with-cuda build
echo "gpu-bundle.sh: building in $work"
mkdir "$work/src" "$work/build"
(cd "$src" && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$work/src" 2>/dev/null) ||
    (cd "$src" && git ls-files -z | xargs -0 cp --parents -t "$work/src")
(cd "$work/src" && autoreconf -fi >"$work/autoreconf.log" 2>&1) || { cat "$work/autoreconf.log"; exit 1; }
(cd "$work/build" && "$work/src/configure" --with-cuda="$cuda" >"$work/configure.log" 2>&1) ||
    { tail -20 "$work/configure.log"; exit 1; }
# (a make of its own: not the variables of a make that may be running this
# script), of the bundle's programs only
progs="mpiflow-train mpiflow-bench mpiflow-ckpt tests/test_cuda tests/test_autograd bench/bench_cuda"
# shellcheck disable=SC2086
(cd "$work/build" && unset MAKEFLAGS MFLAGS MAKELEVEL TESTS && make -j"$jobs" $progs >"$work/make.log" 2>&1) ||
    { tail -30 "$work/make.log"; exit 1; }

# 2. the tree: programs as ELF files in elf/, the scripts where run_cuda.sh expects them
b=$work/build
t=$work/bundle
mkdir -p "$t/elf" "$t/lib" "$t/bin" "$t/tree/tests" "$t/tree/bench"
for p in $progs; do
    f=$b/$p
    [ -f "$b/$(dirname "$p")/.libs/$(basename "$p")" ] && f=$b/$(dirname "$p")/.libs/$(basename "$p")
    cp "$f" "$t/elf/$(basename "$p")"
    strip --strip-unneeded "$t/elf/$(basename "$p")" 2>/dev/null || true
done
for p in mpiexec.hydra hydra_pmi_proxy h5dump; do
    cp "$(command -v $p)" "$t/elf/$p"
done
cp "$src/tests/lib.sh" "$src/tests/mpirun.sh" "$src/tests/cuda_train.sh" "$t/tree/tests/"
cp "$src/bench/run_cuda.sh" "$t/tree/bench/"

# 3. every library the ELF files need, resolved on this machine, and the loader
# (not the GPU's: the driver and cuBLAS are the node's own)
for f in "$t"/elf/*; do LD_LIBRARY_PATH="$b/.libs" ldd "$f"; done | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' |
    grep -v -e "^$cuda/" -e "^$(readlink -f "$cuda")/" -e '/libcuda\.so' | sort -u >"$work/needed"
while read -r lib; do
    cp -L "$lib" "$t/lib/$(basename "$lib")"
done <"$work/needed"
ucx=$(dirname "$(grep '/libucs\.so' "$work/needed" | head -1)")/ucx
[ -d "$ucx" ] && cp -rL "$ucx" "$t/lib/ucx"   # UCX's transports, opened at run time
[ -f "$t/lib/ld-linux-x86-64.so.2" ] || { echo "gpu-bundle.sh: no ld-linux-x86-64.so.2 among the libraries" >&2; exit 1; }

# 4. wrappers: each program through the bundle's loader; mpiexec finds its
# proxy beside the name it was started as
for p in "$t"/elf/*; do
    n=$(basename "$p")
    cat >"$t/bin/$n" <<EOF
#!/bin/sh
d=\$(dirname "\$(dirname "\$(readlink -f "\$0")")")
c=\${CUDA_HOME:-/usr/local/cuda}
exec "\$d/lib/ld-linux-x86-64.so.2" --argv0 "\$d/bin/$n" --library-path "\$d/lib:\$c/lib64:\$c/lib" "\$d/elf/$n" "\$@"
EOF
    chmod +x "$t/bin/$n"
done
ln -s mpiexec.hydra "$t/bin/mpiexec"
for p in mpiflow-train mpiflow-bench mpiflow-ckpt; do ln -s "../bin/$p" "$t/tree/$p"; done
for p in test_cuda test_autograd; do ln -s "../../bin/$p" "$t/tree/tests/$p"; done
ln -s ../../bin/bench_cuda "$t/tree/bench/bench_cuda"
v=$(git -C "$src" describe --always --dirty 2>/dev/null || echo unknown)
cv=$("$cuda/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')
echo "$v, built with CUDA $cv (the node needs a CUDA $(echo "$cv" | cut -d. -f1).x toolkit and a driver for it)" >"$t/VERSION"

# 5. packed, with the scripts that unpack and run it
rm -f "$out/bundle.tar.gz"
tar -C "$t" -cf - . | gzip -9 >"$out/bundle.tar.gz"   # gzip: every node can unpack it
cp "$src/scripts/gpu-bundle-run.sh" "$out/run.sh"
cp "$src/scripts/gpu-bundle-selftest.sh" "$out/selftest.sh"
chmod +x "$out/run.sh" "$out/selftest.sh"
size=$(du -sk "$out" | cut -f1)
echo "gpu-bundle.sh: $out holds $((size / 1024)) MiB ($(wc -l <"$work/needed") libraries, mpiflow $(cat "$t/VERSION"))"
[ "$size" -le 65536 ] || { echo "gpu-bundle.sh: over 64 MiB" >&2; exit 1; }
