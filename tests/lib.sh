# shellcheck shell=sh disable=SC2034
# tests/lib.sh - helpers for the shell tests (sourced).
# Environment from make check: MPIEXEC, top_srcdir, top_builddir.
set -u
: "${top_builddir:=.}"
: "${top_srcdir:=.}"
: "${MPIEXEC:=mpiexec}"
TRAIN="$top_builddir/mpiflow-train"
TMPDIR_TEST=$(mktemp -d "${TMPDIR:-/tmp}/mf_test.XXXXXX")
trap 'rm -rf "$TMPDIR_TEST"' EXIT

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

skip() {
    echo "SKIP: $*" >&2
    exit 77
}

# run_train NP ARGS...: mpiflow-train on NP ranks; output in $TMPDIR_TEST/out,
# exit status in $rc.
run_train() {
    np=$1
    shift
    "$MPIEXEC" -n "$np" "$TRAIN" --progress lines "$@" >"$TMPDIR_TEST/out" 2>&1
    rc=$?
    cat "$TMPDIR_TEST/out"
}

# final_field NAME: the value of NAME= on the 'final' line of the last run.
final_field() {
    grep '^final ' "$TMPDIR_TEST/out" | tr ' ' '\n' | sed -n "s/^$1=//p"
}

# at_least VALUE MIN: true if VALUE >= MIN (decimals).
at_least() {
    awk -v v="$1" -v m="$2" 'BEGIN { exit !(v != "" && v + 0 >= m + 0) }'
}

require_fashion_mnist() {
    [ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] ||
        fail "Fashion-MNIST is missing: run scripts/install-deps.sh (Debian package dataset-fashion-mnist)"
}
