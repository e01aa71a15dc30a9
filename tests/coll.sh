#!/bin/sh
# The collective algorithms (test_coll) on 2, 3 and 4 ranks (3: not a
# power of two), on emulated nodes (4 ranks as 2 nodes of 2, 3 ranks as
# uneven nodes, 4 nodes of 1), and the global-tensor suite with each
# algorithm forced (boxing P -> B, P -> S and S -> B run through them,
# with uneven pieces). make check runs test_coll on 1 rank as an
# ordinary suite too.
[ -r "${top_srcdir:-.}/tests/lib.sh" ] || { echo "ERROR: no tests/lib.sh: run by make check, or set top_srcdir" >&2; exit 99; }
. "${top_srcdir:-.}/tests/lib.sh"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
for np in 2 3 4; do
    run_suite "$np" test_coll
done
run_suite 4 test_coll MF_RANKS_PER_NODE=2
run_suite 3 test_coll MF_RANKS_PER_NODE=2
run_suite 4 test_coll MF_RANKS_PER_NODE=1
# gradient buckets equal one sync per parameter
run_suite 2 test_grad_sync
run_suite 3 test_grad_sync
run_suite 4 test_grad_sync MF_RANKS_PER_NODE=2
# deterministic mode: every algorithm gives rank order's bits
run_suite 3 test_coll MF_DETERMINISTIC=1
run_suite 4 test_coll MF_DETERMINISTIC=1 MF_RANKS_PER_NODE=2
for algo in ring rhd; do
    run_suite 3 test_global MF_ALLREDUCE_ALGO=$algo
done
run_suite 3 test_global MF_REDUCE_SCATTER_ALGO=ring MF_ALLGATHER_ALGO=ring
run_suite 4 test_global MF_RANKS_PER_NODE=2 MF_ALLREDUCE_ALGO=hier MF_REDUCE_SCATTER_ALGO=hier MF_ALLGATHER_ALGO=hier
# a forced algorithm the collective does not have is an error on every rank
env MF_REDUCE_SCATTER_ALGO=rhd MF_NP=2 timeout 300 "$top_srcdir/tests/mpirun.sh" "$top_builddir/tests/test_global" \
    >"$TMPDIR_TEST/out" 2>&1 && fail "MF_REDUCE_SCATTER_ALGO=rhd was accepted"
[ "$(grep -c "MF_REDUCE_SCATTER_ALGO: reduce-scatter has no 'rhd' algorithm" "$TMPDIR_TEST/out")" -eq 2 ] ||
    { cat "$TMPDIR_TEST/out"; fail "MF_REDUCE_SCATTER_ALGO=rhd: no clear message on both ranks"; }
# a bad value stops mpiflow-train at start-up: exit 2, the message on every rank
MF_ALLREDUCE_ALGO=butterfly "$MPIEXEC" -n 2 "$top_builddir/mpiflow-train" --dataset synthetic --steps 2 --no-eval \
    >"$TMPDIR_TEST/out" 2>&1
rc=$?
[ "$rc" -eq 2 ] || { cat "$TMPDIR_TEST/out"; fail "MF_ALLREDUCE_ALGO=butterfly: exit $rc, not 2"; }
[ "$(grep -c "MF_ALLREDUCE_ALGO='butterfly' is not one of auto, mpi, ring, rhd, hier" "$TMPDIR_TEST/out")" -eq 2 ] ||
    { cat "$TMPDIR_TEST/out"; fail "MF_ALLREDUCE_ALGO=butterfly: no clear message on both ranks"; }
# a tuning file decides 'auto' for the layouts it describes
T=$TMPDIR_TEST
auto_at() {   # auto_at NP FILE OP [ENV...]: what auto ran at 256 KiB
    np=$1
    file=$2
    op=$3
    shift 3
    env MF_COLL_TUNING="$file" "$@" "$MPIEXEC" -n "$np" "$top_builddir/mpiflow-bench" "$op" --min-kb 256 --max-mb 0.25 \
        --reps 3 >"$T/bench" 2>&1 || { cat "$T/bench"; fail "mpiflow-bench $op with $file: exit $?"; }
    awk '$1 ~ /^[0-9]+$/ { print $(NF - 4) }' "$T/bench"
}
printf '# by hand\nallreduce 2 1 0 mpi\nallreduce 2 1 131072 ring # from 128 KiB\nallgather 2 1 0 mpi\nallreduce 4 1 0 rhd\n' \
    >"$T/tune.txt"
[ "$(auto_at 2 "$T/tune.txt" allreduce)" = ring ] || { cat "$T/bench"; fail "tuning file: 2-rank allreduce is not ring"; }
[ "$(auto_at 2 "$T/tune.txt" allgather)" = mpi ] || { cat "$T/bench"; fail "tuning file: 2-rank allgather is not mpi"; }
sed -i 's/131072 ring/131072 rhd/' "$T/tune.txt"
[ "$(auto_at 2 "$T/tune.txt" allreduce)" = rhd ] || { cat "$T/bench"; fail "tuning file: the edited rule did not take"; }
[ "$(auto_at 2 "$T/tune.txt" allreduce MF_ALLREDUCE_ALGO=hier)" = hier ] || fail "MF_ALLREDUCE_ALGO does not override the tuning file"
echo "ok: a tuning file's rules decide auto, MF_ALLREDUCE_ALGO overrides them"
# mpiflow-bench tune writes one that loads, and keeps the rules of other layouts
"$MPIEXEC" -n 2 "$top_builddir/mpiflow-bench" tune --out "$T/tune.txt" --min-kb 64 --max-mb 0.25 --reps 3 --rounds 1 \
    >"$T/bench" 2>&1 || { cat "$T/bench"; fail "mpiflow-bench tune: exit $?"; }
grep -q "^allreduce  *4 1 0 rhd" "$T/tune.txt" || { cat "$T/tune.txt"; fail "tune dropped the 4-rank rule"; }
grep -q "^allreduce  *2 1 131072 rhd" "$T/tune.txt" && fail "tune kept the old 2-rank rules"
for op in allreduce reduce_scatter allgather; do
    grep -q "^$op  *2 1 0 " "$T/tune.txt" || { cat "$T/tune.txt"; fail "tune wrote no 2-rank $op rule from 0 bytes"; }
done
picked=$(auto_at 2 "$T/tune.txt" reduce_scatter)
want=$(awk '$1 == "reduce_scatter" && $2 == 2 && $4 <= 262144 { a = $5 } END { print a }' "$T/tune.txt")
[ "$picked" = "$want" ] || { cat "$T/tune.txt" "$T/bench"; fail "auto ran $picked, the tuned file says $want"; }
echo "ok: mpiflow-bench tune's file loads and auto follows it ($want for a 256 KiB reduce-scatter)"
# tune --verify loads the file it wrote and its tables follow it, in the same run
"$MPIEXEC" -n 2 "$top_builddir/mpiflow-bench" tune --out "$T/tune2.txt" --verify --min-kb 64 --max-mb 0.25 --reps 3 \
    --rounds 1 >"$T/bench" 2>&1 || { cat "$T/bench"; fail "mpiflow-bench tune --verify: exit $?"; }
for op in allreduce reduce_scatter allgather; do
    ran=$(awk -v op="$op" '$1 ~ /,$/ { cur = $1; sub(/,$/, "", cur) } cur == op && $1 == 262144 { print $(NF - 4) }' "$T/bench")
    want=$(awk -v op="$op" '$1 == op && $2 == 2 && $4 <= 262144 { a = $5 } END { print a }' "$T/tune2.txt")
    [ -n "$ran" ] && [ "$ran" = "$want" ] || { cat "$T/tune2.txt" "$T/bench"; fail "tune --verify: $op auto ran '$ran', the file says $want"; }
done
echo "ok: tune --verify's tables follow the file it wrote"
# a bad tuning file stops the program at start-up, naming the line
printf 'allreduce 2 1 0 ring\nallgather 2 1 0 rhd\n' >"$T/bad.txt"
MF_COLL_TUNING="$T/bad.txt" "$MPIEXEC" -n 2 "$top_builddir/mpiflow-train" --dataset synthetic --steps 2 --no-eval \
    >"$T/out" 2>&1
rc=$?
[ "$rc" -eq 2 ] || { cat "$T/out"; fail "a bad tuning file: exit $rc, not 2"; }
[ "$(grep -c "MF_COLL_TUNING=$T/bad.txt: line 2: allgather has no rhd algorithm" "$T/out")" -eq 2 ] ||
    { cat "$T/out"; fail "a bad tuning file: no clear message on both ranks"; }
MF_COLL_TUNING="$T/none.txt" "$MPIEXEC" -n 2 "$top_builddir/mpiflow-train" --dataset synthetic --steps 2 --no-eval \
    >"$T/out" 2>&1
[ "$(grep -c "MF_COLL_TUNING=$T/none.txt: cannot open it" "$T/out")" -eq 2 ] || { cat "$T/out"; fail "a missing tuning file"; }
echo "ok: a bad or missing tuning file is an error at start-up"
# topology: 4 ranks as 2 emulated nodes of 2, and 3 ranks as nodes of 2 and 1
"$MPIEXEC" -n 4 -genv MF_RANKS_PER_NODE 2 "$top_builddir/mpiflow-bench" topo >"$TMPDIR_TEST/topo" 2>&1 ||
    fail "mpiflow-bench topo: exit $?"
cat "$TMPDIR_TEST/topo"
grep -q "^rank 3 of 4: node 1 of 2 (emulated, MF_RANKS_PER_NODE=2), local rank 1 of 2; machine: .* core(s)" \
    "$TMPDIR_TEST/topo" || fail "topo: rank 3 is not local rank 1 of node 1"
[ "$(grep -c "node 0 of 2" "$TMPDIR_TEST/topo")" -eq 2 ] || fail "topo: node 0 should have 2 ranks"
"$MPIEXEC" -n 3 -genv MF_RANKS_PER_NODE 2 "$top_builddir/mpiflow-bench" topo >"$TMPDIR_TEST/topo" 2>&1
grep -q "^rank 2 of 3: node 1 of 2 (emulated, MF_RANKS_PER_NODE=2), local rank 0 of 1" "$TMPDIR_TEST/topo" ||
    { cat "$TMPDIR_TEST/topo"; fail "topo: uneven emulated nodes"; }
"$MPIEXEC" -n 2 "$top_builddir/mpiflow-bench" topo >"$TMPDIR_TEST/topo" 2>&1
grep -q "^rank 1 of 2: node 0 of 1, local rank 1 of 2" "$TMPDIR_TEST/topo" || fail "topo: one real node"
# binding: each of 2 ranks gets its own core when the machine has 2 or
# more; a launcher's binding is kept; MF_BIND=none leaves it alone
cores=$(nproc --all)
if [ "$cores" -ge 2 ]; then
    grep -q "^rank 1 of 2: .*bound to PUs [0-9,-]* (bound by mpiflow to cores\? [0-9-]*; waits spin: 2 rank(s) share [0-9]* CPU(s))" "$TMPDIR_TEST/topo" ||
        { cat "$TMPDIR_TEST/topo"; fail "topo: rank 1 was not bound to its cores"; }
fi
"$MPIEXEC" -n 2 -bind-to core "$top_builddir/mpiflow-bench" topo >"$TMPDIR_TEST/topo" 2>&1
grep -q "(bound by the launcher; " "$TMPDIR_TEST/topo" || { cat "$TMPDIR_TEST/topo"; fail "topo: launcher binding"; }
MF_BIND=none "$MPIEXEC" -n 2 "$top_builddir/mpiflow-bench" topo >"$TMPDIR_TEST/topo" 2>&1
grep -q "(not bound: MF_BIND=none; " "$TMPDIR_TEST/topo" || { cat "$TMPDIR_TEST/topo"; fail "topo: MF_BIND=none"; }
# waiting: ranks that outnumber the CPUs yield them while they wait;
# MF_WAIT forces either way, and the collectives work both ways
if [ "$cores" -lt 4 ]; then
    "$MPIEXEC" -n 4 "$top_builddir/mpiflow-bench" topo >"$TMPDIR_TEST/topo" 2>&1
    [ "$(grep -c "waits yield: 4 rank(s) share $cores CPU(s))" "$TMPDIR_TEST/topo")" -eq 4 ] ||
        { cat "$TMPDIR_TEST/topo"; fail "topo: 4 ranks on $cores cores do not wait politely"; }
fi
MF_WAIT=yield "$MPIEXEC" -n 2 "$top_builddir/mpiflow-bench" topo >"$TMPDIR_TEST/topo" 2>&1
[ "$(grep -c "waits yield: 2 rank(s) share [0-9]* CPU(s) (MF_WAIT))" "$TMPDIR_TEST/topo")" -eq 2 ] ||
    { cat "$TMPDIR_TEST/topo"; fail "topo: MF_WAIT=yield"; }
run_suite 2 test_coll MF_WAIT=yield
run_suite 3 test_coll MF_WAIT=yield
run_suite 4 test_coll MF_WAIT=spin
run_suite 3 test_global MF_WAIT=yield MF_ALLREDUCE_ALGO=mpi MF_REDUCE_SCATTER_ALGO=mpi MF_ALLGATHER_ALGO=mpi
MF_WAIT=sometimes "$MPIEXEC" -n 2 "$top_builddir/mpiflow-train" --dataset synthetic --steps 2 --no-eval \
    >"$TMPDIR_TEST/out" 2>&1
rc=$?
[ "$rc" -eq 2 ] || { cat "$TMPDIR_TEST/out"; fail "MF_WAIT=sometimes: exit $rc, not 2"; }
[ "$(grep -c "MF_WAIT=sometimes: expected spin, yield or auto" "$TMPDIR_TEST/out")" -eq 2 ] ||
    { cat "$TMPDIR_TEST/out"; fail "MF_WAIT=sometimes: no clear message on both ranks"; }
echo "ok: waits yield where ranks outnumber the CPUs, MF_WAIT decides otherwise"
echo "collectives: every algorithm on 1-4 ranks and emulated nodes; boxing through ring, rhd and hier"
