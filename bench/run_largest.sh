#!/bin/sh
# bench/run_largest.sh - the largest GPT that trains on this machine
# under each scheme on 4 ranks: data parallel, and ZeRO-3 with block
# recompute. Each rank may hold its share of the memory (MemTotal x 0.8
# / 4, or LIMIT): the allocator refuses past it (MF_MEMORY_LIMIT). The
# model grows in n_layer and n_embd (heads of 64) until a step fails;
# each try is bench_memory's three AdamW steps, batch 4 x 64 tokens,
# vocabulary 8192. Recorded in doc/performance.md.
#   bench/run_largest.sh [LIMIT [SCHEMES]]   e.g. 1G "dp zero3+rc-block"; from the build directory
set -u
case "${1:-}" in
-h | --help)
    sed -n '2,9s/^# \{0,1\}//p' "$0"
    exit 0
    ;;
esac
here=$(dirname "$0")
np=4
if [ -n "${1:-}" ]; then
    limit=$1
else
    kib=$(awk '/^MemTotal:/ { print $2 }' /proc/meminfo)
    limit="$((kib * 8 / 10 / np / 1024))M"
fi
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MF_TIMEOUT=600
echo "== $(date -u '+%Y-%m-%d %H:%M UTC'), $(getconf _NPROCESSORS_ONLN) cores, $np ranks, MF_MEMORY_LIMIT=$limit per rank"
printf '%-18s %4s %5s %9s  %-9s %9s %9s  %s\n' scheme L C params result "peak MiB" tokens/s "(what stopped it)"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for scheme in ${2:-dp zero3+rc-block}; do
    flags=""
    [ "$scheme" = dp ] || flags="--zero 3 --recompute block"
    last=""
    for size in 4x256 4x512 8x512 8x768 12x768 12x1024 16x1024 16x1280 24x1280 24x1536 32x1536 32x2048 48x2048 48x2560; do
        L=${size%x*} C=${size#*x}
        params=$(awk -v L="$L" -v C="$C" 'BEGIN { printf "%.1fM", (12 * L * C * C + 13 * L * C + (8192 + 64 + 2) * C) / 1e6 }')
        # shellcheck disable=SC2086
        MF_MEMORY_LIMIT=$limit mpiexec -n "$np" "$here/bench_memory" --n-layer "$L" --n-embd "$C" --n-head $((C / 64)) \
            --seq-len 64 --batch 4 --vocab 8192 --steps 1 $flags >"$out" 2>&1
        rc=$?
        row=$(grep -v '^$' "$out" | grep -E '^(dp|zero)' | tail -1)
        if [ "$rc" -eq 0 ] && [ -n "$row" ]; then
            peak=$(echo "$row" | awk '{ print $(NF-3) }')
            tps=$(echo "$row" | awk '{ print $(NF-1) }')
            printf '%-18s %4s %5s %9s  %-9s %9s %9s\n' "$scheme" "$L" "$C" "$params" trains "$peak" "$tps"
            last="$L x $C ($params)"
        else
            why=$(grep -m1 -o 'out of memory.*' "$out" | cut -c1-150)
            [ -n "$why" ] || why="exit $rc: $(tail -1 "$out" | cut -c1-120)"
            printf '%-18s %4s %5s %9s  %-9s %9s %9s  %s\n' "$scheme" "$L" "$C" "$params" refused - - "$why"
            break
        fi
    done
    echo "-> $scheme: largest that trains: ${last:-none}"
done
