#!/bin/sh
# bench/run_parallel.sh - the global-tensor benchmarks of doc/performance.md:
# boxing against the bare MPI collective on 2 and 4 ranks (bench_boxing),
# and data-parallel training throughput of mlp and lenet on 1 rank
# against 2 (one thread each, Fashion-MNIST, best of ROUNDS alternating
# rounds). Weak scaling keeps the per-rank batch (the global batch
# doubles); strong scaling keeps the global batch.
#   bench/run_parallel.sh [ROUNDS]   (from the build directory, after make)
set -u
case "${1:-}" in
-h | --help)
    sed -n '2,9s/^# \{0,1\}//p' "$0"
    exit 0
    ;;
esac
rounds=${1:-3}
here=$(dirname "$0")
train="$here/../mpiflow-train"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
echo "== $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc --all) cores,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
for np in 2 4; do
    echo "== boxing vs bare MPI, $np ranks (median of 15; overhead = boxing / MPI - 1)"
    mpiexec -n "$np" "$here/bench_boxing" --reps 15
done

sps() {   # sps NP PARALLEL MODEL BATCH STEPS: samples/s of one run
    pin=""
    [ "$1" -eq 1 ] && pin="taskset -c 0"
    $pin mpiexec -n "$1" "$train" --model "$3" --batch-size "$4" --steps "$5" --threads 1 --no-eval \
        --progress lines --prefetch off --parallel "$2" | sed -n 's/^final.*samples_per_sec=//p'
}
best() { sort -n | tail -1; }
echo "== data-parallel training, samples/s (best of $rounds), 1 thread per rank"
printf '%-6s %-8s %10s %10s %12s %10s %10s\n' model scaling batch/rank "1 rank" "2 ranks dp" efficiency "2 indep."
for cfg in "mlp 64 400" "mlp 256 150" "lenet 64 40"; do
    # shellcheck disable=SC2086
    set -- $cfg
    for kind in weak strong; do
        : >/tmp/mf_one.$$ ; : >/tmp/mf_two.$$ ; : >/tmp/mf_ind.$$
        gb=$2
        [ "$kind" = weak ] && gb=$(($2 * 2))
        i=0
        while [ "$i" -lt "$rounds" ]; do
            sps 1 none "$1" "$2" "$3" >>/tmp/mf_one.$$
            sps 2 dp "$1" "$gb" "$3" >>/tmp/mf_two.$$
            if [ "$kind" = weak ]; then   # the hardware's ceiling: two independent 1-rank runs at once
                a=$(taskset -c 1 "$train" --model "$1" --batch-size "$2" --steps "$3" --threads 1 --no-eval \
                    --progress lines --prefetch off | sed -n 's/^final.*samples_per_sec=//p' &
                    taskset -c 0 "$train" --model "$1" --batch-size "$2" --steps "$3" --threads 1 --no-eval \
                    --progress lines --prefetch off >/dev/null; wait)
                echo "$a" >>/tmp/mf_ind.$$
            fi
            i=$((i + 1))
        done
        one=$(best </tmp/mf_one.$$) two=$(best </tmp/mf_two.$$) ind=$(best </tmp/mf_ind.$$)
        per=$2
        [ "$kind" = strong ] && per="$(($2 / 2))"
        eff=$(awk -v a="$one" -v b="$two" -v k="$kind" 'BEGIN { printf "%.2f", k == "weak" ? b / (2 * a) : b / (2 * a) }')
        printf '%-6s %-8s %10s %10s %12s %10s %10s\n' "$1" "$kind" "$per" "$one" "$two" "$eff" \
            "${ind:+$(awk -v a="$one" -v b="$ind" 'BEGIN { printf "%.2f", b / a }')}"
    done
done
rm -f /tmp/mf_one.$$ /tmp/mf_two.$$ /tmp/mf_ind.$$
echo "efficiency = 2-rank samples/s / (2 x 1-rank samples/s); '2 indep.' = one of two independent"
echo "1-rank runs sharing the machine, over a 1-rank run alone: the memory-bandwidth ceiling"
