#!/bin/sh
# make install into a staging directory installs the library (shared and
# static), the headers, mpiflow.pc and the apps; an outside program
# builds against them with pkg-config and runs under mpiexec.
[ -r "${top_srcdir:-.}/tests/lib.sh" ] || { echo "ERROR: no tests/lib.sh: run by make check, or set top_srcdir" >&2; exit 99; }
. "${top_srcdir:-.}/tests/lib.sh"
dest="$TMPDIR_TEST/stage"
${MAKE:-make} -C "$top_builddir" install DESTDIR="$dest" >"$TMPDIR_TEST/install.log" 2>&1 ||
    { tail -20 "$TMPDIR_TEST/install.log"; fail "make install failed"; }
prefix=$(sed -n 's/^prefix=//p' "$top_builddir/mpiflow.pc")
root="$dest$prefix"
libdir=$(PKG_CONFIG_PATH="$root/lib/pkgconfig" pkg-config --define-variable=prefix="$root" --variable=libdir mpiflow)
for f in "$root/include/mpiflow.h" "$root/include/mpiflow/tensor.h" "$root/include/mpiflow/models.h" \
         "$root/include/mpiflow/global.h" "$root/include/mpiflow/pipeline.h" \
         "$libdir/libmpiflow.so" "$libdir/libmpiflow.a" "$libdir/pkgconfig/mpiflow.pc" "$root/bin/mpiflow-train" "$root/bin/mpiflow-ckpt" "$root/bin/mpiflow-bench"; do
    [ -e "$f" ] || fail "not installed: $f"
done
cflags=$(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --define-variable=prefix="$root" --cflags mpiflow)
libs=$(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --define-variable=prefix="$root" --libs mpiflow)
# the build's own flags (a sanitizer build needs them on the example too)
# shellcheck disable=SC2086
mpicc -std=c11 -Wall -Wextra -Werror ${MF_BUILD_CFLAGS:-} "$top_srcdir/examples/train_mlp.c" $cflags $libs \
    ${MF_BUILD_LDFLAGS:-} -o "$TMPDIR_TEST/train_mlp" ||
    fail "the example does not build against the installed headers and library"
LD_LIBRARY_PATH="$libdir" "$MPIEXEC" -n 1 "$TMPDIR_TEST/train_mlp" >"$TMPDIR_TEST/ex.out" 2>&1 ||
    { cat "$TMPDIR_TEST/ex.out"; fail "the example failed"; }
grep -q 'loss .* -> ' "$TMPDIR_TEST/ex.out" || fail "the example printed no loss"
# same_on_1_and_2 NAME: builds examples/NAME.c against the installed tree and
# runs it on 1 and 2 ranks; its 'loss A -> B' lines must agree (output in $TMPDIR_TEST/NAME.2)
same_on_1_and_2() {
    # shellcheck disable=SC2086
    mpicc -std=c11 -Wall -Wextra -Werror ${MF_BUILD_CFLAGS:-} "$top_srcdir/examples/$1.c" $cflags $libs \
        ${MF_BUILD_LDFLAGS:-} -o "$TMPDIR_TEST/$1" || fail "examples/$1.c does not build"
    for np in 1 2; do
        LD_LIBRARY_PATH="$libdir" OPENBLAS_NUM_THREADS=1 "$MPIEXEC" -n "$np" "$TMPDIR_TEST/$1" \
            >"$TMPDIR_TEST/$1.$np" 2>&1 || { cat "$TMPDIR_TEST/$1.$np"; fail "$1 failed on $np ranks"; }
        cat "$TMPDIR_TEST/$1.$np"
    done
    l1=$(sed -n 's/.*loss \([0-9.]*\) -> \([0-9.]*\).*/\1 \2/p' "$TMPDIR_TEST/$1.1")
    l2=$(sed -n 's/.*loss \([0-9.]*\) -> \([0-9.]*\).*/\1 \2/p' "$TMPDIR_TEST/$1.2")
    [ -n "$l1" ] && [ "$l1" = "$l2" ] || fail "$1: losses on 1 rank ($l1) and 2 ranks ($l2) differ"
}
# the global-tensor example: the same losses on 1 and 2 ranks
same_on_1_and_2 hybrid_mlp
grep -q "logits S(0), loss P" "$TMPDIR_TEST/hybrid_mlp.2" || fail "hybrid_mlp: unexpected SBPs"
# the pipeline example (hidden layer on rank 0, output layer on rank 1): the 1-rank losses
same_on_1_and_2 pipeline_mlp
grep -q "with 2 stage(s), 4 micro-batches" "$TMPDIR_TEST/pipeline_mlp.2" || fail "pipeline_mlp: not 2 stages on 2 ranks"
# a ViT under a plan read from text (ZeRO-3, recompute): the 1-rank losses
same_on_1_and_2 zero_vit
grep -q "patch.proj.weight S(0)" "$TMPDIR_TEST/zero_vit.2" || fail "zero_vit: the parameters are not split"
LD_LIBRARY_PATH="$libdir" "$root/bin/mpiflow-train" --help | grep -q 'usage:' || fail "installed mpiflow-train --help"
LD_LIBRARY_PATH="$libdir" "$root/bin/mpiflow-ckpt" --help | grep -q 'usage: mpiflow-ckpt' || fail "installed mpiflow-ckpt --help"
cat "$TMPDIR_TEST/ex.out"
echo "installed tree works: $(find "$dest" -type f | wc -l) files"
