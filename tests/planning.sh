#!/bin/sh
# Plans predicted (doc/planning.md): mpiflow-bench calibrate writes a
# calibration that mpiflow-plan reads; mpiflow-plan's predicted peak
# memory per rank is what mpiflow-train then measures, for several plans
# on 2 and 4 real ranks (within 5 %); --write gives a plan file that
# trains exactly as the flags it came from; mpiflow-train --plan auto
# runs the predicted best and reports predicted against measured; bad
# input is refused with exit 2 and a message that says what to change.
[ -r "${top_srcdir:-.}/tests/lib.sh" ] || { echo "ERROR: no tests/lib.sh: run by make check, or set top_srcdir" >&2; exit 99; }
. "${top_srcdir:-.}/tests/lib.sh"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
T=$TMPDIR_TEST
PLAN="$top_builddir/mpiflow-plan"
BENCH="$top_builddir/mpiflow-bench"
M="--model mlp --dataset synthetic --synthetic-size 256,64 --batch-size 16"
G="--model gpt --dataset text:$top_srcdir/README.md --n-layer 2 --n-head 4 --n-embd 32 --seq-len 16 --batch-size 8"

# ---- a calibration, measured on 2 ranks, read back
timeout 300 "$MPIEXEC" -n 2 "$BENCH" calibrate --quick --out "$T/cal.txt" >"$T/cal.out" 2>&1 ||
    { cat "$T/cal.out"; fail "mpiflow-bench calibrate: exit $?"; }
grep -q '^rate gemm ' "$T/cal.txt" && grep -q '^comm allreduce 2 ' "$T/cal.txt" ||
    { cat "$T/cal.txt"; fail "the calibration lacks GEMM rates or the allreduce's times"; }
"$PLAN" $M --ranks 4 --calibration "$T/cal.txt" >"$T/plan.out" 2>&1 || { cat "$T/plan.out"; fail "mpiflow-plan: exit $?"; }
grep -q "rates: measured" "$T/plan.out" || { cat "$T/plan.out"; fail "mpiflow-plan did not use the calibration"; }
echo "ok: calibrate on 2 ranks, read by mpiflow-plan"

# ---- predicted peak memory = measured, for every plan of the grid that runs
# check_memory NP EVERY MODELFLAGS: every EVERY-th plan mpiflow-plan lists
# for NP ranks (bench/run_plan.sh runs them all), trained for 3 steps on
# NP real ranks; its peak_mib within TOL (default 5 %) of the prediction
check_memory() {
    np=$1
    every=$2
    shift 2
    tol=${TOL:-0.05}
    # shellcheck disable=SC2086
    "$PLAN" "$@" --ranks "$np" --tsv >"$T/all" 2>"$T/grid.err" || { cat "$T/grid.err"; fail "mpiflow-plan --tsv: exit $?"; }
    awk -v k="$every" '(NR - 1) % k == 0' "$T/all" >"$T/grid"
    n=0
    while IFS="$(printf '\t')" read -r flags dp tp pp ok step peak params grads optim gathers commbuf logits slack gpeak json <&3; do
        [ "$ok" = 1 ] || continue
        label=$flags
        case $flags in "("*) flags="" ;; esac
        # shellcheck disable=SC2086
        eval "set -- $flags"
        # a searched layout no flag spells: its plan file
        if [ -n "$json" ]; then
            printf '%s\n' "$json" >"$T/searched.json"
            set -- --plan "$T/searched.json"
        fi
        run_train "$np" "$@" $RUNFLAGS --steps 3 --no-eval --log-every 3 --seed 5 </dev/null
        [ "$rc" -eq 0 ] || fail "mpiflow-train $flags on $np ranks: exit $rc"
        got=$(final_field peak_mib)
        awk -v p="$peak" -v g="$got" -v t="$tol" 'BEGIN { p /= 1048576; d = (g - p) / p; exit !(d < t && d > -t) }' ||
            fail "$label on $np ranks: predicted $peak bytes, measured $got MiB"
        # and its parts: ZeRO gathers, communication buffers, logits, slack,
        # and the gradients alive at that moment
        parts=$(final_field peak_parts_mib)
        awk -v pr="$gathers,$commbuf,$logits,$slack,$gpeak" -v m="$parts" -v pk="$got" 'BEGIN {
                split(pr, p, ","); n = split(m, g, ","); if (n != 5) exit 1
                for (i = 1; i <= 5; i++) { d = g[i] - p[i] / 1048576; if (d < 0) d = -d; if (d > 0.02 + 0.01 * pk) exit 1 }
            }' || fail "$label on $np ranks: the peak's parts predicted $gathers,$commbuf,$logits,$slack,$gpeak bytes, measured $parts MiB"
        echo "ok: $label (${dp}x${tp}x${pp}) on $np ranks: predicted $(awk -v p="$peak" 'BEGIN { printf "%.3f", p / 1048576 }') MiB, measured $got MiB (gathers, buffers, logits, slack, gradients: $parts)"
        n=$((n + 1))
    done 3<"$T/grid"
    [ "$n" -ge 3 ] || fail "only $n plans ran for $RUNFLAGS on $np ranks"
}
RUNFLAGS="$M" check_memory 2 1 $M
RUNFLAGS="$G" check_memory 4 4 $G
# a convolution engine's own buffers (oneDNN's reorders and scratchpad,
# or the im2col columns) and a pipeline's micro-batches, which are views
# of the batch: the ViT's plans to within 0.5 %
V="--model vit --dataset synthetic --synthetic-size 256,64 --batch-size 32"
TOL=0.005 RUNFLAGS="$V" check_memory 2 2 $V

# ---- the memory model against bench_memory, scheme by scheme: the
# parameters, gradients and optimizer state per rank that mpiflow-plan
# predicts, against the bytes bench_memory measures on 2 real ranks
# (printed in MiB to 0.1: within 5 % or 0.1 MiB)
BM="$top_builddir/bench/bench_memory"
GB="--model gpt --dataset text:$top_srcdir/README.md --n-layer 2 --n-head 4 --n-embd 256 --seq-len 64 --vocab-size 8192"
GB="$GB --batch-size 8 --optimizer adamw"
"$PLAN" $GB --ranks 2 --tsv >"$T/bm_grid" 2>"$T/bm.err" || { cat "$T/bm.err"; fail "mpiflow-plan --tsv for the GPT: exit $?"; }
check_scheme() {   # check_scheme 'BENCH_MEMORY FLAGS' 'MPIFLOW-PLAN FLAGS (as its --tsv first field)'
    # shellcheck disable=SC2086
    timeout 300 "$MPIEXEC" -n 2 "$BM" --n-layer 2 --n-embd 256 --n-head 4 --seq-len 64 --vocab 8192 --batch 8 \
        --steps 2 $1 >"$T/bm.out" 2>&1 || { cat "$T/bm.out"; fail "bench_memory $1: exit $?"; }
    row=$(awk -F '\t' -v f="$2" '$1 == f && $5 == 1' "$T/bm_grid" | head -1)
    [ -n "$row" ] || fail "mpiflow-plan lists no plan '$2' that runs"
    line=$(tail -1 "$T/bm.out")
    echo "$row" | awk -F '\t' -v l="$line" -v s="$1" -v f="$2" '
        BEGIN { M = 1048576 }
        {
            n = split(l, w, " +")
            split(w[3], p, "/"); split(w[4], g, "/"); split(w[5], o, "/")
            want[1] = $8 / M; want[2] = $9 / M; want[3] = $10 / M
            got[1] = p[1]; got[2] = g[1]; got[3] = o[1]
            split("parameters gradients optimizer", what, " ")
            bad = 0
            for (i = 1; i <= 3; i++) {
                d = got[i] - want[i]; if (d < 0) d = -d
                if (d > 0.1 && d > 0.05 * want[i]) {
                    printf "FAIL: bench_memory %s against mpiflow-plan %s: %s measured %.1f MiB, predicted %.3f MiB\n",
                           s, f, what[i], got[i], want[i]
                    bad = 1
                }
            }
            if (!bad) printf "ok: bench_memory %s = mpiflow-plan %s: %.3f/%.3f/%.3f MiB predicted, %s/%s/%s measured\n",
                             s == "" ? "(dp)" : s, f, want[1], want[2], want[3], got[1], got[2], got[3]
            exit bad
        }' || fail "the memory model differs from bench_memory"
}
check_scheme "" "(data parallel)"
check_scheme "--tp 2" "--tensor-parallel 2"
check_scheme "--tp 2 --sp" "--tensor-parallel 2 --sequence-parallel"
check_scheme "--zero 2" "--zero 2"
check_scheme "--zero 3" "--zero 3"
check_scheme "--zero 3 --recompute block" "--zero 3 --recompute 'block'"

# ---- GPT-2 XL on 1024 ranks (128 nodes of 8) in seconds, on one process
t0=$(date +%s)
"$PLAN" --model gpt --preset gpt2-xl --ranks 1024 --ranks-per-node 8 --memory 80GiB --batch-size 1024 >"$T/xl.out" 2>&1 ||
    { cat "$T/xl.out"; fail "mpiflow-plan for GPT-2 XL on 1024 ranks: exit $?"; }
took=$(($(date +%s) - t0))
grep -q "28 plans, 28 can run" "$T/xl.out" || { cat "$T/xl.out"; fail "GPT-2 XL on 1024 ranks: not every plan predicted"; }
# about 3 s alone; generous for a machine running two tests at once
[ "$took" -le 30 ] || fail "GPT-2 XL on 1024 ranks took $took s to plan"
echo "ok: GPT-2 XL on 1024 ranks planned in $took s"

# ---- --write: the winner as a plan file trains as its flags do
"$PLAN" $G --ranks 2 --write "$T/best.json" >"$T/w.out" 2>&1 || { cat "$T/w.out"; fail "--write: exit $?"; }
flags=$(sed -n 's/^wrote .* (the same as \(.*\))$/\1/p' "$T/w.out")
case $flags in "("*) flags="" ;; esac
eval "set -- $flags"
# shellcheck disable=SC2086
run_train 2 $G "$@" --steps 4 --log-every 1 --seed 5 --no-eval --metrics "$T/a.csv"
[ "$rc" -eq 0 ] || fail "the best plan's flags ($flags): exit $rc"
# shellcheck disable=SC2086
run_train 2 $G --plan "$T/best.json" --steps 4 --log-every 1 --seed 5 --no-eval --metrics "$T/b.csv"
[ "$rc" -eq 0 ] || fail "--plan best.json: exit $rc"
same_losses "$T/a.csv" "$T/b.csv" "--write's plan against its flags ($flags)" 0
echo "ok: --write's plan trains as '$flags' does"

# ---- --plan auto: tries the leading plans, runs the fastest measured,
# says predicted against measured; the run is the one its flags make
# shellcheck disable=SC2086
run_train 2 $G --plan auto --calibration "$T/cal.txt" --plan-trials 3 --steps 4 --log-every 1 --seed 5 --no-eval \
    --metrics "$T/auto.csv"
[ "$rc" -eq 0 ] || fail "--plan auto: exit $rc"
cp "$TMPDIR_TEST/out" "$T/auto.out"
grep -q "^mpiflow-train: --plan auto: .*predicted .* a step" "$T/auto.out" || fail "--plan auto did not say what it chose"
line=$(grep "^mpiflow-train: --plan auto: ran .*; predicted .* measured" "$T/auto.out")
[ -n "$line" ] || fail "--plan auto did not report predicted against measured"
echo "ok: $line"
# the trial: a table of the leading plans, one of them marked, when there are two or more
tried=$(sed -n 's/^mpiflow-train: --plan auto: tried the \([0-9]*\) leading plans.*/\1/p' "$T/auto.out")
if [ -n "$tried" ]; then
    [ "$(grep -c '^  [* ] .* ms (.* ms)$' "$T/auto.out")" -eq "$tried" ] || { cat "$T/auto.out"; fail "the trial's table"; }
    [ "$(grep -c '^  \* ' "$T/auto.out")" -eq 1 ] || { cat "$T/auto.out"; fail "the trial marked no plan, or several"; }
    echo "ok: --plan auto tried $tried plans"
fi
flags=$(sed -n 's/^mpiflow-train: --plan auto: ran \(.*\); predicted .*/\1/p' "$T/auto.out")
case $flags in "(data parallel)") flags="" ;; esac
case $flags in
"("*) echo "ok: --plan auto ran $flags, a plan no flag spells" ;;
*)
    eval "set -- $flags"
    run_train 2 $G "$@" --steps 4 --log-every 1 --seed 5 --no-eval --metrics "$T/direct.csv"
    [ "$rc" -eq 0 ] || fail "the auto plan's flags ($flags): exit $rc"
    same_losses "$T/auto.csv" "$T/direct.csv" "--plan auto after its trial against '$flags' alone" 0
    ;;
esac
# --plan-trials 0: the prediction alone, no trial
# shellcheck disable=SC2086
run_train 2 $G --plan auto --calibration "$T/cal.txt" --plan-trials 0 --steps 2 --no-eval
[ "$rc" -eq 0 ] || fail "--plan auto --plan-trials 0: exit $rc"
! grep -q "tried the" "$TMPDIR_TEST/out" || fail "--plan-trials 0 still tried plans"
echo "ok: --plan-trials 0 runs the predicted best untried"

# ---- bad input: exit 2, and what to change
expect_bad() {   # expect_bad WHAT PATTERN COMMAND...
    what=$1
    pat=$2
    shift 2
    timeout 60 "$@" >"$T/bad.out" 2>&1
    r=$?
    [ "$r" -eq 2 ] || { cat "$T/bad.out"; fail "$what: exit $r, not 2"; }
    grep -q "$pat" "$T/bad.out" || { cat "$T/bad.out"; fail "$what: no message like '$pat'"; }
    echo "ok: $what: $(grep -m1 error "$T/bad.out")"
}
expect_bad "ranks that do not fill nodes" "not divisible by --ranks-per-node" "$PLAN" $M --ranks 6 --ranks-per-node 4
expect_bad "a budget no plan meets" "the smallest needs .*give --memory" "$PLAN" $M --ranks 4 --memory 1K
expect_bad "an unknown model" "is not one of mlp" "$PLAN" --model nosuch --ranks 4
expect_bad "an unknown preset" "unknown GPT preset" "$PLAN" --model gpt --preset nosuch --ranks 4
printf 'rate gemm x 5\n' >"$T/bad_cal.txt"
expect_bad "a damaged calibration" "bad_cal.txt:1: expected 'rate" "$PLAN" $M --ranks 4 --calibration "$T/bad_cal.txt"
printf 'overhead 2e-6\noverlap 1.5\n' >"$T/bad_overlap.txt"
expect_bad "an overlap past 1" "bad_overlap.txt:2: the overlap must be a fraction from -1 to 1" "$PLAN" $M --ranks 4 \
    --calibration "$T/bad_overlap.txt"
# the measured calibration says how much communication compute hides
grep -q '^overlap [0-9.e-]*$' "$T/cal.txt" || fail "the measured calibration has no overlap line"
printf 'allreduce 4 1 0 nosuch\n' >"$T/bad_tuning.txt"
expect_bad "a damaged tuning file" "tuning" "$PLAN" $M --ranks 4 --tuning "$T/bad_tuning.txt"
expect_bad "a bad --memory" "is not a size\|expected a size" "$PLAN" $M --ranks 4 --memory lots
expect_bad "--memory without --plan auto" "only with --plan auto" "$TRAIN" $M --memory 1G
expect_bad "--plan-trials without --plan auto" "only with --plan auto" "$TRAIN" $M --plan-trials 2
echo "planning: predictions of memory hold on 2 and 4 ranks; plan files, --plan auto and bad input as they should"
