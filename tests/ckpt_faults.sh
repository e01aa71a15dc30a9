#!/bin/sh
# --resume is as strict as mpiflow-ckpt verify, sharing its checks: every
# damaged or incomplete checkpoint is refused before training, with
# exit 2, the name of the field or tensor on every rank, and the
# existing --checkpoint file untouched; and verify fails it too.
# - bytes flipped in the file's metadata (byte 700) and in a tensor;
# - each root, /data and /optim attribute deleted; step -5; step changed
#   in range (the header digest); the digest itself changed;
# - sbp "garbage(((" and a placement that does not fit the world;
# - a tensor without its checksum attribute;
# - a checkpoint beyond the run (--steps smaller than its step): a
#   clear error; exactly at the end: nothing left to train, exit 0;
# - another --seed than the checkpoint's (the data order would change);
# - --checkpoint naming a directory: refused before training.
[ -r "${top_srcdir:-.}/tests/lib.sh" ] || { echo "ERROR: no tests/lib.sh: run by make check, or set top_srcdir" >&2; exit 99; }
. "${top_srcdir:-.}/tests/lib.sh"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
T=$TMPDIR_TEST
CKPT="$top_builddir/mpiflow-ckpt"
EDIT="$top_builddir/tests/ckpt_edit"
c="--model mlp --dataset synthetic --synthetic-size 800,50 --batch-size 40 --seed 5 --threads 1 --no-eval"

# base.h5: 16 steps of momentum SGD (1 rank); keep.h5: a checkpoint a
# bad --resume must not touch
# shellcheck disable=SC2086
run_train 1 $c --optimizer momentum --steps 16 --checkpoint "$T/base.h5" >/dev/null
[ "$rc" -eq 0 ] || fail "base checkpoint: exit $rc"
"$CKPT" verify -q "$T/base.h5" || fail "the base checkpoint does not verify"
cp "$T/base.h5" "$T/keep.h5"
cp "$T/base.h5" "$T/keep.orig"

# refused FILE MESSAGE: verify fails FILE; --resume FILE on 2 ranks
# exits 2 with MESSAGE on both, and keep.h5 is untouched
refused() {
    "$CKPT" verify "$1" >"$T/verify" 2>&1
    [ $? -eq 1 ] || { cat "$T/verify"; fail "verify passed $(basename "$1") ($2)"; }
    # shellcheck disable=SC2086
    timeout 120 "$MPIEXEC" -n 2 "$TRAIN" $c --optimizer momentum --steps 20 --resume "$1" --checkpoint "$T/keep.h5" \
        >"$T/out" 2>&1
    rc=$?
    [ "$rc" -eq 2 ] || { cat "$T/out"; fail "--resume with $2: exit $rc, not 2"; }
    n=$(grep -c "error: --resume: .*$2" "$T/out")
    [ "$n" -eq 2 ] || { cat "$T/out"; fail "--resume with $2: the message on $n ranks, not 2"; }
    grep -q "^step " "$T/out" && fail "--resume with $2: it trained"
    cmp -s "$T/keep.h5" "$T/keep.orig" || fail "--resume with $2 changed the existing checkpoint"
    echo "ok: refused by verify and --resume: $2"
}
# edited OBJECT ATTR OP [VALUE]: a copy of base.h5 with one attribute changed
edited() {
    cp "$T/base.h5" "$T/e.h5"
    "$EDIT" "$T/e.h5" "$@" || fail "ckpt_edit $*"
    echo "$T/e.h5"
}

cp "$T/base.h5" "$T/flip.h5"
printf '\377' | dd of="$T/flip.h5" bs=1 seek=700 conv=notrunc 2>/dev/null
refused "$T/flip.h5" "flip.h5: [a-z]"
cp "$T/base.h5" "$T/flip2.h5"
size=$(stat -c %s "$T/base.h5")
printf '\125\252' | dd of="$T/flip2.h5" bs=1 seek=$((size / 3)) conv=notrunc 2>/dev/null
refused "$T/flip2.h5" "tensor '[a-z.]*' fails its checksum"
for a in step epoch world_size seed rng_draws created; do
    refused "$(edited / "$a" del)" "the attribute '$a' of the root is missing"
done
refused "$(edited / format del)" "the format attribute is '', not 'mpiflow-checkpoint'"
refused "$(edited / version del)" "checkpoint version 0; this mpiflow reads version 1"
refused "$(edited /data epoch del)" "the attribute 'epoch' of /data is missing"
refused "$(edited /data cursor del)" "the attribute 'cursor' of /data is missing"
for a in type step lr momentum weight_decay; do
    refused "$(edited /optim "$a" del)" "the attribute '$a' of /optim is missing"
done
refused "$(edited / step int -5)" "the attribute 'step' of the root is -5, outside"
refused "$(edited /data cursor int -640)" "the attribute 'cursor' of /data is -640, outside"
refused "$(edited / world_size int 0)" "the attribute 'world_size' of the root is 0, outside"
refused "$(edited / step int 50)" "the header (step, data position, optimizer attributes) fails its digest"
refused "$(edited /data cursor int 0)" "fails its digest"
refused "$(edited /optim step int 3)" "fails its digest"
refused "$(edited / header_digest int 12345)" "fails its digest"
refused "$(edited / step str sixteen)" "the attribute 'step' of the root is not one integer"
refused "$(edited / checksums str crc32)" "the attribute 'checksums' of the root is 'crc32'"
refused "$(edited /optim type str lbfgs)" "the optimizer type 'lbfgs' in /optim is none that mpiflow writes"
refused "$(edited /model/hidden.weight sbp str 'garbage(((')" "tensor 'hidden.weight' has sbp 'garbage((('"
refused "$(edited /model/hidden.weight sbp str 'S(3)')" "tensor 'hidden.weight' has sbp 'S(3)', which splits axis 3"
refused "$(edited /model/hidden.weight placement str '0-7 mesh 3x3')" "placement '0-7 mesh 3x3', which is no placement"
refused "$(edited /model/output.bias placement str '0-3')" "rank 1 is not in the world of 1 ranks"
refused "$(edited /model/output.bias checksum del)" "tensor 'output.bias' has no checksum attribute"
refused "$(edited /optim/hidden.weight/momentum_buffer checksum int 7)" "fails its checksum"

# a checkpoint beyond the run, and one at its end
# shellcheck disable=SC2086
timeout 120 "$MPIEXEC" -n 2 "$TRAIN" $c --optimizer momentum --steps 10 --resume "$T/base.h5" >"$T/out" 2>&1
rc=$?
[ "$rc" -eq 2 ] && [ "$(grep -c "base.h5 is at step 16, beyond the 10 steps of this run; resume with --steps 16" "$T/out")" -eq 2 ] ||
    { cat "$T/out"; fail "--resume beyond --steps: exit $rc"; }
echo "ok: a checkpoint beyond --steps is refused on every rank"
# shellcheck disable=SC2086
run_train 2 $c --optimizer momentum --steps 16 --resume "$T/base.h5" >/dev/null
[ "$rc" -eq 0 ] && grep -q "at step 16 of 16: nothing left to train" "$T/out" || fail "--resume at the end: exit $rc"
grep -q "samples_per_sec=-" "$T/out" && fail "--resume at the end: a negative rate"
echo "ok: a checkpoint at the end of the run: nothing left to train, exit 0"

# another --seed than the checkpoint's: the data order would change
# shellcheck disable=SC2086
timeout 120 "$MPIEXEC" -n 2 "$TRAIN" $c --optimizer momentum --steps 20 --seed 6 --resume "$T/base.h5" >"$T/out" 2>&1
rc=$?
[ "$rc" -eq 2 ] && [ "$(grep -c "base.h5 was written with --seed 5 but this run has --seed 6" "$T/out")" -eq 2 ] ||
    { cat "$T/out"; fail "--resume with another --seed: exit $rc"; }
echo "ok: another --seed than the checkpoint's is refused"

# --checkpoint naming a directory: refused before the first step
mkdir "$T/adir"
# shellcheck disable=SC2086
timeout 120 "$MPIEXEC" -n 2 "$TRAIN" $c --steps 5 --checkpoint "$T/adir" >"$T/out" 2>&1
rc=$?
[ "$rc" -eq 2 ] && [ "$(grep -c "adir exists and is not a file (a directory)" "$T/out")" -eq 2 ] ||
    { cat "$T/out"; fail "--checkpoint naming a directory: exit $rc"; }
grep -q "^step " "$T/out" && fail "--checkpoint naming a directory: it trained first"
echo "ok: --checkpoint naming a directory is refused before training"
echo "checkpoint faults: every damaged file refused by verify and --resume alike"
