#!/bin/sh
# bench/run_gpt.sh - the GPT benchmarks recorded in doc/performance.md,
# in one run: training tokens/s of the 10m preset (6 layers, 384 wide,
# T 256, batch 8) and of GPT-2 small (T 1024, batch 1) in mpiflow and in
# PyTorch, alternating rounds, at 1 thread (pinned to one core) and 2;
# mpiflow's time split; fused against unfused attention; the peak memory
# of a GPT-2 step at batch 4.
#   bench/run_gpt.sh [ROUNDS]      (from the build directory, after make)
set -u
case "${1:-}" in
-h | --help)
    sed -n '2,8s/^# \{0,1\}//p' "$0"
    exit 0
    ;;
esac
rounds=${1:-2}
here=$(dirname "$0")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
have_torch=0
/usr/bin/python3 -c 'import torch' 2>/dev/null && have_torch=1
echo "== $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
for preset in 10m gpt2; do
    i=1
    while [ "$i" -le "$rounds" ]; do
        for t in 1 2; do
            pin=""
            [ "$t" -eq 1 ] && pin="taskset -c 0"
            $pin "$here/bench_gpt" train --preset "$preset" --threads "$t" | tail -n +2 >>"$tmp/mf"
            [ "$have_torch" -eq 1 ] &&
                $pin /usr/bin/python3 "$here/torch_gpt.py" train --preset "$preset" --threads "$t" | tail -n +2 >>"$tmp/pt"
        done
        i=$((i + 1))
    done
done
[ -f "$tmp/pt" ] || : >"$tmp/pt"
echo "== GPT training tokens/s, AdamW, random tokens; best of $rounds rounds"
echo "   (gemm%/attn%/other%: mpiflow's time split in a profiled window)"
awk '
    FNR == 1 { file++ }
    file == 1 { k = $1 " " $2; if ($5 > mf[k]) { mf[k] = $5; split_[k] = $6 " " $7 " " $8; bt[k] = $3 " " $4 } keys[k] = 1 }
    file == 2 { k = $1 " " $2; if ($5 > pt[k]) pt[k] = $5 }
    END {
        printf "%-6s %7s %5s %5s %10s %10s %7s %7s %7s %7s\n", "model", "threads", "batch", "T", "mpiflow", "pytorch", "ratio",
               "gemm%", "attn%", "other%"
        n = split("10m 1,10m 2,gpt2 1,gpt2 2", order, ",")
        for (i = 1; i <= n; i++) {
            k = order[i]
            if (!(k in keys)) continue
            split(k, kk, " "); split(split_[k], s, " "); split(bt[k], b, " ")
            r = (k in pt) ? sprintf("%.2fx", mf[k] / pt[k]) : "-"
            printf "%-6s %7s %5s %5s %10.0f %10s %7s %7s %7s %7s\n", kk[1], kk[2], b[1], b[2], mf[k],
                   (k in pt) ? sprintf("%.0f", pt[k]) : "-", r, s[1], s[2], s[3]
        }
    }' "$tmp/mf" "$tmp/pt"
echo "== fused vs unfused causal attention, forward + backward, batch 1, 2 threads"
"$here/bench_gpt" attention --threads 2
echo "== peak memory of a GPT-2 step (T 1024, batch 4), 2 threads"
"$here/bench_gpt" memory --preset gpt2 --batch 4
[ "$have_torch" -eq 1 ] && /usr/bin/python3 "$here/torch_gpt.py" memory --preset gpt2 --batch 4 --threads 2 | tail -n +2
exit 0
