#!/bin/sh
# GPT pipelines (doc/parallelism.md, "Transformers") against the 1-rank
# run. The GPT's layers are its embeddings, its blocks and its final
# LayerNorm with the head; the token embedding is used on the first
# stage and, as the head, on the last, tied between them.
#  - 10 steps under --pipeline-stages 2 and 4, 3 stages with the GPipe
#    schedule, 2 stages x dp 2, 2 stages x tp 2 (with and without
#    sequence parallelism) and dp x tp x pp 2 x 2 x 2 on 8 ranks give the
#    1-rank losses and final parameters within 1e-5; so do 2 stages x tp
#    2 with dropout and gradient clipping (the masks follow the samples,
#    and the norm counts the tied matrix once) and with ZeRO-1;
#  - the validation losses are the 1-rank ones;
#  - --recompute block and attn under a pipeline train bit for bit as
#    without;
#  - a pp 2 checkpoint holds the parameters a 1-rank one does (the token
#    embedding once), resumes on 1 rank, and under pp 2 bit for bit as
#    the unbroken run; a 1-rank checkpoint resumes under pp 2 x tp 2 + sp;
#  - ZeRO-2/3 with a pipeline, more stages than layers and a
#    tensor-parallel degree that does not divide a stage are refused on
#    every rank.
[ -r "${top_srcdir:-.}/tests/lib.sh" ] || { echo "ERROR: no tests/lib.sh: run by make check, or set top_srcdir" >&2; exit 99; }
. "${top_srcdir:-.}/tests/lib.sh"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
T="$TMPDIR_TEST"

word_text "$T/text.txt" 1200
# momentum SGD, as tests/gpt_parallel.sh explains
SMALL="--model gpt --dataset text:$T/text.txt --n-layer 2 --n-head 4 --n-embd 32 --seq-len 16 --batch-size 8
    --vocab-size 258 --optimizer momentum --lr 0.1 --lr-schedule constant --threads 1 --log-every 1 --seed 3"

# train TAG NP ARGS...: 10 steps -> $T/TAG.csv, $T/TAG.p
train() {
    tag=$1 np=$2
    shift 2
    # shellcheck disable=SC2086
    run_train "$np" $SMALL --no-eval --steps 10 --metrics "$T/$tag.csv" --dump-params "$T/$tag.p" "$@" >/dev/null
    [ "$rc" -eq 0 ] || { cat "$T/out"; fail "$tag: exit $rc"; }
}
# like TAG REF: the losses and the parameters of run TAG are those of REF
like() {
    same_losses "$T/$1.csv" "$T/$2.csv" "$1 losses"
    close_params "$T/$1.p" "$T/$2.p" 1e-5 || fail "$1: parameters differ from $2"
}

train r1 1
for run in "pp2 2 2" "pp4 4 4" "pp2dp 4 2" "pp2tp 4 2 --tensor-parallel 2" \
    "pp2sp 4 2 --tensor-parallel 2 --sequence-parallel" "pp2z1 4 2 --zero 1"; do
    set -- $run
    tag=$1 np=$2 P=$3
    shift 3
    train "$tag" "$np" --pipeline-stages "$P" "$@"
    grep -q "pipeline of $P stage(s)" "$T/out" || fail "$tag: not a pipeline of $P stages"
    like "$tag" r1
done
train gp3 3 --pipeline-stages 3 --schedule gpipe
grep -q "gpipe schedule" "$T/out" || fail "gp3: not GPipe"
like gp3 r1
train pp8 8 --pipeline-stages 2 --tensor-parallel 2
grep -q "2 data-parallel x 2 tensor-parallel ranks per stage" "$T/out" || fail "pp8: not dp x tp inside the stages"
like pp8 r1
echo "ok: pp 2, 4, 3 (gpipe), pp x dp, pp x tp (+ sp), pp with ZeRO-1, and dp x tp x pp 2 x 2 x 2 train as 1 rank"

train d1 1 --dropout 0.1 --clip-grad 0.5
train d4 4 --dropout 0.1 --clip-grad 0.5 --pipeline-stages 2 --tensor-parallel 2
like d4 d1

for mode in block attn; do
    train "rc$mode" 2 --pipeline-stages 2 --recompute "$mode"
    cmp -s "$T/rc$mode.p" "$T/pp2.p" || fail "--recompute $mode under pp 2: parameters are not bit for bit those without"
done
echo "ok: --recompute block and attn under pp 2 train bit for bit as without"

# validation on the last stage
run_train 1 $SMALL --steps 6 --val-every 3 --val-batches 3 >/dev/null
grep "val_loss=" "$T/out" | sed 's/.*val_loss=\([^ ]*\).*/\1/' >"$T/v1"
run_train 4 $SMALL --steps 6 --val-every 3 --val-batches 3 --pipeline-stages 2 --tensor-parallel 2 >/dev/null
[ "$rc" -eq 0 ] || { cat "$T/out"; fail "validation under pp 2 x tp 2: exit $rc"; }
grep "val_loss=" "$T/out" | sed 's/.*val_loss=\([^ ]*\).*/\1/' >"$T/v4"
[ "$(wc -l <"$T/v1")" -eq 2 ] || fail "1 rank: $(wc -l <"$T/v1") validation losses, not 2"
paste -d' ' "$T/v4" "$T/v1" | awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-4 * $2) bad = 1; n++ } END { exit bad || n != 2 }' ||
    fail "validation losses under pp 2 x tp 2 ($(paste -sd' ' "$T/v4")) are not the 1-rank ones ($(paste -sd' ' "$T/v1"))"
echo "ok: validation losses under pp 2 x tp 2 are the 1-rank ones: $(paste -sd' ' "$T/v4")"

# checkpoints
run_train 2 $SMALL --no-eval --steps 5 --pipeline-stages 2 --checkpoint "$T/c.h5" >/dev/null
[ "$rc" -eq 0 ] || { cat "$T/out"; fail "pp 2 first half: exit $rc"; }
run_train 1 $SMALL --no-eval --steps 5 --checkpoint "$T/c1.h5" >/dev/null
[ "$rc" -eq 0 ] || { cat "$T/out"; fail "1 rank first half: exit $rc"; }
h5ls -r "$T/c.h5/model" | awk '{ print $1 }' >"$T/names.pp"
h5ls -r "$T/c1.h5/model" | awk '{ print $1 }' >"$T/names.1"
cmp -s "$T/names.pp" "$T/names.1" || fail "the pp 2 checkpoint's parameters are not the 1-rank one's: $(diff "$T/names.pp" "$T/names.1")"
[ "$(grep -c wte "$T/names.pp")" -eq 1 ] || fail "the pp 2 checkpoint holds the token embedding $(grep -c wte "$T/names.pp") times"
# resume CKPT NP TAG ARGS...: 10 steps in all -> $T/TAG.p, as the unbroken 1-rank run
resume() {
    ck=$1 np=$2 tag=$3
    shift 3
    run_train "$np" $SMALL --no-eval --steps 10 --resume "$ck" --dump-params "$T/$tag.p" "$@" >/dev/null
    [ "$rc" -eq 0 ] || { cat "$T/out"; fail "resume $tag: exit $rc"; }
    close_params "$T/$tag.p" "$T/r1.p" 1e-5 || fail "$ck resumed on $np rank(s) $*: parameters differ from the unbroken run"
}
resume "$T/c.h5" 1 x1
resume "$T/c.h5" 2 x2 --pipeline-stages 2
cmp -s "$T/x2.p" "$T/pp2.p" || fail "pp 2 resumed under pp 2 is not bit for bit the unbroken pp 2 run"
resume "$T/c1.h5" 4 x4 --pipeline-stages 2 --tensor-parallel 2 --sequence-parallel
echo "ok: a pp 2 checkpoint resumes on 1 rank and under pp 2 bit for bit; a 1-rank one under pp 2 x tp 2 + sp"

refused 4 "ZeRO-2 and -3 split parameters" $SMALL --steps 1 --pipeline-stages 2 --zero 3
refused 5 "5 stages for a model of 4 layers .*embeddings, each block" $SMALL --steps 1 --pipeline-stages 5
refused 4 "each of the 2 stages has 2 rank(s), which do not form groups of 4" $SMALL --steps 1 --pipeline-stages 2 \
    --tensor-parallel 4
