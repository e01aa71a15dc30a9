#!/bin/sh
# The layering of doc/design.md section 1, checked on what the compiler
# really read: the table there says, per folder, which project folders
# and which groups of system headers its files may include; every
# translation unit of the build is checked against it from the
# dependency files the compiler wrote (.deps/*.Plo, *.Po), so an include
# that arrives through another header counts too. CUDA sources, which
# nvcc builds without dependency files, are checked from `nvcc -M`.
# Then the check is shown to fail: a scratch copy of a collectives/ file
# that includes a lib/ header, and one of a backend that includes mpi.h
# through a header of its own, must each be reported.
# Last, two rules that are not about includes: no exit/abort/assert in
# library code, and no CUDA code outside .cu files.
[ -r "${top_srcdir:-.}/tests/lib.sh" ] || { echo "ERROR: no tests/lib.sh: run by make check, or set top_srcdir" >&2; exit 99; }
. "${top_srcdir:-.}/tests/lib.sh"
src=$(cd "$top_srcdir" && pwd)
build=$(cd "$top_builddir" && pwd)
T=$TMPDIR_TEST

# ---- the table, as doc/design.md shows it
sed -n '/<!-- layering table: begin -->/,/<!-- layering table: end -->/p' "$src/doc/design.md" |
    grep -vE '^(<!--|```|folder )' | grep -v '^[[:space:]]*$' >"$T/table"
[ "$(wc -l <"$T/table")" -ge 8 ] || fail "doc/design.md has no layering table between its markers"

# ---- the checker: reads "UNIT DEP DEP ..." lines (paths as the
# compiler printed them) and prints one line per forbidden include
cat >"$T/check.awk" <<'EOF'
# the folder of a project path: the longest folder of the table that
# is a prefix of it ("" if none)
function folder_of(p,    best, f) {
    best = ""
    for (f in allow)
        if ((p == f || index(p, f "/") == 1) && length(f) > length(best)) best = f
    return best
}
# the group of a system header
function group_of(p) {
    if (p ~ /\/(mpich|openmpi)\// || p ~ /\/mpio?\.h$/) return "mpi"
    if (p ~ /\/hdf5/ || p ~ /\/H5[A-Za-z]*\.h$/) return "hdf5"
    if (p ~ /\/hwloc/) return "hwloc"
    if (p ~ /openblas|\/cblas|\/blis\/|lapack/) return "blas"
    if (p ~ /\/dnnl[^\/]*\.h(pp)?$/) return "onednn"
    if (p ~ /\/Random123\//) return "random123"
    if (p ~ /\/omp(-tools)?\.h$/) return "openmp"
    if (p ~ /\/z(lib|conf)\.h$/) return "zlib"
    if (p ~ /\/check(_stdint)?\.h$/) return "check"
    if (p ~ /\/nccl[^\/]*\.h$/) return "nccl"
    if (p ~ /cuda|\/cublas|\/cudnn|\/crt\/|\/nv\/|\/thrust\/|\/cub\//) return "cuda"
    return "libc"
}
# a path relative to the source tree, or "" for a system header
function project(p) {
    sub(/^\.\//, "", p)
    if (index(p, SRC "/") == 1) p = substr(p, length(SRC) + 2)
    else if (index(p, BUILD "/") == 1) p = substr(p, length(BUILD) + 2)
    else if (p ~ /^\//) return ""
    while (sub(/^\.\.\/[^\/]*\//, "", p)) {}   # out-of-tree: ../src/lib/x.h
    if (p == "config.h") return "config.h"
    return p
}
function allowed(list, what,    n, a, i) {
    n = split(list, a, " ")
    for (i = 1; i <= n; i++) if (a[i] == "*" || a[i] == what) return 1
    return 0
}
FILENAME == TABLE {
    allow[$1] = $2 == "-" ? "" : $2
    gsub(/,/, " ", allow[$1])
    sys[$1] = $3
    gsub(/,/, " ", sys[$1])
    next
}
{
    unit = project($1)
    uf = folder_of(unit)
    if (uf == "") { printf "%s: its folder is not in the table\n", unit; next }
    for (i = 2; i <= NF; i++) {
        d = project($i)
        if (d == "") {
            g = group_of($i)
            if (!allowed(sys[uf], g)) printf "%s: %s headers (%s) are not for %s/\n", unit, g, $i, uf
            continue
        }
        if (d == "config.h") { df = "config" } else { df = folder_of(d) }
        if (df == uf || df == "") continue
        if (!allowed(allow[uf], df)) printf "%s: includes %s, but %s/ may not include %s/\n", unit, d, uf, df
    }
}
EOF

# "UNIT DEP ..." from one dependency file: the first rule's
# prerequisites, the first of which is the source
deps_line() {
    awk '{ more = sub(/\\$/, ""); line = line " " $0; if (!more) exit } END { print line }' "$1" |
        sed 's/^[^:]*:[[:space:]]*//'
}
check_units() {   # check_units FILE_OF_UNIT_LINES
    awk -v SRC="$src" -v BUILD="$build" -v TABLE="$T/table" -f "$T/check.awk" "$T/table" "$1"
}

# ---- every C translation unit of this build
: >"$T/units"
dummy=0
for f in $(find "$build" -path "$build/.git" -prune -o \( -name '*.Plo' -o -name '*.Po' \) -print | sort); do
    line=$(deps_line "$f")
    case $line in
    "" | "#"*) dummy=$((dummy + 1)); continue ;;   # "# dummy": not compiled (yet)
    esac
    unit=${line%% *}
    [ -f "$unit" ] || [ -f "$src/$unit" ] || [ -f "$build/$unit" ] || continue   # a source that moved since
    echo "$line" >>"$T/units"
done
n=$(wc -l <"$T/units")
[ "$n" -ge 40 ] || skip "only $n dependency files with content ($dummy dummies): configure without --disable-dependency-tracking, then make"

# ---- the CUDA sources, from nvcc -M, when this build has them
cu=0
nvcc=$(sed -n 's/^NVCC = //p' "$build/Makefile")
if grep -q '^#define MF_HAVE_CUDA 1' "$build/config.h" 2>/dev/null && [ -x "${nvcc%% *}" ]; then
    cudaflags=$(sed -n 's/^CUDA_CPPFLAGS = //p' "$build/Makefile")
    for f in "$src"/backends/cuda/*.cu; do
        # shellcheck disable=SC2086
        "$nvcc" -M -std=c++17 -I"$src/include" -I"$src" -I"$build" $cudaflags "$f" -o "$T/cu.d" 2>"$T/cu.err" ||
            { cat "$T/cu.err"; fail "nvcc -M $f failed"; }
        line=$(deps_line "$T/cu.d")
        echo "$f ${line#* }" >>"$T/units"
        cu=$((cu + 1))
    done
fi
check_units "$T/units" >"$T/violations"
if [ -s "$T/violations" ]; then
    cat "$T/violations" >&2
    fail "$(wc -l <"$T/violations") include(s) break the layering table of doc/design.md"
fi
echo "ok: $n C units and $cu CUDA units follow the layering table"

# ---- the check fails on a forbidden include (scratch copies)
cc=$(sed -n 's/^CC = //p' "$build/Makefile")
depend() {   # depend NAME FILE CFLAGS...: the compiler's dependency line for FILE
    name=$1 file=$2
    shift 2
    # shellcheck disable=SC2086
    $cc -MM -MT "$file" "$@" "$file" -o "$T/$name.d" 2>"$T/$name.err" || { cat "$T/$name.err"; fail "$cc -MM $file failed"; }
    deps_line "$T/$name.d" >"$T/$name.units"
}
mkdir -p "$T/tree/collectives" "$T/tree/backends/cpu"
for d in base lib include; do ln -s "$src/$d" "$T/tree/$d"; done
ln -s "$src/backends/backend.h" "$T/tree/backends/backend.h"
ln -s "$src/backends/plan.h" "$T/tree/backends/plan.h"
for h in "$src"/collectives/*.h; do ln -s "$h" "$T/tree/collectives/"; done
for h in "$src"/backends/cpu/*.h; do ln -s "$h" "$T/tree/backends/cpu/"; done
cp "$build/config.h" "$T/tree/config.h"
# 1. a collective that includes the core's internal header
{ echo '#include "lib/internal.h"'; cat "$src/collectives/deterministic.c"; } >"$T/tree/collectives/deterministic.c"
(cd "$T/tree" && depend bad1 collectives/deterministic.c -Iinclude -I. -D_GNU_SOURCE) || exit 1
# 2. a CPU kernel whose own header now includes mpi.h: transitive
sed 's|#include "base/error.h"|#include "base/error.h"\n#include <mpi.h>|' "$src/backends/cpu/cpu_kernels.h" >"$T/tree/backends/cpu/cpu_kernels.h.new"
rm -f "$T/tree/backends/cpu/cpu_kernels.h"
mv "$T/tree/backends/cpu/cpu_kernels.h.new" "$T/tree/backends/cpu/cpu_kernels.h"
cp "$src/backends/cpu/cpu_optim.c" "$T/tree/backends/cpu/cpu_optim.c"
(cd "$T/tree" && depend bad2 backends/cpu/cpu_optim.c -Iinclude -I. -D_GNU_SOURCE) || exit 1
src_real=$src
src="$T/tree"
check_units "$T/bad1.units" >"$T/bad1.out"
check_units "$T/bad2.units" >"$T/bad2.out"
src=$src_real
grep -q 'collectives/deterministic.c: includes lib/internal.h, but collectives/ may not include lib/' "$T/bad1.out" ||
    { cat "$T/bad1.units" "$T/bad1.out"; fail "the check missed collectives/ including lib/internal.h"; }
grep -q 'backends/cpu/cpu_optim.c: mpi headers (.*mpi.h) are not for backends/cpu/' "$T/bad2.out" ||
    { cat "$T/bad2.units" "$T/bad2.out"; fail "the check missed mpi.h reaching backends/cpu through a header"; }
echo "ok: a scratch collectives/ file including lib/internal.h is reported: $(head -1 "$T/bad1.out")"
echo "ok: a scratch CPU kernel reaching mpi.h through its header is reported: $(grep -m1 mpi "$T/bad2.out")"

# ---- exit/abort/assert in library code (comments and strings aside);
# one exception: the MF_TIMEOUT watchdog ends a hung job, as the user asked
cd "$src" || fail "no source dir"
hits=$(grep -rnE '\b(abort|exit|_exit|assert|MPI_Abort)[[:space:]]*\(' base lib backends collectives |
    grep -vE '^[^:]+:[0-9]+:[[:space:]]*(/?\*|//)' |
    grep -v '^collectives/watchdog\.c:[0-9]*: *MPI_Abort(MPI_COMM_WORLD, 3); */\* MF_TIMEOUT asked for it \*/$' || true)
[ -z "$hits" ] || fail "exit/abort in library code: $hits"
# kernels and launches live in .cu files only (nvcc builds them; base/philox.h's
# functions are marked for the GPU too, through MFI_HD)
hits=$(grep -rlE '__global__|<<<' base lib backends collectives apps include --include='*.c' --include='*.h' 2>/dev/null || true)
[ -z "$hits" ] || fail "CUDA code outside .cu files: $hits"
echo "layering rules hold"
