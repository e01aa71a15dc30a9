#!/bin/sh
# bench/run_plan.sh [RANKS] [STEPS] [ROUNDS]: every plan mpiflow-plan
# lists for LeNet, the ViT and the GPT 10m preset on RANKS ranks (default
# 4), run for real: predicted against measured step time and peak memory
# per rank, side by side (doc/planning.md, doc/performance.md).
#
#   1. mpiflow-bench calibrate on RANKS ranks (the rates the predictions use);
#   2. per model, mpiflow-plan --tsv: every plan with its prediction, and
#      the search's time;
#   3. each plan that can run, trained STEPS steps (default 12) ROUNDS
#      times (default 3) with mpiflow-train, the rounds interleaved (every
#      plan once, then every plan again): the median of the rounds' median
#      steps (step_ms, the first step left out), peak_mib, and the rounds'
#      spread;
#   4. mpiflow-train --plan auto run for real (its trial of the leading
#      plans included), at no memory limit and at a limit below plain
#      data parallel's predicted peak: the plan it ran, and that plan's
#      place among the grid's measured plans that fit.
# Run from the build directory. Takes a while: about STEPS x ROUNDS steps
# for each of some 100 plans. MODELS="LeNet ViT" runs only those models
# (default: LeNet ViT GPT).
set -u
np=${1:-4}
steps=${2:-12}
rounds=${3:-3}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MF_THREADS=1
T=$(mktemp -d "${TMPDIR:-/tmp}/mf_plan.XXXXXX")
trap 'rm -rf "$T"' EXIT
MPIEXEC=${MPIEXEC:-mpiexec}

echo "# bench/run_plan.sh $np $steps $rounds: $(date -u +%Y-%m-%d), $(nproc --all) core(s), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
"$MPIEXEC" -n "$np" ./mpiflow-bench calibrate --out "$T/cal.txt" | sed 's/^/# /'

models=${MODELS:-LeNet ViT GPT}
bench_model() {   # bench_model NAME FLAGS...
    name=$1
    shift
    case " $models " in *" ${name%% *} "*) ;; *) return ;; esac
    t0=$(date +%s.%N)
    ./mpiflow-plan "$@" --ranks "$np" --calibration "$T/cal.txt" --tsv >"$T/grid" || { echo "mpiflow-plan failed"; return; }
    t1=$(date +%s.%N)
    echo
    echo "## $name on $np ranks: $(wc -l <"$T/grid") plans, searched in $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }') s"
    printf '%-64s %10s %10s %14s %6s %10s %10s %6s\n' plan pred_ms meas_ms spread meas/pred pred_MiB meas_MiB ratio
    : >"$T/measured"
    # the plans that run, each as mpiflow-train flags
    n=0
    # shellcheck disable=SC2034  # the fields not used here
    while IFS="$(printf '\t')" read -r flags dp tp pp ok step peak params grads optim gathers commbuf logits slack gpeak json <&3; do
        [ "$ok" = 1 ] || continue
        n=$((n + 1))
        f=$flags
        case $f in "("*) f="" ;; esac
        # a searched layout no flag spells runs from its plan file
        if [ -n "$json" ]; then
            printf '%s\n' "$json" >"$T/searched$n.json"
            f="--plan $T/searched$n.json"
        fi
        printf '%s\n' "$f" >"$T/flags$n"
        : >"$T/rounds$n"
    done 3<"$T/grid"
    # the rounds interleaved, every plan once a round, so that a slower
    # spell of the host falls on all plans alike
    r=0
    while [ $r -lt "$rounds" ]; do
        i=0
        while [ $i -lt $n ]; do
            i=$((i + 1))
            f=$(cat "$T/flags$i")
            # shellcheck disable=SC2086
            eval "\"$MPIEXEC\" -n $np ./mpiflow-train $* $f --steps $steps --no-eval --progress lines --log-every $steps" \
                </dev/null >"$T/out$i" 2>&1
            sed -n 's/.* step_ms=\([0-9.]*\) peak_mib=\([0-9.]*\).*/\1 \2/p' "$T/out$i" >>"$T/rounds$i"
        done
        r=$((r + 1))
    done
    i=0
    # shellcheck disable=SC2034  # the fields not shown
    while IFS="$(printf '\t')" read -r flags dp tp pp ok step peak params grads optim gathers commbuf logits slack gpeak json <&3; do
        [ "$ok" = 1 ] || continue
        i=$((i + 1))
        f=$(cat "$T/flags$i")
        [ -s "$T/rounds$i" ] || { printf '%-64s %10s\n' "$flags" "failed: $(tail -1 "$T/out$i")"; continue; }
        # the median of the rounds' median steps, and their spread
        sort -n "$T/rounds$i" | awk -v f="$flags" -v ps="$step" -v pb="$peak" '
            { t[NR] = $1; m = $2 }
            END {
                med = NR % 2 ? t[(NR + 1) / 2] : (t[NR / 2] + t[NR / 2 + 1]) / 2; pm = ps * 1000; pmib = pb / 1048576
                printf "%-64s %10.2f %10.2f %6.2f..%-6.2f %6.2f %10.3f %10.3f %6.3f\n", f, pm, med, t[1], t[NR],
                       med / pm, pmib, m, m / pmib
            }'
        printf '%s\t%s\t%s\n' "$flags" "$(sort -n "$T/rounds$i" | awk '{ t[NR] = $1 }
            END { print NR % 2 ? t[(NR + 1) / 2] : (t[NR / 2] + t[NR / 2 + 1]) / 2 }')" "$peak" >>"$T/measured"
    done 3<"$T/grid"
    # the auto plan: mpiflow-train --plan auto for real (its trial of the
    # leading plans included), placed among the grid's measured times
    auto_run "" "$@"
    # a budget below data parallel's predicted peak
    dp=$(awk -F '\t' '$1 == "(data parallel)" { print $7 }' "$T/grid")
    [ -n "$dp" ] && auto_run $((dp * 9 / 10)) "$@"
}

# auto_run BUDGET MODELFLAGS: mpiflow-train --plan auto (--memory BUDGET
# unless empty); the plan it ran, its trial, and that plan's place among
# the grid's measured plans that fit the budget
auto_run() {
    budget=$1
    shift
    mem=${budget:+--memory $budget}
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086
    eval "\"$MPIEXEC\" -n $np ./mpiflow-train $* --plan auto --calibration $T/cal.txt $mem --steps $steps --no-eval \
        --progress lines --log-every $steps" </dev/null >"$T/auto" 2>&1
    took=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    a=$(sed -n 's/^mpiflow-train: --plan auto: ran \(.*\); predicted .*/\1/p' "$T/auto")
    if [ -z "$a" ]; then
        echo "auto plan${budget:+ under $budget bytes}: $(grep -m1 error "$T/auto" || tail -1 "$T/auto")"
        return
    fi
    sed -n 's/^mpiflow-train: --plan auto: \(tried .*\)/\1/p; /^  [* ] .* ms (.* ms)$/p' "$T/auto"
    if [ -n "$budget" ]; then
        ./mpiflow-plan "$@" --ranks "$np" --calibration "$T/cal.txt" --memory "$budget" --tsv >"$T/grid2"
        awk -F '\t' -v b="$budget" 'NR == FNR { if ($5 == 1 && $7 <= b) fit[$1] = 1; next } ($1 in fit)' "$T/grid2" \
            "$T/measured" >"$T/fit"
    else
        cp "$T/measured" "$T/fit"
    fi
    sort -t "$(printf '\t')" -k2 -g "$T/fit" | awk -F '\t' -v a="$a" -v b="$budget" -v s="$took" '
        NR == 1 { best = $2; bf = $1 } $1 == a { place = NR; at = $2 }
        END { if (b != "") printf "budget %.3f MiB (below data parallel): ", b / 1048576
              printf "auto plan: %s (%.1f s with its trial), measured %.2f ms in the grid, place %d of %d; the best: %s, %.2f ms (auto %.1f %% slower)\n",
                     a, s, at, place, NR, bf, best, 100 * (at / best - 1) }'
}

bench_model "LeNet" --model lenet --dataset synthetic --synthetic-size 2048,64 --batch-size 64
bench_model "ViT" --model vit --dataset synthetic --synthetic-size 2048,64 --batch-size 64
bench_model "GPT 10m" --model gpt --preset 10m --dataset text:/usr/share/games/fortunes --batch-size 16
