#!/bin/sh
# bench/run_plan_memory.sh NAME RANKS MODELFLAGS...: every plan mpiflow-plan
# lists for the model on RANKS ranks, trained 3 steps with mpiflow-train:
# the predicted peak memory per rank against the measured one, and the
# peak's parts (ZeRO gathers, communication buffers, logits, size-class
# slack, the gradients alive) predicted against measured (doc/planning.md). Memory does not
# depend on the machine's load, so this is quick where bench/run_plan.sh
# (which also times every plan) is not. Run from the build directory:
#
#   sh bench/run_plan_memory.sh ViT 4 --model vit --dataset synthetic --synthetic-size 2048,64 --batch-size 64
set -u
[ $# -ge 3 ] || { echo "usage: $0 NAME RANKS MODELFLAGS..." >&2; exit 2; }
name=$1
np=$2
shift 2
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MF_THREADS=1
T=$(mktemp -d "${TMPDIR:-/tmp}/mf_planmem.XXXXXX")
trap 'rm -rf "$T"' EXIT
MPIEXEC=${MPIEXEC:-mpiexec}
./mpiflow-plan "$@" --ranks "$np" --tsv >"$T/grid" || { echo "mpiflow-plan failed" >&2; exit 1; }
echo "## $name on $np ranks: peak MiB per rank, predicted against measured"
printf '%-72s %9s %9s %6s  %s\n' plan pred meas ratio "parts: gathers,buffers,logits,slack,gradients (predicted | measured)"
i=0
# shellcheck disable=SC2034  # the fields not shown
while IFS="$(printf '\t')" read -r flags dp tp pp ok step peak params grads optim ga cb lg sl gpeak json <&3; do
    [ "$ok" = 1 ] || continue
    i=$((i + 1))
    if [ -n "$json" ]; then
        printf '%s\n' "$json" >"$T/plan$i.json"
        f="--plan $T/plan$i.json"
    else
        f=$flags
        case $f in "("*) f="" ;; esac
    fi
    out=$(eval "\"$MPIEXEC\" -n $np ./mpiflow-train $* $f --steps 3 --no-eval --progress lines --log-every 3" </dev/null 2>&1 | tail -1)
    m=$(echo "$out" | sed -n 's/.*peak_mib=\([0-9.]*\) peak_parts_mib=\([0-9.,]*\).*/\1 \2/p')
    [ -n "$m" ] || { printf '%-72s failed: %s\n' "$flags" "$out"; continue; }
    printf '%s\t%s\t%s,%s,%s,%s,%s\t%s\n' "$flags" "$peak" "$ga" "$cb" "$lg" "$sl" "$gpeak" "$m"
done 3<"$T/grid" | awk -F '\t' '
    NF < 4 { print; next }
    {
        M = 1048576; p = $2 / M; split($4, g, " "); split($3, q, ","); r = g[1] / p
        printf "%-72s %9.3f %9.3f %6.3f  %.3f,%.3f,%.3f,%.3f,%.3f | %s\n", $1, p, g[1], r, q[1] / M, q[2] / M, q[3] / M, q[4] / M, q[5] / M, g[2]
        n++; if (r > 0.999 && r < 1.001) ok++
    }
    END { printf "%d of %d plans within 0.1 %%\n", ok, n }'
