#!/bin/sh
# The dependency rules of STYLE.md, checked on the #include lines:
# apps -> lib -> {backends, collectives}; backends never include mpi.h;
# only collectives/ includes hwloc.h; only backends/cpu includes cblas.h;
# only backends/cuda includes CUDA headers, and kernels live in .cu files;
# only lib/io includes hdf5.h;
# no exit/abort/assert in library code.
. "$top_srcdir/tests/lib.sh"
cd "$top_srcdir" || fail "no source dir"
bad=0
check() {   # check "pattern" "allowed-prefix-regex" "rule"
    hits=$(grep -rlE "$1" lib backends collectives apps include 2>/dev/null | grep -vE "$2" || true)
    if [ -n "$hits" ]; then
        echo "violation ($3): $hits" >&2
        bad=1
    fi
}
check '#include <mpi\.h>' '^collectives/' "only collectives/ talks to MPI"
check '#include <hwloc\.h>' '^collectives/' "only collectives/ includes hwloc.h"
check '#include <cblas\.h>' '^backends/cpu/' "only backends/cpu includes cblas.h"
check '#include <(cuda|cublas|cudnn)[a-z_]*\.h>' '^backends/cuda/' "only backends/cuda includes CUDA headers"
check '#include <hdf5\.h>' '^lib/io/' "only lib/io includes hdf5.h"
check '#include "(lib|collectives)/' '^(lib|collectives|backends)/' "apps and headers use the public API only"
check '#include "backends/' '^backends/' "lib reaches backends through the table"
# kernels and launches live in .cu files only (nvcc builds them; lib/rng.h's
# functions are marked for the GPU too, through MFI_HD)
hits=$(grep -rlE '__global__|<<<' lib backends collectives apps include --include='*.c' --include='*.h' 2>/dev/null || true)
[ -z "$hits" ] || { echo "violation (CUDA code outside .cu files): $hits" >&2; bad=1; }
# (one exception: the MF_TIMEOUT watchdog ends a hung job, which the user asked for)
hits=$(grep -rnE '\b(abort|exit|_exit|assert|MPI_Abort)[[:space:]]*\(' lib backends collectives | grep -v '^\s*//' |
    grep -v '^collectives/watchdog\.c:[0-9]*: *MPI_Abort(MPI_COMM_WORLD, 3); */\* MF_TIMEOUT asked for it \*/$' || true)
[ -z "$hits" ] || { echo "exit/abort in library code: $hits" >&2; bad=1; }
[ "$bad" -eq 0 ] || fail "layering rules broken"
echo "layering rules hold"
