#!/bin/sh
# A stop request never loses the checkpoint (doc/slurm.md, "Preemption
# and time limits"): SIGTERM, SIGUSR1 and SIGINT, sent to mpiexec, to
# every rank, to one rank, to the launcher and the ranks at once (what
# Slurm and `kill` on every process of a job do), to the process group
# of timeout(1) and mpiexec (as `timeout` and `kill -TERM -PGID` do), to
# mpiexec's own group (Ctrl-C in a terminal) and twice in a row, during
# training, during a save and during start-up, on 2 and 4 ranks, for
# mlp, LeNet and the GPT (tensor parallel, ZeRO-3). Every run must exit
# 0 with a checkpoint that verifies and, resumed, ends with the
# parameters of the uninterrupted run bit for bit (mpiflow-ckpt diff)
# and its losses digit for digit. Then the ways a stop may end without a
# checkpoint, each with a non-zero exit that says why: a second request
# 5 s or more after the first (the rank exits at once with 128 + the
# signal), and a stop without --checkpoint.
[ -r "${top_srcdir:-.}/tests/lib.sh" ] || { echo "ERROR: no tests/lib.sh: run by make check, or set top_srcdir" >&2; exit 99; }
. "${top_srcdir:-.}/tests/lib.sh"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
T=$TMPDIR_TEST
CKPT="$top_builddir/mpiflow-ckpt"
word_text "$T/words.txt" 3000
common="--threads 1 --no-eval --log-every 1 --progress lines"
mlp="--model mlp --dataset synthetic --synthetic-size 2000,100 --batch-size 40 --seed 5 $common"
lenet="--model lenet --dataset synthetic --synthetic-size 640,60 --batch-size 24 --optimizer adam --seed 5 $common"
gpt="--model gpt --dataset text:$T/words.txt --n-layer 2 --n-head 2 --n-embd 32 --seq-len 16 --batch-size 8 --seed 5 $common"

# pids of the ranks of the job whose command line holds MARK
ranks_of() { pgrep -f -- "\.libs/.*$1|lt-mpiflow-train.*$1" | sort -n; }
# handler_set PID: the process catches SIGTERM (its handler is installed)
handler_set() {
    mask=$(sed -n 's/^SigCgt:\t*//p' "/proc/$1/status" 2>/dev/null)
    [ -n "$mask" ] && [ $((0x$mask >> 14 & 1)) -eq 1 ]
}
# all_handlers NP MARK: NP ranks of the job are up with their handlers
all_handlers() {
    ah=0
    for p in $(ranks_of "$2"); do handler_set "$p" && ah=$((ah + 1)); done
    [ "$ah" -ge "$1" ]
}

# straight CONF NP STEPS ARGS...: the uninterrupted run of a configuration
# ($T/CONF.csv, $T/CONF.h5), once
straight() {
    conf=$1 np=$2 steps=$3
    shift 3
    [ -f "$T/$conf.h5" ] && return 0
    run_train "$np" "$@" --steps "$steps" --metrics "$T/$conf.csv" --checkpoint "$T/$conf.h5" >/dev/null
    [ "$rc" -eq 0 ] || fail "$conf: the uninterrupted run: exit $rc"
}

# start NAME NP ARGS...: the job in the background under timeout(1),
# which leads the process group; mpiexec is its child. Sets job, launcher
start() {
    name=$1 np=$2
    shift 2
    timeout 600 "$MPIEXEC" -n "$np" "$TRAIN" "$@" >"$T/$name.out" 2>&1 &
    job=$!
    wait_until 60 "$name: mpiexec under timeout(1)" eval 'launcher=$(pgrep -P "$job")'
}

# deliver NAME SIG TARGET NP MARK: sends SIG; TARGET is
#   mpiexec, ranks, rank1: that process or those;
#   both: mpiexec and every rank at once; twice: every rank, two times;
#   group: timeout(1)'s process group (timeout and mpiexec; timeout sends
#   it on to mpiexec again)
deliver() {
    case $3 in
    mpiexec) send "$2" "$1: mpiexec" "$launcher" ;;
    ranks) send "$2" "$1: the ranks" $(ranks_of "$5") ;;
    rank1) send "$2" "$1: the last rank" "$(ranks_of "$5" | tail -1)" ;;
    both) send "$2" "$1: mpiexec and the ranks" "$launcher" $(ranks_of "$5") ;;
    twice)
        dv=$(ranks_of "$5")
        send "$2" "$1: the ranks" $dv
        send "$2" "$1: the ranks again" $dv
        ;;
    group) send "$2" "$1: timeout's process group" "-$job" ;;
    *) harness_error "unknown target $3" ;;
    esac
}

# finished NAME SIG: the job ended with 0, saying it stopped on SIG; sets done_
finished() {
    wait "$job"
    rc=$?
    [ "$rc" -eq 0 ] || { cat "$T/$1.out"; fail "$1: SIG$2: exit $rc with a stop request"; }
    done_=$(sed -n "s/.*SIG$2: stopped \(after\|before the first\) step.* \([0-9][0-9]*\) of [0-9]*)\{0,1\}; resume with --resume .*/\2/p" \
        "$T/$1.out")
    [ -n "$done_" ] || { cat "$T/$1.out"; fail "$1: no clean stop on SIG$2"; }
}

# resumed CONF NAME NP STEPS CKPT ARGS...: the stopped run's checkpoint
# verifies, and resumed it ends with the uninterrupted run's losses and
# parameters, bit for bit
resumed() {
    conf=$1 name=$2 np=$3 steps=$4 ck=$5
    shift 5
    "$CKPT" verify -q "$ck" || fail "$name: the checkpoint does not verify"
    cp "$ck" "$T/$name.resume.h5"
    run_train "$np" "$@" --steps "$steps" --resume "$T/$name.resume.h5" --checkpoint "$T/$name.end.h5" \
        --metrics "$T/$name.csv" >/dev/null
    [ "$rc" -eq 0 ] || fail "$name: resuming: exit $rc"
    if [ "$done_" -lt "$steps" ]; then
        tail -n $((steps - done_)) "$T/$conf.csv" | sed '1i h' >"$T/tail.csv"
        same_losses "$T/tail.csv" "$T/$name.csv" "$name: resumed after step $done_" 0
    fi
    "$CKPT" diff "$T/$conf.h5" "$T/$name.end.h5" >"$T/diff" ||
        { cat "$T/diff"; fail "$name: resumed after step $done_, the parameters are not the uninterrupted run's"; }
}

# stop CONF NAME NP STEPS SIG TARGET [save] -- ARGS...: the run stopped
# once 30 steps are logged (or, with `save`, after 3 steps, as soon as a
# save at every step has created PATH.tmp), then resumed
stop() {
    conf=$1 name=$2 np=$3 steps=$4 sig=$5 target=$6 when=train
    shift 6
    [ "$1" = save ] && when=save && shift
    [ "$1" = -- ] || harness_error "stop: no -- before the arguments"
    shift
    straight "$conf" "$np" "$steps" "$@"
    ck="$T/$name.h5"
    extra=""
    [ "$when" = save ] && extra="--save-every 1 --fletcher32"
    # shellcheck disable=SC2086
    start "$name" "$np" "$@" --steps "$steps" --checkpoint "$ck" $extra
    if [ "$when" = save ]; then
        # a save at every step on 4 oversubscribed ranks beside a CPU hog
        # can take seconds a step: 3 steps, and room to wait
        wait_until 300 "$name: 3 steps" has_lines 3 '^step ' "$T/$name.out"
        wait_until 120 "$name: a save in progress" test -e "$ck.tmp"
    else
        wait_until 120 "$name: 30 steps" has_lines 30 '^step ' "$T/$name.out"
    fi
    deliver "$name" "$sig" "$target" "$np" "$ck"
    inflight="during training"
    [ "$when" = save ] && inflight=$([ -e "$ck.tmp" ] && echo "during a save" || echo "just after a save")
    finished "$name" "$sig"
    [ "$done_" -lt "$steps" ] || harness_error "$name: the run ended (step $done_) before the stop request"
    resumed "$conf" "$name" "$np" "$steps" "$ck" "$@"
    echo "ok: $name: SIG$sig to $target $inflight on $np ranks: stopped after step $done_, resumed bit for bit"
}

# --- mlp on 2 ranks: every way to deliver each signal
stop mlp term_mpiexec 2 1000 TERM mpiexec -- $mlp
stop mlp usr1_mpiexec 2 1000 USR1 mpiexec -- $mlp
stop mlp int_mpiexec 2 1000 INT mpiexec -- $mlp
stop mlp term_ranks 2 1000 TERM ranks -- $mlp
stop mlp usr1_rank1 2 1000 USR1 rank1 -- $mlp
stop mlp term_both 2 1000 TERM both -- $mlp
stop mlp usr1_both 2 1000 USR1 both -- $mlp
stop mlp int_twice 2 1000 INT twice -- $mlp
stop mlp term_group 2 1000 TERM group -- $mlp

# --- LeNet and the GPT on 2 and 4 ranks, during training and during a save
stop lenet4 lenet_term_both 4 150 TERM both -- $lenet
stop lenet4 lenet_usr1_twice_save 4 150 USR1 twice save -- $lenet
stop lenet2 lenet_term_group_save 2 150 TERM group save -- $lenet
stop gpt_tp gpt_tp_term_both 2 600 TERM both -- $gpt --tensor-parallel 2
stop gpt_tp gpt_tp_term_group 2 600 TERM group -- $gpt --tensor-parallel 2
stop gpt_tp gpt_tp_usr1_both_save 2 600 USR1 both save -- $gpt --tensor-parallel 2
stop gpt_z3 gpt_z3_term_both 2 400 TERM both -- $gpt --zero 3
stop gpt_z3 gpt_z3_int_twice_save 2 400 INT twice save -- $gpt --zero 3

# --- Ctrl-C in a terminal: SIGINT to mpiexec's own process group (the
# ranks run in sessions of their own under MPICH's launcher)
straight mlp 2 1000 $mlp
timeout 300 setsid "$MPIEXEC" -n 2 "$TRAIN" $mlp --steps 1000 --checkpoint "$T/ctrl_c.h5" >"$T/ctrl_c.out" 2>&1 &
job=$!
wait_until 60 "ctrl_c: mpiexec's session" eval 'sess=$(pgrep -P "$job")'
wait_until 120 "ctrl_c: 30 steps" has_lines 30 '^step ' "$T/ctrl_c.out"
send INT "ctrl_c: mpiexec's process group" "-$sess"
finished ctrl_c INT
resumed mlp ctrl_c 2 1000 "$T/ctrl_c.h5" $mlp
echo "ok: ctrl_c: SIGINT to mpiexec's process group: stopped after step $done_, resumed bit for bit"

# --- start-up: SIG to every rank as soon as its handlers are in place,
# while a large synthetic set is still being made (seconds); the state it
# would start from is saved and resumes as the uninterrupted run
start_stop() {
    name=$1 np=$2 sig=$3 target=$4
    shift 4
    start "$name" "$np" "$@"
    wait_until 120 "$name: the ranks' handlers" all_handlers "$np" "$T/$name.h5"
    deliver "$name" "$sig" "$target" "$np" "$T/$name.h5"
    finished "$name" "$sig"
    grep -q "SIG$sig: stopped before the first step" "$T/$name.out" || { cat "$T/$name.out"; fail "$name: not stopped before the first step"; }
    grep -q "^step " "$T/$name.out" && fail "$name: it trained"
    echo "ok: $name: SIG$sig to $target during start-up: $(grep "stopped before" "$T/$name.out")"
}
big="--model mlp --dataset synthetic --synthetic-size 120000,100 --batch-size 40 --seed 5 $common"
straight big 2 300 $big
start_stop startup_term 2 TERM both $big --steps 300 --checkpoint "$T/startup_term.h5"
[ "$done_" -eq 0 ] || fail "startup_term: stopped at step $done_, not 0"
resumed big startup_term 2 300 "$T/startup_term.h5" $big
echo "ok: the untrained state saved at start-up resumes as the uninterrupted run"
run_train 2 $big --steps 100 --checkpoint "$T/from.h5" >/dev/null
[ "$rc" -eq 0 ] || fail "the checkpoint to resume from: exit $rc"
start_stop startup_usr1 2 USR1 twice $big --steps 300 --resume "$T/from.h5" --checkpoint "$T/startup_usr1.h5"
"$CKPT" diff "$T/from.h5" "$T/startup_usr1.h5" >"$T/diff" || { cat "$T/diff"; fail "the state saved at start-up differs from the resumed one"; }
echo "ok: the resumed state was saved to the new --checkpoint before the first step"

# --- a second request 5 s or more after the first stops at once. gdb
# holds rank 0 inside the first stop's save (the breakpoint is in the
# checkpoint's layout step) while the first request is handled; 6 s
# later both ranks get SIGTERM again: exit 128+15, the reason on stderr,
# the last complete checkpoint kept. (A SIGSTOP instead would leave the
# first SIGTERM pending, and the kernel merges the second into it.)
# The complete checkpoint comes from a short run first: with periodic
# saves, the stop could land on a step just saved and write nothing.
if command -v gdb >/dev/null 2>&1; then
    run_train 2 $mlp --steps 10 --checkpoint "$T/at_once.h5" >/dev/null
    [ "$rc" -eq 0 ] || fail "at_once: the first run exited $rc"
    start at_once 2 $mlp --steps 100000 --resume "$T/at_once.h5" --checkpoint "$T/at_once.h5"
    wait_until 120 "at_once: 60 steps" has_lines 60 '^step ' "$T/at_once.out"
    pids=$(ranks_of "$T/at_once.h5")
    wait_until 60 "at_once: rank 0's process" eval 'r0=$(rank_pid "$T/at_once.h5" 0)'
    [ "$(echo "$pids" | wc -w)" -eq 2 ] || fail "at_once: not 2 ranks: $pids"
    # shellcheck disable=SC2086
    # (no core file: gdb may crash on its way out once the rank has exited)
    ulimit -c 0
    timeout 90 gdb -p "$r0" -batch -ex "handle SIGTERM nostop noprint pass" -ex "break mfi_ckpt_layout_of" \
        -ex "shell kill -TERM $(echo $pids)" -ex continue -ex "shell sleep 6" -ex "shell kill -TERM $(echo $pids)" \
        -ex continue >"$T/at_once.gdb" 2>&1
    grep -q "Breakpoint 1, " "$T/at_once.gdb" || { cat "$T/at_once.gdb"; fail "at_once: rank 0 never reached a save under gdb"; }
    wait "$job"
    rc=$?
    [ "$rc" -ne 0 ] || { cat "$T/at_once.out"; fail "at_once: exit 0 after a stop at once"; }
    grep -q "mpiflow-train: SIGTERM again, 5 s or more after the first stop request: stopping at once; no checkpoint" \
        "$T/at_once.out" || { cat "$T/at_once.out" "$T/at_once.gdb"; fail "at_once: the reason is not given"; }
    grep -q "stopped after step" "$T/at_once.out" && fail "at_once: it stopped cleanly instead of at once"
    "$CKPT" verify -q "$T/at_once.h5" || fail "at_once: the last complete checkpoint does not verify"
    echo "ok: a second request 6 s after the first: exit $rc, $(grep -m1 'again, 5 s' "$T/at_once.out" | cut -c1-60)..."
else
    echo "note: no gdb: the stop at once on a second request was not tested"
fi

# --- without --checkpoint a stop saves nothing and every rank exits 128 +
# the signal. Sent to the ranks (as srun and scancel do): MPICH's mpiexec
# passes the ranks' status on then, but not reliably when it got the
# signal itself (doc/slurm.md), so that case checks the message only.
start no_ckpt_launcher 2 $mlp --steps 100000 --metrics "$T/no_ckpt_launcher.csv"
wait_until 120 "no_ckpt_launcher: 30 steps" has_lines 30 '^step ' "$T/no_ckpt_launcher.out"
deliver no_ckpt_launcher USR1 both 2 "$T/no_ckpt_launcher.csv"
wait "$job"
grep -q "SIGUSR1: stopped after step [0-9]* of 100000; nothing saved (no --checkpoint)" "$T/no_ckpt_launcher.out" ||
    { cat "$T/no_ckpt_launcher.out"; fail "no_ckpt_launcher: no message"; }
start no_ckpt 2 $mlp --steps 100000 --metrics "$T/no_ckpt.csv"
wait_until 120 "no_ckpt: 30 steps" has_lines 30 '^step ' "$T/no_ckpt.out"
deliver no_ckpt USR1 ranks 2 "$T/no_ckpt.csv"
wait "$job"
rc=$?
[ "$rc" -eq 138 ] || { cat "$T/no_ckpt.out"; fail "no_ckpt: exit $rc, not 138 (128 + SIGUSR1)"; }
grep -q "SIGUSR1: stopped after step [0-9]* of 100000; nothing saved (no --checkpoint)" "$T/no_ckpt.out" ||
    { cat "$T/no_ckpt.out"; fail "no_ckpt: no message"; }
echo "ok: a stop without --checkpoint: exit $rc, $(grep -m1 'nothing saved' "$T/no_ckpt.out")"
echo "signals: every stop request wrote a checkpoint that resumes bit for bit, or exited non-zero saying why"
