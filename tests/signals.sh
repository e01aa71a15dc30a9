#!/bin/sh
# SIGTERM and SIGUSR1 stop mpiflow-train cleanly (doc/slurm.md): every
# rank finishes the current step, the checkpoint is written, the job
# exits 0, and a run resumed from it gives the uninterrupted run's
# losses bit for bit. Sent to mpiexec (which forwards them), to every
# rank (as Slurm's preemption does) and to one rank only (the stop is
# agreed). A signal during start-up, before the first step, is honoured
# too: no checkpoint when nothing has been trained, the resumed state
# written to a new --checkpoint when there is one.
. "$top_srcdir/tests/lib.sh"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
T=$TMPDIR_TEST
CKPT="$top_builddir/mpiflow-ckpt"
c="--model mlp --dataset synthetic --synthetic-size 2000,100 --batch-size 40 --seed 5 --threads 1 --no-eval
    --log-every 1 --progress lines"
steps=2500

# the uninterrupted run
# shellcheck disable=SC2086
run_train 2 $c --steps $steps --metrics "$T/straight.csv" >/dev/null
[ "$rc" -eq 0 ] || fail "the straight run: exit $rc"

# pids of the ranks of the job whose command line holds MARK
ranks_of() { pgrep -f -- "\.libs/.*$1|lt-mpiflow-train.*$1" | sort -n; }
# handler_set PID: the process catches SIGTERM (its handler is installed)
handler_set() {
    mask=$(sed -n 's/^SigCgt:\t*//p' "/proc/$1/status" 2>/dev/null)
    [ -n "$mask" ] && [ $((0x$mask >> 14 & 1)) -eq 1 ]
}

# stop NAME SIG TARGET: run 2 ranks for $steps steps, send SIG to TARGET
# (mpiexec, ranks or rank1) once 50 steps are logged; the job must stop
# with exit 0 and a checkpoint, and resuming must give the straight losses
stop() {
    name=$1 sig=$2 target=$3
    mark="$T/$name.h5"
    # shellcheck disable=SC2086
    timeout 300 "$MPIEXEC" -n 2 "$TRAIN" $c --steps $steps --checkpoint "$mark" >"$T/$name.out" 2>&1 &
    job=$!
    i=0
    while [ "$(grep -c '^step ' "$T/$name.out")" -lt 50 ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
    case $target in
    mpiexec) kill -"$sig" "$(pgrep -P "$job")" ;;   # timeout(1)'s child
    ranks) kill -"$sig" $(ranks_of "$mark") ;;
    rank1) kill -"$sig" "$(ranks_of "$mark" | tail -1)" ;;
    esac
    wait "$job"
    rc=$?
    [ "$rc" -eq 0 ] || { cat "$T/$name.out"; fail "$name: SIG$sig to $target: exit $rc"; }
    done_=$(sed -n "s/.*SIG$sig: stopped after step \([0-9]*\) of $steps; resume with --resume .*/\1/p" "$T/$name.out")
    [ -n "$done_" ] && [ "$done_" -lt $steps ] || { cat "$T/$name.out"; fail "$name: no clean stop on SIG$sig"; }
    "$CKPT" verify -q "$mark" || fail "$name: the checkpoint does not verify"
    # shellcheck disable=SC2086
    run_train 2 $c --steps $steps --resume "$mark" --metrics "$T/$name.csv" >/dev/null
    [ "$rc" -eq 0 ] || fail "$name: resuming: exit $rc"
    tail -n $((steps - done_)) "$T/straight.csv" | sed '1i h' >"$T/tail.csv"
    same_losses "$T/tail.csv" "$T/$name.csv" "$name: resumed after step $done_" 0
}
stop term_mpiexec TERM mpiexec
stop usr1_mpiexec USR1 mpiexec
stop term_ranks TERM ranks
stop usr1_rank1 USR1 rank1

# start_stop NAME SIG ARGS...: SIG to every rank as soon as its handler
# is in place, while a large synthetic set is still being made (seconds)
start_stop() {
    name=$1 sig=$2
    shift 2
    mark="$T/$name.mark"
    timeout 300 "$MPIEXEC" -n 2 "$TRAIN" --progress lines --model mlp --dataset synthetic --synthetic-size 120000,100 \
        --batch-size 40 --seed 5 --threads 1 --no-eval --steps $steps --metrics "$mark" "$@" >"$T/$name.out" 2>&1 &
    job=$!
    i=0
    sent=0
    while [ $sent -lt 2 ] && [ $i -lt 600 ]; do
        sent=0
        for p in $(ranks_of "$mark"); do handler_set "$p" && sent=$((sent + 1)); done
        [ $sent -ge 2 ] || sleep 0.01
        i=$((i + 1))
    done
    [ $sent -ge 2 ] || fail "$name: the ranks never installed their handlers"
    kill -"$sig" $(ranks_of "$mark")
    wait "$job"
    rc=$?
    [ "$rc" -eq 0 ] || { cat "$T/$name.out"; fail "$name: SIG$sig during start-up: exit $rc"; }
    grep -q "SIG$sig: stopped before the first step" "$T/$name.out" || { cat "$T/$name.out"; fail "$name: not stopped before the first step"; }
    grep -q "^step " "$T/$name.out" && fail "$name: it trained"
    echo "ok: $name: SIG$sig during start-up: $(grep "stopped before" "$T/$name.out")"
}
start_stop startup_term TERM --checkpoint "$T/new.h5"
[ ! -e "$T/new.h5" ] || fail "a checkpoint of an untrained model was written"
cp "$T/term_ranks.h5" "$T/from.h5"
start_stop startup_usr1 USR1 --resume "$T/from.h5" --checkpoint "$T/next.h5"
"$CKPT" diff "$T/from.h5" "$T/next.h5" >"$T/diff" || { cat "$T/diff"; fail "the state saved at start-up differs from the resumed one"; }
echo "ok: the resumed state was saved to the new --checkpoint before the first step"
echo "signals: SIGTERM and SIGUSR1 stop cleanly, from start-up on, and resume bit for bit"
