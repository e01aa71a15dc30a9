#!/bin/sh
# Tensor and sequence parallelism of a GPT (doc/parallelism.md,
# "Transformers") against the 1-rank run:
#  - one forward and backward of a tiny GPT (4 heads, a vocabulary of
#    23 that splits unevenly) under tp 2 and 4, tp+sp, dp x tp 2x2 and
#    dp 2 (tests/gpt_parallel): the loss and every gradient within 1e-5
#    of the largest of each tensor, and each run communicates exactly
#    Megatron-LM's count of collectives and bytes;
#  - activation recompute (block, attn) gives bit for bit the gradients
#    without it, with dropout too (the masks are drawn again), on 1 rank
#    and under tp and tp+sp, where it repeats the forward's collectives;
#  - mpiflow-train --tensor-parallel (and --sequence-parallel) for 10
#    steps: the 1-rank losses and final parameters within 1e-5; with
#    --recompute, bit for bit the run without;
#  - --zero 2 and 3 (parameters split over the data-parallel ranks,
#    gathered per use; 3 frees them and gathers again for backward) on
#    2 to 4 ranks, with tp and tp+sp, and with recompute: the 1-rank
#    losses and parameters within 1e-5, and ZeRO-3 gathers each saved
#    weight once more than ZeRO-2;
#  - a checkpoint saved under tp 2 resumes on 1 rank, under tp+sp on 4
#    and under ZeRO-3, one saved under ZeRO-3 + tp resumes under ZeRO-2
#    and on 1 rank, and a tp 2 run resumed under tp 2 equals the unbroken
#    one bit for bit;
#  - a head count that tp does not divide, and tp that does not divide
#    the ranks, are refused on every rank.
[ -r "${top_srcdir:-.}/tests/lib.sh" ] || { echo "ERROR: no tests/lib.sh: run by make check, or set top_srcdir" >&2; exit 99; }
. "${top_srcdir:-.}/tests/lib.sh"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
T="$TMPDIR_TEST"
G="$top_builddir/tests/gpt_parallel"

"$MPIEXEC" -n 1 "$G" 1 0 "$T/g1" || fail "gpt_parallel on 1 rank"
for run in "2 2 0" "4 4 0" "4 2 0" "2 2 1" "4 4 1" "4 2 1" "2 1 0"; do
    set -- $run
    "$MPIEXEC" -n "$1" "$G" "$2" "$3" "$T/g.$1.$2.$3" || fail "gpt_parallel: np $1 tp $2 sp $3"
    close_params "$T/g.$1.$2.$3" "$T/g1" 1e-5 || fail "np $1 tp $2 sp $3: the loss or gradients differ from 1 rank"
done

# recompute: the same bits
for run in "1 1 0" "2 2 0" "2 2 1" "4 2 1"; do
    set -- $run
    for drop in 0 0.2; do
        "$MPIEXEC" -n "$1" "$G" "$2" "$3" "$T/rc.none" none "$drop" >/dev/null || fail "np $1 tp $2 sp $3 dropout $drop"
        for mode in block attn; do
            "$MPIEXEC" -n "$1" "$G" "$2" "$3" "$T/rc.$mode" "$mode" "$drop" || fail "recompute $mode: np $1 tp $2 sp $3"
            cmp -s "$T/rc.$mode" "$T/rc.none" ||
                fail "recompute $mode (np $1 tp $2 sp $3 dropout $drop): the gradients are not those without recompute"
        done
    done
done
echo "ok: recompute block and attn give the same bits as none, with dropout, on 1 rank and under tp and tp+sp"

# training: momentum SGD (Adam turns the float noise of a zero gradient,
# c_attn's key bias, into steps of the learning rate's size)
word_text "$T/text.txt" 1200
SMALL="--model gpt --dataset text:$T/text.txt --n-layer 2 --n-head 4 --n-embd 32 --seq-len 16 --batch-size 8
    --vocab-size 258 --optimizer momentum --lr 0.1 --lr-schedule constant --threads 1 --log-every 1 --no-eval --seed 3"

# train TAG NP ARGS...: 10 steps -> $T/TAG.csv, $T/TAG.p
train() {
    tag=$1 np=$2
    shift 2
    # shellcheck disable=SC2086
    run_train "$np" $SMALL --steps 10 --metrics "$T/$tag.csv" --dump-params "$T/$tag.p" "$@" >/dev/null
    [ "$rc" -eq 0 ] || { cat "$T/out"; fail "$tag: exit $rc"; }
}
train r1 1
for run in "tp2 2 2" "tp4 4 4" "dptp 4 2"; do
    set -- $run
    train "$1" "$2" --tensor-parallel "$3"
    grep -q "parallel tp: $(($2 / $3)) data-parallel x $3 tensor-parallel" "$T/out" || fail "$1: not tp"
    same_losses "$T/$1.csv" "$T/r1.csv" "$1 losses"
    close_params "$T/$1.p" "$T/r1.p" 1e-5 || fail "$1: parameters differ from 1 rank"
    train "$1sp" "$2" --tensor-parallel "$3" --sequence-parallel
    grep -q "sequence parallel" "$T/out" || fail "$1sp: not sequence parallel"
    same_losses "$T/$1sp.csv" "$T/r1.csv" "$1 + sp losses"
    close_params "$T/$1sp.p" "$T/r1.p" 1e-5 || fail "$1sp: parameters differ from 1 rank"
done

for mode in block attn; do
    train "rc$mode" 2 --tensor-parallel 2 --recompute "$mode"
    grep -q "recompute $mode" "$T/out" || fail "--recompute $mode not reported"
    cmp -s "$T/rc$mode.p" "$T/tp2.p" || fail "--recompute $mode: parameters are not bit for bit those without"
done
echo "ok: --recompute block and attn train bit for bit as without, under tp 2"

for run in "z2n2 2 --zero 2" "z3n2 2 --zero 3" "z3n3 3 --zero 3" "z3n4 4 --zero 3" "z3tp 4 --zero 3 --tensor-parallel 2" \
    "z2sp 4 --zero 2 --tensor-parallel 2 --sequence-parallel" "z3rc 4 --zero 3 --tensor-parallel 2 --recompute attn"; do
    set -- $run
    tag=$1 np=$2
    shift 2
    train "$tag" "$np" "$@" --profile
    grep -q "ZeRO-$2" "$T/out" || fail "$tag: not ZeRO-$2"
    grep "^communication" "$T/out" | sed -n 's/.*allgather \([0-9.]*\) calls.*/\1/p' >"$T/$tag.ag"
    same_losses "$T/$tag.csv" "$T/r1.csv" "$tag: $*"
    close_params "$T/$tag.p" "$T/r1.p" 1e-5 || fail "$tag: parameters differ from 1 rank"
done
awk -v a="$(cat "$T/z2n2.ag")" -v b="$(cat "$T/z3n2.ag")" 'BEGIN { exit !(b > a) }' ||
    fail "ZeRO-3 gathers no more than ZeRO-2 ($(cat "$T/z3n2.ag") against $(cat "$T/z2n2.ag") allgathers per step)"
echo "ok: ZeRO-3 gathers the saved weights again in backward: $(cat "$T/z3n2.ag") allgathers per step, ZeRO-2 $(cat "$T/z2n2.ag")"

# checkpoints: 5 steps under tp 2, then 5 more elsewhere
run_train 2 $SMALL --steps 5 --tensor-parallel 2 --checkpoint "$T/c.h5" >/dev/null
[ "$rc" -eq 0 ] || { cat "$T/out"; fail "tp 2 first half: exit $rc"; }
# resume CKPT NP TAG ARGS...: 10 steps in all from CKPT -> $T/TAG.p, within 1e-5 of the unbroken 1-rank run
resume() {
    ck=$1 np=$2 tag=$3
    shift 3
    run_train "$np" $SMALL --steps 10 --resume "$ck" --dump-params "$T/$tag.p" "$@" >/dev/null
    [ "$rc" -eq 0 ] || { cat "$T/out"; fail "resume $tag: exit $rc"; }
    close_params "$T/$tag.p" "$T/r1.p" 1e-5 || fail "$ck resumed on $np rank(s) $*: parameters differ from the unbroken run"
}
resume "$T/c.h5" 1 x1
resume "$T/c.h5" 4 xsp --tensor-parallel 4 --sequence-parallel
resume "$T/c.h5" 4 xz3 --zero 3
resume "$T/c.h5" 2 xtp --tensor-parallel 2
cmp -s "$T/xtp.p" "$T/tp2.p" || fail "tp 2 resumed under tp 2 is not bit for bit the unbroken tp 2 run"
run_train 4 $SMALL --steps 5 --tensor-parallel 2 --zero 3 --checkpoint "$T/cz.h5" >/dev/null
[ "$rc" -eq 0 ] || { cat "$T/out"; fail "ZeRO-3 + tp first half: exit $rc"; }
h5dump -A -d "/model/transformer.h.0.mlp.c_fc.weight" "$T/cz.h5" | grep -q 'S(1),S(0)' ||
    fail "the ZeRO-3 + tp checkpoint does not record the split parameter's SBP"
resume "$T/cz.h5" 2 yz2 --zero 2
resume "$T/cz.h5" 1 y1
echo "ok: a tp 2 checkpoint resumes on 1 rank, under tp+sp on 4 and ZeRO-3; ZeRO-3 + tp resumes under ZeRO-2 and on 1 rank; tp 2 under tp 2 bit for bit"

refused 4 "4 heads do not split over 3\|do not form groups of 3" $SMALL --steps 1 --tensor-parallel 3
refused 4 "2 heads do not split over 4 tensor-parallel ranks" $SMALL --steps 1 --n-head 2 --tensor-parallel 4
refused 2 "sequence-parallel: splits the sequence" $SMALL --steps 1 --sequence-parallel
