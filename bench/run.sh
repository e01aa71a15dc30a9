#!/bin/sh
# bench/run.sh - the CPU benchmarks recorded in doc/performance.md, in one
# run: this CPU's FMA peak per ISA (bench_peak); mlp and lenet training
# throughput, and the GPT of the 10m preset's tokens/s, on each CPU engine
# (oneDNN, OpenBLAS) and in bf16 where the CPU has it, against the same
# models in PyTorch (when python3-torch is
# installed); the GFLOP/s of GEMMs and convolutions inside training as a
# share of the peak of the ISA each engine uses; conv2d against bare
# OpenBLAS sgemm and the peak, per engine. The programs take turns in
# every round and the tables give the median and the range over rounds
# (this machine is noisy); a rate above the measured peak is marked
# INVALID. One-thread runs are pinned to one core with taskset.
#   bench/run.sh [ROUNDS]        (from the build directory, after make)
set -u
case "${1:-}" in
-h | --help)
    sed -n '2,12s/^# \{0,1\}//p' "$0"
    exit 0
    ;;
esac
rounds=${1:-5}
here=$(dirname "$0")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
have_torch=0
/usr/bin/python3 -c 'import torch' 2>/dev/null && have_torch=1
engines="onednn openblas"
"$here/bench_train" --engine onednn --model mlp --steps 1 --warmup 0 --repeat 1 >/dev/null 2>&1 || engines=openblas
bf16=0
"$here/bench_train" --bf16 --model mlp --steps 1 --warmup 0 --repeat 1 >/dev/null 2>&1 && bf16=1
echo "== $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
echo "   OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-(unset)}; engines: $engines; native bf16: $([ $bf16 -eq 1 ] && echo yes || echo no)"

# the peak: register-only FMA loops, best of 5, before and after the rounds
peak() {
    taskset -c 0 "$here/bench_peak" --threads 1 | tail -n +2 >>"$tmp/peak"
    "$here/bench_peak" --threads 2 | tail -n +2 >>"$tmp/peak"
}
peak
i=1
while [ "$i" -le "$rounds" ]; do
    for t in 1 2; do
        pin=""
        [ "$t" -eq 1 ] && pin="taskset -c 0"
        for e in $engines; do
            $pin "$here/bench_train" --engine "$e" --threads "$t" | tail -n +2 | sed "s/^/$e /" >>"$tmp/mf"
        done
        [ "$bf16" -eq 1 ] && $pin "$here/bench_train" --bf16 --threads "$t" | tail -n +2 | sed "s/^/onednn-bf16 /" >>"$tmp/mf"
        [ "$have_torch" -eq 1 ] && $pin /usr/bin/python3 "$here/torch_train.py" --threads "$t" | tail -n +2 | sed "s/^/pytorch /" >>"$tmp/mf"
        # the GPT, as bench_train's columns (attention in the conv columns' place)
        gpt="train --preset 10m --threads $t --repeat 2"
        for e in $engines; do
            # shellcheck disable=SC2086
            MF_CPU_ENGINE=$e $pin "$here/bench_gpt" $gpt | tail -n +2 |
                awk -v e="$e" '{ print e, $1, $2, $3, $5, $6, $7, $8, $9, 0, $10 }' >>"$tmp/mf"
        done
        # shellcheck disable=SC2086
        [ "$bf16" -eq 1 ] && $pin "$here/bench_gpt" $gpt --bf16 | tail -n +2 |
            awk '{ print "onednn-bf16", $1, $2, $3, $5, $6, $7, $8, $9, 0, $10 }' >>"$tmp/mf"
        # shellcheck disable=SC2086
        [ "$have_torch" -eq 1 ] && $pin /usr/bin/python3 "$here/torch_gpt.py" $gpt | tail -n +2 |
            awk '{ print "pytorch", $1, $2, $3, $5 }' >>"$tmp/mf"
    done
    i=$((i + 1))
done
peak
echo "== FMA peak per core set (GFLOP/s; bf16: 2 FLOPs per bfloat16 multiply-add), best of 10 tries"
awk '{ k = $1 " " $2; if ($3 > p[k]) p[k] = $3; if (!(k in seen)) { seen[k] = 1; o[++n] = k } }
     END { printf "%-12s %7s %10s\n", "isa", "threads", "GFLOP/s"; for (i = 1; i <= n; i++) { split(o[i], a, " "); printf "%-12s %7s %10.1f\n", a[1], a[2], p[o[i]] } }' "$tmp/peak" | tee "$tmp/peak.best"

# one stats line per metric: engine model threads value
# bench_train: engine model threads batch samples/s gemm% conv% other% gemmGF convGF isa
awk '{ gsub(/%/, ""); k = $1 " " $2 " " $3; print "sps", k, $5
       if (NF >= 11) { print "gemm", k, $6; print "conv", k, $7; print "other", k, $8; print "ggf", k, $9; print "cgf", k, $10; isa[k] = $11 } }
     END { for (k in isa) print "isa", k, isa[k] > "/dev/stderr" }' "$tmp/mf" 2>"$tmp/isa" | awk -f "$here/stats.awk" >"$tmp/stats"
echo "== training samples/s (mlp, lenet: batch 128, SGD, Fashion-MNIST) and tokens/s (10m: the GPT preset, batch 8,"
echo "   T 256, AdamW, random tokens); median [min-max] of $rounds rounds"
echo "   x torch: against PyTorch's median; x fp32: bf16 against fp32 on oneDNN; gemm/conv GF/s: inside training"
echo "   (profiled window, median), with their share of the FMA peak of the engine's ISA at that thread count;"
echo "   for 10m the conv% column is attention's share"
awk '
    FILENAME ~ /peak.best$/ { if (FNR > 1) peak[$1 " " $2] = $3; next }
    FILENAME ~ /isa$/ { isa[$2 " " $3 " " $4] = $5; next }
    { k = $2 " " $3 " " $4; med[$1, k] = $5; lo[$1, k] = $6; hi[$1, k] = $7; if ($1 == "sps") { have[k] = 1 } }
    function share(gf, k, t,    p) {
        p = peak[isa[k] " " t]
        if (gf == "" || gf + 0 == 0) return sprintf("%9s %6s", "-", "")
        if (p == "" || p == 0) return sprintf("%9.1f %6s", gf, "?")
        return sprintf("%9.1f %5.0f%%", gf, 100 * gf / p) (gf > p ? " INVALID" : "")
    }
    END {
        printf "%-6s %3s %-12s %22s %8s %8s %16s %16s %6s %6s %6s %s\n", "model", "thr", "engine", "samples/s", "x torch",
               "x fp32", "gemm GF/s", "conv GF/s", "gemm%", "conv%", "other%", "peak isa"
        split("mlp lenet 10m", models, " ")
        split("onednn openblas onednn-bf16 pytorch", engs, " ")
        for (m = 1; m <= 3; m++) for (t = 1; t <= 2; t++) for (e = 1; e <= 4; e++) {
            k = engs[e] " " models[m] " " t
            if (!(k in have)) continue
            tk = "pytorch " models[m] " " t
            xt = engs[e] != "pytorch" && (tk in have) ? sprintf("%.2fx", med["sps", k] / med["sps", tk]) : "-"
            fk = "onednn " models[m] " " t
            xf = engs[e] == "onednn-bf16" && (fk in have) ? sprintf("%.2fx", med["sps", k] / med["sps", fk]) : "-"
            r = sprintf("%.0f [%.0f-%.0f]", med["sps", k], lo["sps", k], hi["sps", k])
            if (engs[e] == "pytorch") {
                printf "%-6s %3d %-12s %22s %8s %8s\n", models[m], t, engs[e], r, xt, xf
                continue
            }
            printf "%-6s %3d %-12s %22s %8s %8s %16s %16s %5.1f%% %5.1f%% %5.1f%% %s\n", models[m], t, engs[e], r, xt, xf,
                   share(med["ggf", k], k, t), share(med["cgf", k], k, t), med["gemm", k], med["conv", k],
                   med["other", k], isa[k]
        }
    }' "$tmp/peak.best" "$tmp/isa" "$tmp/stats"

for t in 1 2; do
    pin=""
    [ "$t" -eq 1 ] && pin="taskset -c 0"
    for e in $engines onednn-bf16; do
        flag="--engine $e"
        if [ "$e" = onednn-bf16 ]; then
            [ "$bf16" -eq 1 ] || continue
            flag=--bf16
        fi
        # the best peak of the whole run, for the ISA this engine uses
        p=$(awk -v e="$e" -v t="$t" 'FILENAME ~ /isa$/ { if ($2 == e) isa = $5; next } $1 == isa && $2 == t { print $3 }' \
            "$tmp/isa" "$tmp/peak.best")
        echo "== conv2d vs OpenBLAS sgemm and the peak, $t thread(s), $e"
        # shellcheck disable=SC2086
        $pin "$here/bench_conv" --threads "$t" $flag ${p:+--peak "$p"}
    done
done
