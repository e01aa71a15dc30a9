#!/bin/sh
# MF_TIMEOUT sees every wait mpiflow starts, on any thread: one rank of
# a training job is stopped (SIGSTOP, as a hung node would be) just as it
# reaches a given call, and the others' watchdog must end the job with a
# report naming the op and the stopped rank, exit status 3, within 60 s
# of the stop:
# - data parallel with the default buckets and with 1 MiB buckets: the
#   bucket allreduces the progress thread runs while the main thread
#   waits on them;
# - ZeRO-1: the parameters' allgather after the step;
# - a pipeline stage: the other stage's point-to-point receive;
# - a checkpoint save: the collective HDF5 calls.
# gdb stops the rank at the call (a breakpoint, then SIGSTOP as it detaches).
# It holds the rank while it attaches, which on a loaded machine takes
# seconds, so it reads the symbols of libmpiflow only, and the timeout is
# 20 s: a watchdog that fires while gdb still attaches would report some
# earlier call.
[ -r "${top_srcdir:-.}/tests/lib.sh" ] || { echo "ERROR: no tests/lib.sh: run by make check, or set top_srcdir" >&2; exit 99; }
. "${top_srcdir:-.}/tests/lib.sh"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
T=$TMPDIR_TEST
command -v gdb >/dev/null 2>&1 || skip "gdb is not installed (scripts/install-deps.sh installs it)"


# case NAME NP FUNC[@K] PATTERN ARGS...: mpiflow-train ARGS on NP ranks;
# rank 1 is stopped at its first (K-th) call of FUNC; the output must
# hold a watchdog report matching PATTERN (grep -E)
case_() {
    name=$1 np=$2 func=${3%@*} ignore=0 pattern=$4
    case $3 in *@*) ignore=$((${3#*@} - 1)) ;; esac
    shift 4
    mark="$T/$name.csv"
    MF_TIMEOUT=20 timeout 150 "$MPIEXEC" -n "$np" "$TRAIN" --progress lines --threads 1 --metrics "$mark" "$@" \
        >"$T/$name.out" 2>&1 &
    job=$!
    wait_until 60 "$name: rank 1's process" eval 'pid=$(rank_pid "$mark" 1)'
    timeout 60 gdb -p "$pid" -batch -iex "set auto-solib-add off" -ex "sharedlibrary libmpiflow" -ex "break $func" -ex "ignore 1 $ignore" -ex continue -ex "shell kill -STOP $pid" -ex detach \
        >"$T/$name.gdb" 2>&1
    grep -q "Breakpoint 1, " "$T/$name.gdb" || { cat "$T/$name.gdb" "$T/$name.out"; fail "$name: rank 1 never reached $func"; }
    # the SIGSTOP queued while gdb held the process must have stopped it
    state=$(sed -n 's/^State:[[:space:]]*\([A-Za-z]\).*/\1/p' "/proc/$pid/status" 2>/dev/null)
    [ -n "$state" ] || { cat "$T/$name.gdb" "$T/$name.out"; fail "$name: rank 1 died under gdb"; }
    [ "$state" = T ] || kill -STOP "$pid"
    stopped=$(date +%s)
    wait "$job"
    rc=$?
    took=$(($(date +%s) - stopped))
    kill -9 "$pid" 2>/dev/null
    [ "$rc" -ne 124 ] || { cat "$T/$name.out"; fail "$name: the job hung until timeout(1) killed it"; }
    [ "$rc" -eq 3 ] || { cat "$T/$name.out"; fail "$name: exit $rc with rank 1 stopped, not 3 (the watchdog's)"; }
    # MF_TIMEOUT=20, then 5 s for the others' answers: 25-26 s on an idle
    # machine; 60 s leaves room for a loaded one, and still tells a report
    # from a hang (timeout(1) at 150 s)
    [ "$took" -le 60 ] || { cat "$T/$name.out"; fail "$name: the job took $took s after the stop to end"; }
    report=$(grep "mpiflow watchdog: rank [0-9]* has waited" "$T/$name.out" | head -1)
    echo "$report" | grep -Eq "$pattern" || { cat "$T/$name.out" "$T/$name.gdb"; fail "$name: exit $rc after $took s, no report matching: $pattern"; }
    echo "$report" | grep -q "rank 1 (no answer in 5 s)" || { cat "$T/$name.out"; fail "$name: the report does not name rank 1"; }
    echo "ok: $name: exit $rc, $took s after the stop: $report"
}

mlp="--model mlp --dataset synthetic --synthetic-size 2000,100 --batch-size 48 --steps 5000 --no-eval"
lenet="--model lenet --dataset synthetic --synthetic-size 640,60 --batch-size 24 --steps 5000 --no-eval"
# shellcheck disable=SC2086
case_ dp 3 mfi_iallreduce@2 \
    "in allreduce #[0-9]+ on ranks 0-2, non-blocking \(gradient bucket 1 of 1, [0-9.]+ MiB\); not arrived:" $mlp
# shellcheck disable=SC2086
case_ dp_1mib 3 mfi_iallreduce@40 \
    "in allreduce #[0-9]+ on ranks 0-2, non-blocking \(gradient bucket [0-9]+ of [0-9]+, [0-9.]+ MiB\); not arrived:" \
    $lenet --bucket-mb 1
# shellcheck disable=SC2086
case_ zero 3 mfi_zero_gather \
    "in allgather #[0-9]+ on ranks 0-2 \(ZeRO parameter bucket 1 of 1, [0-9.]+ MiB\); not arrived:" \
    $mlp --zero 1 --optimizer adam
# shellcheck disable=SC2086
case_ pipeline 2 mf_transfer_finish \
    "in point-to-point with rank 1 \(pipeline recv of micro-batch [0-9]+'s (gradient|activation) from stage 1\); waiting for:" \
    $lenet --pipeline-stages 2 --micro-batches 4
# shellcheck disable=SC2086
case_ checkpoint 3 mfi_ckpt_layout_of \
    "in checkpoint I/O #[0-9]+ on ranks 0-2 \(writing .hidden.weight. in .*run.h5.tmp\); not arrived:" \
    $mlp --save-every 1 --checkpoint "$T/run.h5"
echo "every wait reported: bucket allreduces, ZeRO allgather, pipeline receive, checkpoint I/O"
