#!/bin/sh
# A checkpoint save onto a full disk, on 1, 2 and 3 ranks: every rank
# reports the operating system's reason ("No space left on device"), the
# job exits 1 within 45 s (a bound for a loaded machine; timeout(1) ends
# a deadlock in the collective HDF5 calls at 60 s), PATH.tmp is gone and
# the previous checkpoint is untouched and verifies. Twice: with the
# space check before writing (the default), and with
# MF_CKPT_SPACE_CHECK=0, so that the disk fills in the middle of a
# tensor that one rank writes while the others go on. A file system that
# turns read-only mid-run fails the next save the same way; one that is
# read-only at start-up is refused before training. The disks are small
# tmpfs mounts made here (as root; SKIP when mounting is not allowed).
[ -r "${top_srcdir:-.}/tests/lib.sh" ] || { echo "ERROR: no tests/lib.sh: run by make check, or set top_srcdir" >&2; exit 99; }
. "${top_srcdir:-.}/tests/lib.sh"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
T=$TMPDIR_TEST
CKPT="$top_builddir/mpiflow-ckpt"
D="$T/disk"
mkdir -p "$D"
mount -t tmpfs -o size=2600k tmpfs "$D" 2>"$T/mount.err" || skip "cannot mount a tmpfs here: $(cat "$T/mount.err")"
trap 'umount "$D" 2>/dev/null; rm -rf "$TMPDIR_TEST"' EXIT
c="--model mlp --dataset synthetic --synthetic-size 400,50 --batch-size 40 --no-eval --threads 1 --seed 3"

# the previous checkpoint: 1.6 MB of the 2.6 MB disk
# shellcheck disable=SC2086
run_train 1 $c --steps 2 --checkpoint "$D/run.h5" >/dev/null
[ "$rc" -eq 0 ] || fail "the first checkpoint: exit $rc"
cp "$D/run.h5" "$T/run.orig"

full() {   # full NP WHAT [ENV=VALUE]
    start=$(date +%s)
    # shellcheck disable=SC2086
    env ${3:-} timeout 60 "$MPIEXEC" -n "$1" "$TRAIN" --progress lines $c --steps 3 --checkpoint "$D/run.h5" \
        >"$T/out" 2>&1
    rc=$?
    took=$(($(date +%s) - start))
    [ "$rc" -eq 1 ] || { cat "$T/out"; fail "$2 on $1 ranks: exit $rc, not 1"; }
    [ "$took" -le 45 ] || { cat "$T/out"; fail "$2 on $1 ranks: $took s to end"; }
    n=$(grep -c "error: saving the checkpoint: .*run.h5.tmp: No space left on device" "$T/out")
    [ "$n" -eq "$1" ] || { cat "$T/out"; fail "$2 on $1 ranks: the reason on $n ranks"; }
    [ ! -e "$D/run.h5.tmp" ] && [ ! -e "$D/run.h5.tmp.reserve" ] || { ls -la "$D"; fail "$2: PATH.tmp left behind"; }
    if [ -e "$T/run.orig" ]; then
        cmp -s "$D/run.h5" "$T/run.orig" || fail "$2 on $1 ranks: the previous checkpoint changed"
        "$CKPT" verify -q "$D/run.h5" || fail "$2 on $1 ranks: the previous checkpoint does not verify"
    else
        [ ! -e "$D/run.h5" ] || fail "$2 on $1 ranks: a checkpoint appeared"
    fi
    echo "ok: $2 on $1 ranks: exit 1 after $took s; $(grep -m1 'No space' "$T/out" | sed 's/.*mf_ckpt_save: //')"
}
for np in 1 2 3; do
    full "$np" "the space check"
    full "$np" "full in the middle of a tensor" MF_CKPT_SPACE_CHECK=0
done
# a disk with no room left at all, and the check off: the reserve for
# HDF5's metadata cannot be made, so nothing is written
head -c 4000000 /dev/zero >"$D/fill" 2>/dev/null
for np in 1 2; do full "$np" "a disk with no room" MF_CKPT_SPACE_CHECK=0; done
rm -f "$D/fill"
# remount_ro: $D read-only. A save in progress holds a file open for
# writing, and the kernel refuses (busy) to turn the mount read-only
# under it, so try again for a few seconds.
remount_ro() {
    i=0
    until mount -o remount,ro "$D" 2>"$T/mount.err"; do
        i=$((i + 1))
        [ $i -lt 200 ] || { cat "$T/mount.err"; fail "cannot remount $D read-only"; }
        sleep 0.02
    done
}

# a fresh disk of 200 KB, with no checkpoint on it yet
mv "$D/run.h5" "$T/run.first"
rm -f "$T/run.orig"
mount -o remount,size=200k "$D" || fail "cannot shrink $D"
for np in 2 3; do
    full "$np" "a fresh 200 KB disk"
    full "$np" "a fresh 200 KB disk, no space check" MF_CKPT_SPACE_CHECK=0
done

# the file system turns read-only during the run: the next save fails on
# every rank with the reason, and the last checkpoint stays (a disk with
# room for two checkpoints)
rm -f "$D/run.h5"
mount -o remount,size=8m "$D" || fail "cannot grow $D"
# shellcheck disable=SC2086
timeout 120 "$MPIEXEC" -n 2 "$TRAIN" --progress lines $c --steps 100000 --save-every 20 --checkpoint "$D/run.h5" \
    >"$T/out" 2>&1 &
job=$!
wait_until 60 "the first checkpoint of the read-only case" has_lines 1 '^checkpoint ' "$T/out"
remount_ro
start=$(date +%s)
wait "$job"
rc=$?
took=$(($(date +%s) - start))
[ "$rc" -eq 1 ] && [ "$took" -le 45 ] || { cat "$T/out"; fail "read-only mid-run: exit $rc after $took s"; }
[ "$(grep -c "error: saving the checkpoint: .*Read-only file system" "$T/out")" -eq 2 ] ||
    { grep error "$T/out"; fail "read-only mid-run: the reason not on both ranks"; }
"$CKPT" verify -q "$D/run.h5" || fail "read-only mid-run: the last checkpoint does not verify"
echo "ok: a file system turned read-only mid-run: $(grep -m1 'Read-only' "$T/out" | sed 's/.*mf_ckpt_save: //')"

# a read-only file system: refused before training, on every rank
remount_ro
# shellcheck disable=SC2086
timeout 60 "$MPIEXEC" -n 2 "$TRAIN" $c --steps 3 --checkpoint "$D/run.h5" >"$T/out" 2>&1
rc=$?
[ "$rc" -eq 2 ] || { cat "$T/out"; fail "read-only: exit $rc, not 2"; }
[ "$(grep -c "cannot write checkpoints into $D: Read-only file system" "$T/out")" -eq 2 ] ||
    { cat "$T/out"; fail "read-only: not reported on both ranks"; }
grep -q "^step " "$T/out" && fail "read-only: it trained before refusing"
echo "ok: a read-only file system is refused before training on every rank"
