#!/bin/sh
# Slurm, for real: a private cluster of 2 emulated nodes (tests/slurm_lib.sh)
# - srun --mpi=pmi2 starts the ranks with MPICH's PMI; each sees Slurm's
#   node (SLURM_NODEID) and local rank, and the threads --cpus-per-task gives;
# - every script in slurm/ runs as a batch job (a short synthetic run):
#   its output ends in the final line, its parallel layout is the one the
#   script asks for, and its checkpoint verifies and names the step;
# - the mpiexec fallback inside an allocation;
# - the watchdog (MF_TIMEOUT) names the rank that skipped a collective
#   and ends the srun step instead of letting it hang;
# - preemption: SIGUSR1 to a running job (as sbatch --signal=B:USR1@T
#   sends it) makes the ranks checkpoint and exit 0, the script requeues
#   the job, and the requeued job resumes with the uninterrupted losses
#   bit for bit.
# SKIPs (77) when the Slurm or munge packages are not installed.
[ -r "${top_srcdir:-.}/tests/lib.sh" ] || { echo "ERROR: no tests/lib.sh: run by make check, or set top_srcdir" >&2; exit 99; }
. "${top_srcdir:-.}/tests/lib.sh"
. "$top_srcdir/tests/slurm_lib.sh" || harness_error "no tests/slurm_lib.sh"
T=$TMPDIR_TEST
slurm_up
MPIFLOW_HOME=$(cd "$top_builddir" && pwd)
SCRIPTS=$(cd "$top_srcdir/slurm" && pwd)
export MPIFLOW_HOME
# the scripts source $MPIFLOW_HOME/slurm/mpiflow-job.sh: a build tree outside the source tree has no slurm/
[ -f "$MPIFLOW_HOME/slurm/mpiflow-job.sh" ] || { mkdir -p "$T/home" && ln -s "$MPIFLOW_HOME"/mpiflow-* "$T/home/" &&
    ln -s "$SCRIPTS" "$T/home/slurm" && MPIFLOW_HOME="$T/home"; }

# srun with PMI2: 2 nodes x 2 ranks, 1 CPU each
OPENBLAS_NUM_THREADS=1 timeout 120 srun -N2 --ntasks-per-node=2 --cpus-per-task=1 --mpi=pmi2 \
    "$MPIFLOW_HOME/mpiflow-bench" topo >"$T/topo" 2>&1 || { cat "$T/topo"; slurm_log; fail "srun --mpi=pmi2: exit $?"; }
cat "$T/topo"
for r in 0 1 2 3; do
    n=$((r / 2))
    grep -q "^rank $r of 4: node $n of 2 (Slurm's SLURM_NODEID), local rank $((r % 2)) of 2" "$T/topo" ||
        fail "rank $r does not see Slurm's node $n"
done

# the watchdog under srun: rank 2 (on node n2) skips a gather; the step ends, reported, instead of hanging
start=$(date +%s)
MF_TIMEOUT=2 OPENBLAS_NUM_THREADS=1 timeout 90 srun -N2 -n3 --mpi=pmi2 "$top_builddir/tests/watchdog_skip" >"$T/wd" 2>&1
rc=$?
cat "$T/wd"
# srun reports the highest of its tasks' exits: 3 from the rank that
# aborted, or 128 + 9 when Slurm killed the step's other tasks first
[ "$rc" -ne 124 ] || fail "srun with a skipped collective: exit 124: it hung"
[ "$rc" -eq 3 ] || [ "$rc" -eq 137 ] || fail "srun with a skipped collective: exit $rc, not 3 (or 137: the other tasks killed)"
grep -q "in allgather #[0-9]* on ranks 0-2 (boxing 'weights' .*); not arrived: rank 2 (at #" "$T/wd" ||
    fail "the watchdog did not name rank 2 under srun"
echo "ok: under srun, the watchdog named rank 2 and the step ended with $rc after $(($(date +%s) - start)) s"

# submit SCRIPT NAME [ENV=VALUE,...]: (values without commas: sbatch --export splits there) runs slurm/SCRIPT as a batch job in $T; sets $job and $out
submit() {
    job=$(sbatch --parsable --chdir="$T" --export="ALL,MPIFLOW_HOME=$MPIFLOW_HOME${3:+,$3}" "$SCRIPTS/$1") ||
        fail "sbatch $1 failed"
    out="$T/$2-$job.out"
}
short="MF_TRAIN_ARGS=--dataset synthetic --synthetic-size 640 --log-every 1 --save-every 4 --no-eval"
for s in "single-node.sbatch:mpiflow-1node:parallel dp on ranks 0-1" \
    "multi-node-dp.sbatch:mpiflow-dp:parallel dp on ranks 0-3" \
    "hybrid-2d.sbatch:mpiflow-2d:parallel 2d on mesh 2x2" \
    "pipeline.sbatch:mpiflow-pp:parallel pipeline of 2 stage(s) x dp on 2 rank(s) each"; do
    script=${s%%:*}
    rest=${s#*:}
    name=${rest%%:*}
    want=${rest#*:}
    submit "$script" "$name" "$short"
    state=$(slurm_wait "$job" 300)
    [ "$state" = COMPLETED ] || { cat "$out"; slurm_log; fail "$script: job $job ended $state"; }
    grep -q "^final test_accuracy=nan .* steps=10 " "$out" || { cat "$out"; fail "$script: no final line"; }
    grep -q "$want" "$out" || { cat "$out"; fail "$script: not '$want'"; }
    grep -q "rank(s) x 1 thread(s)" "$out" || fail "$script: not 1 thread per rank (--cpus-per-task=1)"
    ckpt="$T/$name-$job.h5"
    "$MPIFLOW_HOME/mpiflow-ckpt" verify "$ckpt" >/dev/null || fail "$script: the checkpoint $ckpt does not verify"
    "${H5DUMP:-h5dump}" -a /step "$ckpt" | grep -q "(0): 10" || fail "$script: the checkpoint is not at step 10"
    echo "ok: $script: job $job completed ($want), checkpoint at step 10"
done

# a GPT: tensor parallel inside each node, data parallel across the two
awk 'BEGIN { srand(3); for (i = 0; i < 400; i++) print "the cat sat on the mat", i % 7, "and the dog ran." }' >"$T/gpt.txt"
submit gpt-tp.sbatch mpiflow-gpt "MF_TRAIN_ARGS=--dataset text:$T/gpt.txt --n-layer 2 --n-head 2 --n-embd 32 --seq-len 16 --batch-size 8 --steps 10 --log-every 1 --save-every 4 --no-eval"
state=$(slurm_wait "$job" 300)
[ "$state" = COMPLETED ] || { cat "$out"; slurm_log; fail "gpt-tp.sbatch: job $job ended $state"; }
grep -q "parallel tp: 2 data-parallel x 2 tensor-parallel ranks" "$out" || { cat "$out"; fail "gpt-tp.sbatch: not a 2x2 dp x tp mesh"; }
grep -q "^final val_loss=nan .* steps=10 " "$out" || { cat "$out"; fail "gpt-tp.sbatch: no final line"; }
"$MPIFLOW_HOME/mpiflow-ckpt" verify "$T/mpiflow-gpt-$job.h5" >/dev/null || fail "gpt-tp.sbatch: the checkpoint does not verify"
echo "ok: gpt-tp.sbatch: job $job trained a GPT on 2 nodes, tensor parallel inside each"

# the mpiexec fallback inside the allocation
submit single-node.sbatch mpiflow-1node "MF_LAUNCHER=mpiexec,$short"
state=$(slurm_wait "$job" 300)
[ "$state" = COMPLETED ] || { cat "$out"; fail "single-node.sbatch with MF_LAUNCHER=mpiexec: $state"; }
grep -q "mpiexec exited with 0" "$out" && grep -q "^final " "$out" || { cat "$out"; fail "mpiexec fallback"; }
echo "ok: single-node.sbatch under mpiexec: job $job completed"

# preemption: SIGUSR1 to the batch shell mid-run, requeue, resume
long="MF_TRAIN_ARGS=--dataset synthetic --synthetic-size 3840 --log-every 1 --no-eval --metrics $T/pre-%r.csv"
submit multi-node-dp.sbatch mpiflow-dp "$long"
pre=$job
i=0
until [ -f "$T/pre-0.csv" ] && [ "$(wc -l <"$T/pre-0.csv")" -ge 8 ]; do   # some steps done
    i=$((i + 1))
    [ "$i" -le 240 ] || { cat "$T/mpiflow-dp-$pre.out"; fail "the job to preempt did not start training"; }
    sleep 0.5
done
scancel --signal=USR1 --batch "$pre" || fail "scancel --signal=USR1 failed"
i=0
until [ -f "$T/pre-1.csv" ] && grep -q "^final " "$T/mpiflow-dp-$pre.out"; do   # requeued, resumed, finished
    i=$((i + 1))
    [ "$i" -le 600 ] || { cat "$T/mpiflow-dp-$pre.out"; slurm_log; fail "job $pre did not resume and finish"; }
    sleep 0.5
done
state=$(slurm_wait "$pre" 120)
[ "$state" = COMPLETED ] || fail "the requeued job $pre ended $state"
grep -q "SIGUSR1: stopped after step" "$T/mpiflow-dp-$pre.out" || fail "the ranks did not stop on SIGUSR1"
grep -q "requeueing job $pre" "$T/mpiflow-dp-$pre.out" || fail "the script did not requeue"
grep -q "restart 1: resuming from" "$T/mpiflow-dp-$pre.out" || fail "the requeued job did not resume"
# the same job uninterrupted
submit multi-node-dp.sbatch mpiflow-dp "MF_TRAIN_ARGS=--dataset synthetic --synthetic-size 3840 --log-every 1 --no-eval --metrics $T/straight.csv"
state=$(slurm_wait "$job" 600)
[ "$state" = COMPLETED ] || fail "the uninterrupted job ended $state"
stopped=$(($(wc -l <"$T/pre-0.csv") - 1))
{ cat "$T/pre-0.csv"; tail -n +2 "$T/pre-1.csv"; } | cut -d, -f1,3 >"$T/joined"
cut -d, -f1,3 "$T/straight.csv" >"$T/straight"
cmp -s "$T/joined" "$T/straight" || { diff "$T/joined" "$T/straight" | head; fail "preempted and resumed losses differ"; }
echo "ok: job $pre stopped by SIGUSR1 after step $stopped, requeued, resumed: all 60 losses equal the uninterrupted run's bit for bit"
echo "slurm: srun/PMI2 topology, 4 batch scripts and a tensor-parallel GPT, mpiexec fallback, preemption with requeue"
