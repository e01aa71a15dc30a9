#!/bin/sh
# MF_TIMEOUT: one rank skips a boxing op (tests/watchdog_skip.c); instead
# of hanging, the job ends within seconds with exit status 3 and a
# report naming the op, its sequence number, the tensor and the rank that
# has not arrived. A bad MF_TIMEOUT is refused at start-up.
[ -r "${top_srcdir:-.}/tests/lib.sh" ] || { echo "ERROR: no tests/lib.sh: run by make check, or set top_srcdir" >&2; exit 99; }
. "${top_srcdir:-.}/tests/lib.sh"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
T=$TMPDIR_TEST
start=$(date +%s)
MF_TIMEOUT=2 timeout 60 "$MPIEXEC" -n 3 "$top_builddir/tests/watchdog_skip" >"$T/out" 2>&1
rc=$?
took=$(($(date +%s) - start))
cat "$T/out"
[ "$rc" -ne 124 ] || fail "the job hung until timeout(1) killed it"
[ "$rc" -eq 3 ] || fail "the job exited $rc, not 3 (the watchdog's documented exit status)"
[ "$took" -le 40 ] || fail "the job took $took s to end"
grep -q "mpiflow watchdog: rank [01] has waited [0-9.]* s in allgather #[0-9]* on ranks 0-2 (boxing 'weights' f32 \[12,3\] S(0) -> B); not arrived: rank 2 (at #[0-9]* there; now not communicating)" "$T/out" ||
    fail "no report naming the allgather, the tensor and rank 2"
grep -q "aborting the job (MF_TIMEOUT=2)" "$T/out" || fail "no abort line"
echo "ok: the skipped allgather was reported and the job ended with $rc after $took s"
MF_TIMEOUT=soon "$MPIEXEC" -n 2 "$top_builddir/mpiflow-train" --steps 1 --dataset synthetic >"$T/bad" 2>&1
rc=$?
[ "$rc" -eq 2 ] || { cat "$T/bad"; fail "MF_TIMEOUT=soon: exit $rc, expected 2"; }
[ "$(grep -c "MF_TIMEOUT='soon' is not a number of seconds" "$T/bad")" -eq 2 ] || { cat "$T/bad"; fail "MF_TIMEOUT=soon: not on both ranks"; }
echo "ok: MF_TIMEOUT=soon refused on every rank"
