#!/bin/sh
# Every kernel of the backend table has a GPU parity case: the names of
# the K(name, ...) entries of MFI_KERNELS in backends/backend.h, read from
# the source text, against the list tests/test_cuda checks (its --list,
# generated from the same macro). Then the comparison is shown to fail:
# a list with one kernel removed must be reported, naming it.
[ -r "${top_srcdir:-.}/tests/lib.sh" ] || { echo "ERROR: no tests/lib.sh: run by make check, or set top_srcdir" >&2; exit 99; }
. "${top_srcdir:-.}/tests/lib.sh"
T=$TMPDIR_TEST
# the names, in order, from "#define MFI_KERNELS(K)" to the macro's last line
sed -n '/^#define MFI_KERNELS(K)/,/^[^\\]*$/p' "$top_srcdir/backends/backend.h" |
    grep -o 'K([a-z0-9_]*,' | sed 's/^K(//; s/,$//' >"$T/table"
n=$(wc -l <"$T/table")
[ "$n" -ge 30 ] || harness_error "read only $n kernels from backends/backend.h"
"$top_builddir/tests/test_cuda" --list >"$T/checked" || fail "tests/test_cuda --list: exit $?"

# missing TABLE CHECKED: the table's kernels that CHECKED lacks
missing() { sort "$2" | comm -23 "$(sort "$1" >"$T/t.sorted" && echo "$T/t.sorted")" -; }
m=$(missing "$T/table" "$T/checked")
[ -z "$m" ] || fail "kernels of MFI_KERNELS without a parity case in tests/test_cuda: $m"
[ "$(grep -c . "$T/checked")" -eq "$n" ] || fail "tests/test_cuda checks $(grep -c . "$T/checked") kernels, the table has $n"
echo "ok: all $n kernels of MFI_KERNELS have a parity case in tests/test_cuda"

grep -v '^attention_bwd$' "$T/checked" >"$T/short"
[ "$(missing "$T/table" "$T/short")" = attention_bwd ] || fail "the check did not notice attention_bwd missing"
echo "ok: a list without attention_bwd is reported"
