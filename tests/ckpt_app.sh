#!/bin/sh
# Checkpoints end to end with mpiflow-train and mpiflow-ckpt:
# - resuming across parallel modes (mp -> dp on 2 ranks, 2d -> hybrid on 4
#   and on 3) continues the straight 1-rank run's losses within 1e-5;
# - a resume in the same layout ends in a checkpoint equal bit for bit
#   to the straight run's (mpiflow-ckpt diff);
# - mpiflow-ckpt list, verify, diff and stats;
# - every bad checkpoint makes every rank say what is wrong, exit 2 and
#   leave the existing checkpoint untouched;
# - a rank killed with SIGKILL in the middle of a save (proven: it held
#   PATH.tmp open, and PATH.tmp is left) leaves the previous checkpoint
#   complete: it verifies and the run resumes from it.
[ -r "${top_srcdir:-.}/tests/lib.sh" ] || { echo "ERROR: no tests/lib.sh: run by make check, or set top_srcdir" >&2; exit 99; }
. "${top_srcdir:-.}/tests/lib.sh"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
T=$TMPDIR_TEST
CKPT="$top_builddir/mpiflow-ckpt"
c="--model mlp --dataset synthetic --synthetic-size 2000,100 --batch-size 40 --optimizer momentum --lr 0.002
    --seed 5 --log-every 1 --threads 1 --no-eval"

# the reference: 60 steps on one rank, straight
# shellcheck disable=SC2086
run_train 1 $c --steps 60 --metrics "$T/straight.csv" --checkpoint "$T/straight.h5" >/dev/null
[ "$rc" -eq 0 ] || fail "straight run: exit $rc"
# near RESUMED.csv: its losses equal steps 31..60 of the straight run within 1e-5
near() {
    losses "$T/straight.csv" | tail -30 | paste -d' ' - "$1" |
        awk -v what="$2" '{ d = $1 - $2; if (d < 0) d = -d; r = d / (1e-3 + ($1 < 0 ? -$1 : $1)); if (r > w) w = r; n++ }
             END { printf "ok: %s: worst relative loss difference %.3g over %d steps\n", what, w, n;
                   exit !(n == 30 && w <= 1e-5) }' || fail "$2: losses differ from the straight run"
}
# resume NP_SAVE MODE_SAVE NP_LOAD MODE_LOAD: 30 steps saved, 30 resumed
resume() {
    # shellcheck disable=SC2086
    run_train "$1" $c --steps 30 --parallel "$2" --checkpoint "$T/$2.h5" >/dev/null
    [ "$rc" -eq 0 ] || fail "30 steps as $2 on $1 ranks: exit $rc"
    # shellcheck disable=SC2086
    run_train "$3" $c --steps 60 --parallel "$4" --resume "$T/$2.h5" --metrics "$T/r.csv" \
        --checkpoint "$T/$2-$4.h5" >/dev/null
    [ "$rc" -eq 0 ] || fail "resumed as $4 on $3 ranks: exit $rc"
    losses "$T/r.csv" >"$T/r.loss"
    near "$T/r.loss" "saved as $2 on $1 ranks, resumed as $4 on $3"
}
resume 2 mp 2 dp
resume 4 2d 4 hybrid
resume 4 2d 3 hybrid

# the same layout: the resumed run's checkpoint equals the straight one's, bit for bit
# shellcheck disable=SC2086
run_train 1 $c --steps 30 --checkpoint "$T/half.h5" >/dev/null
# shellcheck disable=SC2086
run_train 1 $c --steps 60 --resume "$T/half.h5" --checkpoint "$T/resumed.h5" >/dev/null
[ "$rc" -eq 0 ] || fail "resume on 1 rank: exit $rc"
"$CKPT" diff "$T/straight.h5" "$T/resumed.h5" >"$T/diff" || { cat "$T/diff"; fail "resumed checkpoint differs"; }
grep -q "8 tensors equal, 0 differ" "$T/diff" || fail "diff: expected 8 equal tensors (4 parameters, 4 momenta)"
echo "ok: 30 + resume + 30 ends in the straight run's checkpoint, bit for bit (mpiflow-ckpt diff)"
# across modes, equal within a tolerance, and not without it
"$CKPT" diff --atol 1e-5 "$T/straight.h5" "$T/2d-hybrid.h5" >"$T/diff" || { cat "$T/diff"; fail "2d -> hybrid drifted"; }
"$CKPT" diff "$T/straight.h5" "$T/half.h5" >"$T/diff"
[ $? -eq 1 ] && grep -q "model/hidden.weight .*differs" "$T/diff" || fail "diff: steps 60 and 30 should differ"

# mpiflow-ckpt list / verify / stats
"$CKPT" list "$T/2d.h5" >"$T/list" || fail "list: exit $?"
cat "$T/list"
grep -q "step=30 epoch=0 world_size=4" "$T/list" || fail "list: header"
grep -q "type=sgd step=30 lr=0.002 momentum=0.9" "$T/list" || fail "list: optimizer"
grep -Eq "^ *model/hidden.weight +\(512, 784\) +f32 +B,S\(0\) +0-3 mesh 2x2 +1.5 MiB" "$T/list" || fail "list: hidden.weight row"
grep -Eq "^ *optim/hidden.weight/momentum_buffer +\(512, 784\)" "$T/list" || fail "list: momentum row"
"$CKPT" verify "$T/2d.h5" "$T/straight.h5" || fail "verify: exit $?"
"$CKPT" stats "$T/straight.h5" model/output.bias >"$T/stats" || fail "stats: exit $?"
grep -Eq "^ *model/output.bias( +[-0-9.e]+){5} +0$" "$T/stats" || { cat "$T/stats"; fail "stats: output.bias row"; }
"$CKPT" stats "$T/straight.h5" model/nothere >/dev/null 2>&1
[ $? -eq 2 ] || fail "stats of a missing tensor: not exit 2"
"$CKPT" frobnicate x >/dev/null 2>&1
[ $? -eq 2 ] || fail "unknown command: not exit 2"
"$CKPT" --help | grep -q "usage: mpiflow-ckpt" || fail "--help"

# bad checkpoints: every rank reports, exit 2, keep.h5 untouched
cp "$T/straight.h5" "$T/keep.h5"
cp "$T/keep.h5" "$T/keep.orig"
size=$(stat -c %s "$T/straight.h5")
head -c $((size / 2)) "$T/straight.h5" >"$T/short.h5"
echo "not HDF5 at all" >"$T/text.h5"
h5copy -i "$T/straight.h5" -o "$T/other.h5" -s /model -d /model || fail "h5copy"
cp "$T/straight.h5" "$T/flip.h5"
# a quarter into the file: inside hidden.weight, the first and largest dataset
printf '\125\252\125\252' | dd of="$T/flip.h5" bs=1 seek=$((size / 4)) conv=notrunc 2>/dev/null
# shellcheck disable=SC2086
run_train 1 --model lenet --dataset synthetic --synthetic-size 200,50 --steps 1 --no-eval --threads 1 \
    --checkpoint "$T/lenet.h5" >/dev/null
[ "$rc" -eq 0 ] || fail "lenet checkpoint: exit $rc"
"$CKPT" verify "$T/flip.h5" >"$T/verify"
[ $? -eq 1 ] && grep -q "FAILED .*tensor 'model/hidden.weight' fails its checksum" "$T/verify" ||
    { cat "$T/verify"; fail "verify did not catch the flipped bytes"; }
bad() {   # bad FILE MESSAGE [MODEL]
    # shellcheck disable=SC2086
    timeout 120 "$MPIEXEC" -n 2 "$TRAIN" $c --model "${3:-mlp}" --steps 40 --resume "$1" --checkpoint "$T/keep.h5" \
        >"$T/out" 2>&1
    rc=$?
    [ "$rc" -eq 2 ] || { cat "$T/out"; fail "--resume $1: exit $rc, not 2"; }
    n=$(grep -c "error: --resume: .*$2" "$T/out")
    [ "$n" -eq 2 ] || { cat "$T/out"; fail "--resume $1: '$2' on $n ranks, not 2"; }
    cmp -s "$T/keep.h5" "$T/keep.orig" || fail "--resume $1 changed the existing checkpoint"
    echo "ok: $(basename "$1"): $2"
}
bad "$T/short.h5" "short.h5: cannot open the HDF5 file (damaged or truncated)"
bad "$T/text.h5" "text.h5: not an HDF5 file"
bad "$T/other.h5" "other.h5: the format attribute is '', not 'mpiflow-checkpoint'"
bad "$T/flip.h5" "flip.h5: tensor 'hidden.weight' fails its checksum"
bad "$T/straight.h5" "straight.h5: tensor 'conv1.weight' is missing" lenet
bad "$T/lenet.h5" "lenet.h5: tensor 'hidden.weight' has shape \[512,3136\] in the checkpoint but \[512,784\]"
timeout 120 "$MPIEXEC" -n 2 "$TRAIN" $c --steps 5 --checkpoint /nonexistent-dir/x.h5 >"$T/out" 2>&1
rc=$?
[ "$rc" -eq 2 ] && [ "$(grep -c "cannot write checkpoints into /nonexistent-dir" "$T/out")" -eq 2 ] ||
    { cat "$T/out"; fail "--checkpoint into a missing directory: exit $rc"; }
echo "ok: an unwritable --checkpoint directory is refused before training"

# SIGKILL in the middle of a save: lenet with Adam saves at every step;
# once kill.h5 exists, rank 1 is held by gdb inside the next save (its
# first tensor write, kill.h5.tmp open: the breakpoint is in the
# checkpoint's layout step) and killed there. Without gdb, a poll for
# kill.h5.tmp among its open files decides when, up to 5 tries.
k="--model lenet --dataset synthetic --synthetic-size 4000,100 --batch-size 16 --optimizer adam --no-eval --threads 1"
proven=no
attempt=0
while [ "$proven" = no ] && [ $attempt -lt 5 ]; do
    attempt=$((attempt + 1))
    rm -f "$T/kill.h5" "$T/kill.h5.tmp"
    # shellcheck disable=SC2086
    timeout 300 "$MPIEXEC" -n 2 "$TRAIN" $k --steps 1000 --save-every 1 --fletcher32 --checkpoint "$T/kill.h5" \
        >"$T/kill.out" 2>&1 &
    job=$!
    wait_until 120 "the first checkpoint to protect" test -e "$T/kill.h5"
    wait_until 60 "rank 1's process" eval 'victim=$(rank_pid "$T/kill.h5" 1)'
    open=no
    if command -v gdb >/dev/null 2>&1; then
        timeout 60 gdb -p "$victim" -batch -ex "break mfi_ckpt_layout_of" -ex continue \
            -ex "shell ls -l /proc/$victim/fd | grep -q 'kill.h5.tmp\$' && touch $T/open" -ex "shell kill -9 $victim" \
            >"$T/kill.gdb" 2>&1
        grep -q "Breakpoint 1, " "$T/kill.gdb" || { cat "$T/kill.gdb"; fail "rank 1 never reached the save under gdb"; }
        [ -e "$T/open" ] && open=yes
        rm -f "$T/open"
    else
        i=0
        while [ $i -lt 20000 ]; do   # kill as soon as the victim writes kill.h5.tmp
            if ls -l "/proc/$victim/fd" 2>/dev/null | grep -q "kill.h5.tmp$"; then
                kill -9 "$victim"
                open=yes
                break
            fi
            i=$((i + 1))
        done
    fi
    [ "$open" = yes ] || kill -9 "$victim" 2>/dev/null
    wait "$job"
    rc=$?
    [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { cat "$T/kill.out"; fail "after SIGKILL: exit $rc (0 or a hang)"; }
    [ "$open" = yes ] && [ -e "$T/kill.h5.tmp" ] && proven=yes
    echo "SIGKILL attempt $attempt: kill.h5.tmp open at the kill: $open; left behind: $([ -e "$T/kill.h5.tmp" ] && echo yes || echo no)"
done
[ "$proven" = yes ] || fail "in 5 attempts no SIGKILL provably landed during a save"
"$CKPT" verify "$T/kill.h5" >"$T/verify" || { cat "$T/verify"; fail "the checkpoint before the kill is damaged"; }
step=$(sed -n 's/.*step \([0-9]*\)$/\1/p' "$T/verify")
echo "ok: rank $victim killed during a save; exit $rc; kill.h5 verifies at step $step"
# shellcheck disable=SC2086
run_train 2 $k --steps $((step + 3)) --resume "$T/kill.h5" --checkpoint "$T/kill.h5" >/dev/null
[ "$rc" -eq 0 ] || fail "resuming from the checkpoint left by the kill: exit $rc"
grep -q "resumed from .*kill.h5 at step $step" "$T/out" || fail "no resume message"
[ ! -e "$T/kill.h5.tmp" ] || fail "the next save left kill.h5.tmp behind"
echo "checkpoints end to end: modes, mpiflow-ckpt, bad input, SIGKILL"
