#!/bin/sh
# Parallel plans in mpiflow-train (doc/plans.md):
#  - --print-plan > p.json, then --plan p.json: the same loss column,
#    byte for byte, as the flags it came from (MLP dp, mp, hybrid, 2d,
#    ZeRO-1; LeNet pipelined in 2-D; the GPT with tp, tp+sp, ZeRO-3,
#    recompute and a pipeline), and the printed form names every
#    parameter with its SBP and rule;
#  - --recompute PATTERN for LeNet: the same losses bit for bit;
#  - the shipped plans/gpt-megatron*.json and vit-megatron*.json are
#    the plans of the flags; the printed form lists activation layouts
#    and recompute patterns with the modules they name;
#  - a plan written by hand (row- and column-parallel rules the flags
#    cannot say) on 2 and 4 ranks trains as 1 rank does (1e-5, 6 steps);
#  - ZeRO-2 and -3 (with recompute) for the MLP, LeNet and the ViT on 2
#    and 4 ranks, and the ViT in 2 pipeline stages and with its tensor-
#    and sequence-parallel plan on 2 and 4 ranks (also inside 2 pipeline
#    stages) train as 1 rank does (1e-5, 10 steps);
#  - --deterministic with ZeRO-2/3 (and recompute) gives the bits of the
#    run without ZeRO for the MLP, LeNet, the ViT and the GPT on 1, 2
#    and 4 ranks, and at tp 2 with sequence parallelism on 2 and 4;
#  - bad plans exit 2 on every rank within 10 s, naming the fault.
[ -r "${top_srcdir:-.}/tests/lib.sh" ] || { echo "ERROR: no tests/lib.sh: run by make check, or set top_srcdir" >&2; exit 99; }
. "${top_srcdir:-.}/tests/lib.sh"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
T=$TMPDIR_TEST
word_text "$T/text.txt" 2000
GPT="--model gpt --dataset text:$T/text.txt --n-layer 2 --n-head 4 --n-embd 32 --seq-len 16 --batch-size 8 --seed 3
     --threads 1 --log-every 1 --steps 6"
IMG="--dataset synthetic --synthetic-size 512,64 --seed 3 --threads 1 --log-every 1 --batch-size 32 --steps 6"

# trip TAG NP BASE FLAGS...: the flags' run against the run of their printed plan
trip() {
    tag=$1 np=$2 base=$3
    shift 3
    # shellcheck disable=SC2086
    "$MPIEXEC" -n "$np" "$TRAIN" $base "$@" --print-plan >"$T/$tag.json" 2>"$T/$tag.table" ||
        { cat "$T/$tag.table"; fail "$tag: --print-plan exited non-zero"; }
    # shellcheck disable=SC2086
    run_train "$np" $base "$@" --metrics "$T/$tag.a.csv" >/dev/null
    [ "$rc" -eq 0 ] || fail "$tag: the flags' run exited $rc"
    # shellcheck disable=SC2086
    run_train "$np" $base --plan "$T/$tag.json" --metrics "$T/$tag.b.csv" >/dev/null
    [ "$rc" -eq 0 ] || { cat "$T/$tag.json"; fail "$tag: the plan's run exited $rc"; }
    losses "$T/$tag.a.csv" >"$T/a"
    losses "$T/$tag.b.csv" >"$T/b"
    [ "$(wc -l <"$T/a")" -ge 6 ] || fail "$tag: $(wc -l <"$T/a") losses"
    cmp -s "$T/a" "$T/b" || { paste "$T/a" "$T/b"; fail "$tag: --plan gives other losses than the flags"; }
    # every parameter is in the printed form, with an SBP and where it came from
    params=$(grep -c '^  [a-z].*  \(rule [0-9]\|no rule\)' "$T/$tag.table")
    [ "$params" -ge 4 ] || { cat "$T/$tag.table"; fail "$tag: the printed form lists $params parameters"; }
    echo "ok: $tag on $np ranks: --print-plan then --plan, the same $(wc -l <"$T/a") losses; $params parameters printed"
}
trip mlp_dp 2 "$IMG --model mlp"
trip mlp_mp 2 "$IMG --model mlp" --parallel mp
trip mlp_hybrid 2 "$IMG --model mlp" --parallel hybrid
trip mlp_2d 4 "$IMG --model mlp" --parallel 2d
trip mlp_zero1 2 "$IMG --model mlp" --zero 1
trip lenet_2d_pp 4 "$IMG --model lenet" --parallel 2d --mesh 2x1 --pipeline-cuts 6
trip gpt_tp 2 "$GPT" --tensor-parallel 2
trip gpt_tp_sp 2 "$GPT" --tensor-parallel 2 --sequence-parallel
trip gpt_zero3 2 "$GPT" --zero 3
trip gpt_recompute 2 "$GPT" --recompute block
trip gpt_pp 2 "$GPT" --pipeline-stages 2
grep -q '"match": "\*.attn.c_attn.\*", "sbp": {"tp": "S(1)"}' "$T/gpt_tp.json" ||
    { cat "$T/gpt_tp.json"; fail "gpt_tp: no Megatron rule for c_attn in the plan"; }
grep -q 'transformer.h.0.attn.c_attn.weight .* B,S(1) .* rule 1 "\*.attn.c_attn.\*"' "$T/gpt_tp.table" ||
    { cat "$T/gpt_tp.table"; fail "gpt_tp: c_attn's line in the printed form"; }

# --- recompute of any module by name: the same losses, bit for bit
run_train 2 $IMG --model lenet --metrics "$T/lenet.csv" >/dev/null
[ "$rc" -eq 0 ] || fail "lenet: exit $rc"
run_train 2 $IMG --model lenet --recompute 'conv*' --metrics "$T/lenet_rc.csv" >/dev/null
[ "$rc" -eq 0 ] || fail "lenet --recompute 'conv*': exit $rc"
grep -q "recompute conv\*" "$TMPDIR_TEST/out" || fail "lenet --recompute: not in the start-up line"
losses "$T/lenet.csv" >"$T/a"
losses "$T/lenet_rc.csv" >"$T/b"
cmp -s "$T/a" "$T/b" || { paste "$T/a" "$T/b"; fail "lenet: --recompute 'conv*' changed the losses"; }
echo "ok: lenet --recompute 'conv*' on 2 ranks: the same $(wc -l <"$T/a") losses as without"
trip lenet_recompute 2 "$IMG --model lenet" --recompute conv2

# the shipped Megatron-LM plans are what --tensor-parallel 2 [--sequence-parallel] makes
for ship in "gpt-megatron" "gpt-megatron-sp --sequence-parallel" "vit-megatron" "vit-megatron-sp --sequence-parallel"; do
    set -- $ship
    f="${top_srcdir:-.}/plans/$1.json"
    case "$1" in gpt*) base=$GPT ;; *) base="$IMG --model vit" ;; esac
    shift
    # shellcheck disable=SC2086
    "$MPIEXEC" -n 2 "$TRAIN" $base --plan "$f" --print-plan >"$T/ship.a" 2>/dev/null || fail "--plan $f: exit $?"
    # shellcheck disable=SC2086
    "$MPIEXEC" -n 2 "$TRAIN" $base --tensor-parallel 2 "$@" --print-plan >"$T/ship.b" 2>/dev/null || fail "tp 2 $*: exit $?"
    cmp -s "$T/ship.a" "$T/ship.b" || { diff "$T/ship.a" "$T/ship.b"; fail "plans/$(basename "$f") is not the flags' plan"; }
    echo "ok: plans/$(basename "$f") is the plan of --tensor-parallel 2 $*"
done
refused 2 'recompute pattern "convv" matches no module' $IMG --model lenet --recompute convv

# --- a plan by hand: hidden column parallel over tp, output row parallel
cat >"$T/rows.json" <<'EOF'
{"description": "hidden column parallel, output row parallel, data parallel across",
 "mesh": {"names": ["dp", "tp"], "shape": [-1, 2]},
 "params": [{"match": "hidden.*", "sbp": {"tp": "S(0)"}},
            {"match": "output.weight", "sbp": {"tp": "S(1)"}}]}
EOF
run_train 1 $IMG --model mlp --metrics "$T/one.csv" >/dev/null
[ "$rc" -eq 0 ] || fail "1 rank: exit $rc"
for np in 2 4; do
    run_train "$np" $IMG --model mlp --plan "$T/rows.json" --metrics "$T/rows$np.csv" >/dev/null
    [ "$rc" -eq 0 ] || fail "rows.json on $np ranks: exit $rc"
    same_losses "$T/one.csv" "$T/rows$np.csv" "a hand-written plan (column then row parallel) on $np ranks vs 1 rank"
done

# --- ZeRO-2/3 for any model: each module's parameters gathered for its
# forward (mf_module_use_begin), the gradients reduce-scattered back
Z="--dataset synthetic --synthetic-size 128,16 --seed 3 --threads 1 --log-every 1 --batch-size 8 --steps 10 --no-eval"
for model in mlp lenet vit; do
    run_train 1 $Z --model $model --metrics "$T/z1.csv" >/dev/null
    [ "$rc" -eq 0 ] || fail "$model on 1 rank: exit $rc"
    for run in "2 2" "2 3" "4 2" "4 3"; do
        set -- $run
        extra=
        [ "$model" = lenet ] && [ "$2" = 3 ] && extra="--recompute conv*"
        [ "$model" = vit ] && [ "$2" = 3 ] && extra="--recompute block*"
        # shellcheck disable=SC2086
        run_train "$1" $Z --model $model --zero "$2" $extra --metrics "$T/z.csv" >/dev/null
        [ "$rc" -eq 0 ] || fail "$model --zero $2 $extra on $1 ranks: exit $rc"
        grep -q "ZeRO-$2: parameters split" "$T/out" || fail "$model --zero $2: the run does not say ZeRO-$2"
        same_losses "$T/z1.csv" "$T/z.csv" "$model --zero $2 $extra on $1 ranks vs 1 rank"
    done
done
# the ViT in a 2-stage pipeline (cut between its blocks); then its
# Megatron-style plan (whole heads of q, k and v, row-parallel
# projections; the residual stream split over the patches with -sp) on
# 2 and 4 ranks, with ZeRO-3 over dp, and inside 2 pipeline stages
vit_runs="2 --pipeline-cuts 2
2 --tensor-parallel 2
2 --tensor-parallel 2 --sequence-parallel
4 --tensor-parallel 2 --sequence-parallel
4 --tensor-parallel 4 --sequence-parallel
4 --tensor-parallel 2 --zero 3
4 --tensor-parallel 2 --sequence-parallel --pipeline-cuts 2"
echo "$vit_runs" | while read -r np flags; do
    # shellcheck disable=SC2086
    run_train "$np" $Z --model vit $flags --metrics "$T/z.csv" >/dev/null </dev/null   # mpiexec reads stdin
    [ "$rc" -eq 0 ] || fail "vit $flags on $np ranks: exit $rc"
    case "$flags" in *tensor-parallel*)
        grep -q "tensor-parallel ranks" "$T/out" || fail "vit $flags: the run does not say tensor-parallel ranks" ;;
    esac
    same_losses "$T/z1.csv" "$T/z.csv" "vit $flags on $np ranks vs 1 rank"
done >"$T/vit_runs.log" || { cat "$T/vit_runs.log"; exit 1; }
cat "$T/vit_runs.log"
[ "$(grep -c "^ok: vit .* on [24] ranks vs 1 rank" "$T/vit_runs.log")" -eq 7 ] || fail "vit: not every run of the list was checked"

# --- --deterministic with ZeRO-2/3: each use's whole gradient is summed
# in shard order, so the loss column and the final parameters are the
# bits of the run without ZeRO, on 1, 2 and 4 ranks
D="--seed 3 --threads 1 --log-every 1 --batch-size 8 --steps 6 --no-eval --deterministic=4"
DI="$D --dataset synthetic --synthetic-size 128,16"
DG="$D --model gpt --dataset text:$T/text.txt --n-layer 2 --n-head 4 --n-embd 32 --seq-len 16"
bits() {   # bits TAG NP FLAGS...: against $T/bits.ref.{csv,params}
    tag=$1 np=$2
    shift 2
    run_train "$np" "$@" --metrics "$T/bits.csv" --dump-params "$T/bits.params" >/dev/null
    [ "$rc" -eq 0 ] || fail "$tag on $np ranks: exit $rc"
    losses "$T/bits.csv" >"$T/bits.loss"
    [ "$(wc -l <"$T/bits.loss")" -eq 6 ] || fail "$tag: $(wc -l <"$T/bits.loss") losses"
    cmp -s "$T/bits.ref.loss" "$T/bits.loss" || { paste "$T/bits.ref.loss" "$T/bits.loss"; fail "$tag on $np ranks: other loss bits"; }
    cmp -s "$T/bits.ref.params" "$T/bits.params" || fail "$tag on $np ranks: other parameter bits"
    echo "ok: $tag on $np ranks: the reference's loss column and parameters, bit for bit"
}
ref() {   # ref NP FLAGS...: the reference run
    np=$1
    shift
    run_train "$np" "$@" --metrics "$T/bits.csv" --dump-params "$T/bits.ref.params" >/dev/null
    [ "$rc" -eq 0 ] || fail "reference $* on $np ranks: exit $rc"
    losses "$T/bits.csv" >"$T/bits.ref.loss"
}
for model in mlp lenet vit gpt; do
    case $model in
        gpt) base=$DG again="--recompute transformer.h.*" ;;
        lenet) base="$DI --model lenet" again="--recompute conv*" ;;
        vit) base="$DI --model vit" again="--recompute block*" ;;
        *) base="$DI --model mlp" again= ;;
    esac
    # shellcheck disable=SC2086
    ref 1 $base
    # shellcheck disable=SC2086
    bits "$model --deterministic --zero 2" 2 $base --zero 2
    grep -q "deterministic: 4 shards summed in order, ZeRO-2" "$T/out" || fail "$model: the run does not say ZeRO-2"
    # shellcheck disable=SC2086
    bits "$model --deterministic --zero 3 $again" 4 $base --zero 3 $again
    # shellcheck disable=SC2086
    bits "$model --deterministic --zero 3 $again" 1 $base --zero 3 $again
done
# at a fixed tensor-parallel degree: 1 and 2 data-parallel rows
for model in gpt vit; do
    [ $model = gpt ] && base=$DG || base="$DI --model vit"
    # shellcheck disable=SC2086
    ref 2 $base --tensor-parallel 2 --sequence-parallel
    # shellcheck disable=SC2086
    bits "$model --deterministic --tensor-parallel 2 --sequence-parallel --zero 3" 4 $base --tensor-parallel 2 \
        --sequence-parallel --zero 3
done
refused 3 "the ViT's 4 heads do not split over 3 tensor-parallel ranks" $Z --model vit --tensor-parallel 3
refused 2 "--model lenet has no Megatron-style plan" $Z --model lenet --tensor-parallel 2
trip vit_tp_sp 2 "$IMG --model vit" --tensor-parallel 2 --sequence-parallel --recompute 'block*'
trip vit_tp_sp_pp 4 "$IMG --model vit" --tensor-parallel 2 --sequence-parallel --pipeline-cuts 2
grep -q '^  recompute block\*: 2 module(s), block0 block1$' "$T/vit_tp_sp.table" ||
    { cat "$T/vit_tp_sp.table"; fail "vit: the printed form's recompute line (the blocks, not their insides)"; }
grep -q '^  activation block\*.attn output tp=S(1): 2 module(s), block0.attn block1.attn$' "$T/vit_tp_sp.table" ||
    { cat "$T/vit_tp_sp.table"; fail "vit: the printed form's activation lines"; }

# --- bad plans: exit 2 on every rank, within 10 s, naming the fault
bad() {
    printf '%s\n' "$2" >"$T/bad.json"
    np=$1
    want=$3
    shift 3
    start=$(date +%s)
    refused "$np" "$want" "$@" --plan "$T/bad.json"
    took=$(($(date +%s) - start))
    [ "$took" -le 10 ] || fail "the refusal took $took s (at most 10)"
}
bad 2 '{"mesh": {"names": ["dp"], "shape": [2]}, "params": [' "is not JSON: line 2, column 1: expected a value, found the end" $IMG --model mlp
bad 2 '{"params": [{"match": "hiden.*", "sbp": "S(0)"}]}' 'plan rule 0 ("hiden.\*" -> S(0)) matches no parameter' \
    $IMG --model mlp
bad 2 '{"params": [{"match": "output.bias", "sbp": "S(1)"}]}' "splits axis 1 of parameter output.bias, which has 1" \
    $IMG --model mlp
bad 2 '{"mesh": {"names": ["dp", "tp"], "shape": [2, 2]}}' "the mesh does not fit the 2 rank(s) of the job" \
    $IMG --model mlp
bad 2 '{"pipeline": {"cuts": ["hiden"]}}' "pipeline cut 'hiden' names no layer of the model" $IMG --model mlp
bad 2 '{"zeroo": 1}' 'unknown key "zeroo"' $IMG --model mlp
bad 3 '{"mesh": {"names": ["dp", "tp"], "shape": [1, 3]}, "params": [{"match": "*.attn.c_attn.*", "sbp": {"tp": "S(1)"}}]}' \
    "for a GPT, mpiflow-train runs the layouts its flags can say" $GPT
refused 3 "4 heads do not split over 3 tensor-parallel ranks" $GPT --tensor-parallel 3
refused 2 "plan .* gives the parallel layout: drop --parallel" $IMG --model mlp --plan "$T/rows.json" --parallel dp
echo "plans: --print-plan round trips byte for byte, a hand-written plan trains as 1 rank, bad plans are refused"
