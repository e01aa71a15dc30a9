#!/bin/sh
# bench/run_compare.sh - the throughput of two builds of mpiflow side by
# side, taking turns in every round (this machine is noisy, so the ratio
# of medians means more than either rate): bench_train's mlp and LeNet
# and bench_gpt's 10m GPT on one pinned thread, and mpiflow-train on 2
# ranks (LeNet data parallel, the char GPT with ZeRO-3, with tensor
# parallelism and as 2 pipeline stages). Prints, per workload, each
# build's median rate, its range and after / before.
#   bench/run_compare.sh BEFORE_BUILD_DIR AFTER_BUILD_DIR [ROUNDS]
set -u
case "${1:-}" in
-h | --help | "")
    sed -n '2,10s/^# \{0,1\}//p' "$0"
    exit 0
    ;;
esac
before=$1 after=$2 rounds=${3:-3}
here=$(dirname "$0")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
printf 'alpha beta gamma delta epsilon zeta eta theta iota kappa\n%.0s' $(seq 400) >"$tmp/text.txt"
G="--model gpt --dataset text:$tmp/text.txt --steps 12 --batch-size 8 --threads 1 --log-every 100 --no-eval --progress lines"
I="--dataset synthetic --synthetic-size 2048,64 --steps 24 --batch-size 64 --threads 1 --log-every 100 --no-eval --progress lines"
echo "== $(date -u '+%Y-%m-%d %H:%M UTC'), $(getconf _NPROCESSORS_ONLN) cores,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
rate() {   # rate TAG BUILD CMD...: appends "TAG BUILD RATE"
    tag=$1 b=$2
    shift 2
    r=$("$@" 2>/dev/null | awk '/samples_per_sec=|tokens_per_sec=/ { for (i = 1; i <= NF; i++) if ($i ~ /_per_sec=/) { split($i, a, "="); print a[2] } }
                                $1 == "mlp" || $1 == "lenet" { print $4 } $1 == "10m" { print $5 }' | tail -n 1)
    echo "$tag $b ${r:-0}" >>"$tmp/r"
}
i=1
while [ "$i" -le "$rounds" ]; do
    for b in before after; do
        d=$before
        [ $b = after ] && d=$after
        rate "mlp,1thread" $b taskset -c 0 "$d/bench/bench_train" --model mlp --threads 1
        rate "lenet,1thread" $b taskset -c 0 "$d/bench/bench_train" --model lenet --threads 1
        rate "gpt-10m,1thread" $b taskset -c 0 "$d/bench/bench_gpt" train --preset 10m --threads 1 --repeat 2
        # shellcheck disable=SC2086
        rate "lenet,dp2" $b mpiexec -n 2 "$d/mpiflow-train" $I --model lenet
        # shellcheck disable=SC2086
        rate "gpt-char,zero3" $b mpiexec -n 2 "$d/mpiflow-train" $G --zero 3
        # shellcheck disable=SC2086
        rate "gpt-char,tp2+sp" $b mpiexec -n 2 "$d/mpiflow-train" $G --tensor-parallel 2 --sequence-parallel
        # shellcheck disable=SC2086
        rate "gpt-char,pp2" $b mpiexec -n 2 "$d/mpiflow-train" $G --pipeline-stages 2
    done
    i=$((i + 1))
done
awk '{ print $1, $2, $3 }' "$tmp/r" | awk -f "$here/stats.awk" >"$tmp/s"
printf '%-18s %22s %22s %12s\n' workload "before (median, range)" "after (median, range)" "after/before"
awk '{ m[$1, $2] = $3; lo[$1, $2] = $4; hi[$1, $2] = $5; if (!($1 in seen)) { seen[$1] = 1; o[++n] = $1 } }
     END { for (i = 1; i <= n; i++) { k = o[i]
               r = m[k, "before"] > 0 ? m[k, "after"] / m[k, "before"] : 0
               printf "%-18s %8.0f (%5.0f-%5.0f) %8.0f (%5.0f-%5.0f) %12.3f\n", k, m[k, "before"], lo[k, "before"],
                      hi[k, "before"], m[k, "after"], lo[k, "after"], hi[k, "after"], r } }' "$tmp/s"
