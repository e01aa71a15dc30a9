#!/bin/sh
# bench/run.sh - the benchmarks recorded in doc/performance.md, in one
# run: mpiflow training throughput and GEMM share, the same models in
# PyTorch (when Debian's python3-torch is installed), and conv2d against
# bare OpenBLAS sgemm. This machine is noisy, so mpiflow and PyTorch run
# in alternating rounds and each keeps its best round. One-thread runs
# are pinned to one core with taskset: without it PyTorch sometimes ran
# faster than one core can (its pthread OpenBLAS and thread pools do not
# all obey the thread count), and mpiflow would use the spare core to
# prefetch data.
#   bench/run.sh [ROUNDS]        (from the build directory, after make)
set -u
case "${1:-}" in
-h | --help)
    sed -n '2,10s/^# \{0,1\}//p' "$0"
    exit 0
    ;;
esac
rounds=${1:-3}
here=$(dirname "$0")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
have_torch=0
/usr/bin/python3 -c 'import torch' 2>/dev/null && have_torch=1
echo "== $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
i=1
while [ "$i" -le "$rounds" ]; do
    for t in 1 2; do
        pin=""
        [ "$t" -eq 1 ] && pin="taskset -c 0"
        $pin "$here/bench_train" --threads "$t" | tail -n +2 >>"$tmp/mf"
        [ "$have_torch" -eq 1 ] && $pin /usr/bin/python3 "$here/torch_train.py" --threads "$t" | tail -n +2 >>"$tmp/pt"
    done
    i=$((i + 1))
done
[ -f "$tmp/pt" ] || : >"$tmp/pt"
echo "== training samples/s, batch 128, SGD, Fashion-MNIST; best of $rounds rounds"
echo "   (1 thread: pinned to one core; gemm%/conv%/other%: mpiflow's time split in its best round)"
awk '
    FNR == 1 { file++ }
    file == 1 { k = $1 " " $2; if ($4 > mf[k]) { mf[k] = $4; split_[k] = $5 " " $6 " " $7 } keys[k] = 1 }
    file == 2 { k = $1 " " $2; if ($4 > pt[k]) pt[k] = $4 }
    END {
        printf "%-6s %7s %12s %12s %8s %8s %8s %8s\n", "model", "threads", "mpiflow", "pytorch", "ratio", "gemm%", "conv%", "other%"
        n = split("mlp 1,mlp 2,lenet 1,lenet 2", order, ",")
        for (i = 1; i <= n; i++) {
            k = order[i]
            if (!(k in keys)) continue
            split(k, kk, " ")
            split(split_[k], s, " ")
            r = (k in pt) ? sprintf("%.2fx", mf[k] / pt[k]) : "-"
            printf "%-6s %7s %12.0f %12s %8s %8s %8s %8s\n", kk[1], kk[2], mf[k], (k in pt) ? sprintf("%.0f", pt[k]) : "-", r, s[1], s[2], s[3]
        }
    }' "$tmp/mf" "$tmp/pt"
for t in 1 2; do
    echo "== conv2d vs OpenBLAS sgemm, $t thread(s)"
    "$here/bench_conv" --threads "$t"
done
