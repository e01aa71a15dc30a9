#!/bin/sh
# A bounded, seeded fuzz of the checkpoint loader and the IDX reader:
# MUTANTS (default 150) damaged copies each of a checkpoint and of the
# four gzip IDX files of a small dataset (tests/fuzz_mutate: flipped
# bits, random bytes, runs of 0x00/0xff, truncations, most in the
# metadata). Each mutant is resumed from, or trained on, by mpiflow-train.
# It must never die of a signal or hang, and every mutant must either
# be refused with exit 2, or be harmless: train exactly as the original
# does (the same losses and test loss to the last printed digit). A
# mutant that trains differently was damaged in a way that matters and
# was not caught. FUZZ_MUTANTS and FUZZ_SEED change the run.
[ -r "${top_srcdir:-.}/tests/lib.sh" ] || { echo "ERROR: no tests/lib.sh: run by make check, or set top_srcdir" >&2; exit 99; }
. "${top_srcdir:-.}/tests/lib.sh"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
# Under AddressSanitizer: HDF5 asks malloc for the sizes a damaged file
# states (petabytes) and copes when it gets NULL; ASan would abort there
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}allocator_may_return_null=1"
export ASAN_OPTIONS
require_fashion_mnist
T=$TMPDIR_TEST
MUT="$top_builddir/tests/fuzz_mutate"
FM=/usr/share/datasets/fashion-mnist
n=${FUZZ_MUTANTS:-150}
seed0=${FUZZ_SEED:-1}

# run1 OUT ARGS...: mpiflow-train on 1 rank; its exit status, and the
# loss lines and final line in OUT
run1() {
    out=$1
    shift
    timeout 60 "$MPIEXEC" -n 1 "$TRAIN" --progress lines --threads 1 --log-every 1 "$@" >"$out.all" 2>&1
    r=$?
    grep -E '^(step|final)' "$out.all" | sed 's/ [0-9]* samples\/s.*//; s/time_s=.*//' >"$out"
    return $r
}
# judge WHAT RC OUT REF: 2, or 0 with the reference's results
judged=0 refused=0 harmless=0
judge() {
    judged=$((judged + 1))
    case $2 in
    2) refused=$((refused + 1)) ;;
    0)
        cmp -s "$3" "$4" || { cat "$3.all"; diff "$4" "$3"; fail "$1: accepted, and trained differently"; }
        harmless=$((harmless + 1))
        ;;
    124) cat "$3.all"; fail "$1: hung (timeout)" ;;
    *) cat "$3.all"; fail "$1: exit $2 (a signal above 128; 1 is not the code for a bad file)" ;;
    esac
}

# ---- checkpoints: resumed for 2 steps on 1 rank
c="--model mlp --dataset synthetic --synthetic-size 400,40 --batch-size 40 --seed 7 --optimizer momentum"
# shellcheck disable=SC2086
run1 "$T/base" $c --steps 3 --checkpoint "$T/ck.h5" --no-eval || fail "the checkpoint to fuzz: exit $?"
# shellcheck disable=SC2086
run1 "$T/ref" $c --steps 5 --resume "$T/ck.h5" || fail "resuming the good checkpoint: exit $?"
size=$(stat -c %s "$T/ck.h5")
i=0
while [ $i -lt "$n" ]; do
    s=$((seed0 + i))
    "$MUT" "$s" "$T/ck.h5" "$T/m.h5" 8192 8192 || fail "fuzz_mutate $s"
    # shellcheck disable=SC2086
    run1 "$T/got" $c --steps 5 --resume "$T/m.h5"
    got=$?
    judge "checkpoint mutant $s" "$got" "$T/got" "$T/ref"
    i=$((i + 1))
done
echo "ok: $n checkpoint mutants ($size bytes each before damage): $refused refused (exit 2), $harmless harmless"

# ---- IDX: 64 training and 32 test images, one of the four files damaged
be32() {
    printf "$(printf '\\%03o\\%03o\\%03o\\%03o' $(($1 >> 24 & 255)) $(($1 >> 16 & 255)) $(($1 >> 8 & 255)) $(($1 & 255)))"
}
mkdir "$T/good" "$T/d"
{ printf '\000\000\010\003'; be32 64; be32 28; be32 28; zcat "$FM/train-images-idx3-ubyte.gz" | tail -c +17 |
    head -c 50176; } | gzip -n >"$T/good/train-images-idx3-ubyte.gz"
{ printf '\000\000\010\001'; be32 64; zcat "$FM/train-labels-idx1-ubyte.gz" | tail -c +9 | head -c 64; } |
    gzip -n >"$T/good/train-labels-idx1-ubyte.gz"
{ printf '\000\000\010\003'; be32 32; be32 28; be32 28; zcat "$FM/t10k-images-idx3-ubyte.gz" | tail -c +17 |
    head -c 25088; } | gzip -n >"$T/good/t10k-images-idx3-ubyte.gz"
{ printf '\000\000\010\001'; be32 32; zcat "$FM/t10k-labels-idx1-ubyte.gz" | tail -c +9 | head -c 32; } |
    gzip -n >"$T/good/t10k-labels-idx1-ubyte.gz"
d="--model mlp --data-dir $T/d --batch-size 32 --steps 2 --eval-batch-size 32 --seed 3"
cp "$T"/good/* "$T/d/"
# shellcheck disable=SC2086
run1 "$T/ref" $d || fail "training on the good IDX files: exit $?"
judged=0 refused=0 harmless=0
i=0
while [ $i -lt "$n" ]; do
    s=$((seed0 + i))
    cp "$T"/good/* "$T/d/"
    set -- "$T"/good/*.gz
    k=$((s % 4 + 1))
    eval "f=\${$k}"
    "$MUT" "$s" "$f" "$T/d/$(basename "$f")" 64 16 || fail "fuzz_mutate $s"
    # shellcheck disable=SC2086
    run1 "$T/got" $d
    got=$?
    judge "IDX mutant $s of $(basename "$f")" "$got" "$T/got" "$T/ref"
    i=$((i + 1))
done
echo "ok: $n IDX mutants: $refused refused (exit 2), $harmless harmless"
echo "fuzz: no signal, no hang; every mutant refused or harmless"
