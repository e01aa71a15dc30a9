#!/bin/sh
# The pipeline figures of doc/performance.md:
#   bench/run_pipeline.sh [STEPS]
# 1. bench/bench_pipeline on 2 ranks: equal stages of Linear(512,512)+ReLU
#    blocks, batch 2048, M = 1..32 micro-batches, GPipe and 1F1B: step
#    time, the measured bubble against (P-1)/(M+P-1), stage 0's peak
#    memory, and the speed-up over the whole model on one rank;
# 2. LeNet in mpiflow-train for STEPS steps (default 40): one rank, data
#    parallel on 2, and 2 pipeline stages at three cuts, with each
#    stage's compute time from the --trace file (python3, if present).
# Run from the build directory, with nothing else using the CPUs.
set -eu
steps=${1:-40}
mpiexec=${MPIEXEC:-mpiexec}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
$mpiexec -n 2 bench/bench_pipeline --batch 2048 --steps 5 --micro 1,2,4,8,16,32
echo
dir=$(mktemp -d /tmp/mf_bench_pipe.XXXXXX)
printf '%-46s %10s %18s\n' "lenet, batch 64, 1 thread per rank" "samples/s" "busy ms (stage 0/1)"
for cfg in "1:" "2:--parallel dp" "2:--pipeline-stages 2 --micro-batches 8" "2:--pipeline-cuts 3 --micro-batches 8" \
    "2:--pipeline-cuts 4 --micro-batches 8" "2:--pipeline-cuts 4 --micro-batches 8 --schedule gpipe"; do
    n=${cfg%%:*}
    args=${cfg#*:}
    # shellcheck disable=SC2086
    $mpiexec -n "$n" ./mpiflow-train --model lenet --dataset synthetic --steps "$steps" --batch-size 64 --no-eval \
        --progress lines --log-every 1000 --threads 1 $args --trace "$dir/t.json" >"$dir/out" 2>&1
    sps=$(sed -n 's/.*samples_per_sec=\([0-9]*\).*/\1/p' "$dir/out")
    busy=-
    if command -v python3 >/dev/null && [ "$n" = 2 ] && [ "${args#--parallel}" = "$args" ]; then
        busy=$(python3 -c '
import json, sys
b = {}
for e in json.load(open(sys.argv[1])):
    if e.get("ph") == "X" and e["name"].split(" ")[0] in ("forward", "backward"):
        b[e["pid"]] = b.get(e["pid"], 0) + e["dur"] / 1e3
print("/".join("%.0f" % b[p] for p in sorted(b)))' "$dir/t.json")
    fi
    printf '%-46s %10s %18s\n' "$n rank(s) ${args:-(one rank, whole model)}" "$sps" "$busy"
done
rm -rf "$dir"
