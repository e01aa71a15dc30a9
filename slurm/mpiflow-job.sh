# shellcheck shell=bash
# slurm/mpiflow-job.sh - what every mpiflow batch script shares (sourced
# by the *.sbatch scripts next to it).
#
#   mf_job_setup      threads per rank from --cpus-per-task, the checkpoint
#                     path from the job name and id, and --resume when a
#                     requeued job finds its checkpoint
#   mf_job_run ARGS   mpiflow-train ARGS on the job's tasks: srun --mpi=pmi2
#                     (MPICH's PMI), or mpiexec where srun cannot launch;
#                     SIGUSR1 to this script (sbatch --signal=B:USR1@T) is
#                     passed to the ranks, which checkpoint after the current
#                     step and exit 0, and the job is requeued
#
# To adapt on a cluster (environment, or edit the scripts):
#   MPIFLOW_HOME  the mpiflow build or install directory (default: where
#                 you ran sbatch)
#   MF_CKPT_DIR   where checkpoints go (default: the job's directory, sbatch --chdir;
#                 a parallel file system on a real cluster)
#   MF_LAUNCHER   srun or mpiexec (default: srun if it offers pmi2)
#   MF_REQUEUE    0: do not requeue after SIGUSR1 (default 1)
#   MF_TRAIN_ARGS more mpiflow-train flags, appended (%r in them becomes
#                 the restart count, e.g. --metrics run-%r.csv)

mf_job_setup() {
    : "${MPIFLOW_HOME:=${SLURM_SUBMIT_DIR:-.}}"
    MF_TRAIN=""
    for t in "$MPIFLOW_HOME/mpiflow-train" "$MPIFLOW_HOME/bin/mpiflow-train" "$(command -v mpiflow-train)"; do
        if [ -n "$t" ] && [ -x "$t" ]; then
            MF_TRAIN=$t
            break
        fi
    done
    if [ -z "$MF_TRAIN" ]; then
        echo "mpiflow-job: mpiflow-train is not in $MPIFLOW_HOME or on PATH; set MPIFLOW_HOME" >&2
        exit 2
    fi
    # one compute thread per CPU Slurm gave each task
    MF_THREADS=${SLURM_CPUS_PER_TASK:-1}
    OMP_NUM_THREADS=$MF_THREADS
    OPENBLAS_NUM_THREADS=$MF_THREADS
    export MF_THREADS OMP_NUM_THREADS OPENBLAS_NUM_THREADS
    MF_CKPT="${MF_CKPT_DIR:-$PWD}/${SLURM_JOB_NAME:-mpiflow}-${SLURM_JOB_ID:-0}.h5"
    MF_RESUME=()
    if [ -f "$MF_CKPT" ]; then   # a requeued job: the same id, so the same checkpoint
        MF_RESUME=(--resume "$MF_CKPT")
        echo "mpiflow-job: job $SLURM_JOB_ID restart ${SLURM_RESTART_COUNT:-0}: resuming from $MF_CKPT"
    fi
    echo "mpiflow-job: job ${SLURM_JOB_ID:-?} on ${SLURM_JOB_NUM_NODES:-1} node(s) (${SLURM_JOB_NODELIST:-}), ${SLURM_NTASKS:-1} rank(s) x $MF_THREADS thread(s); checkpoint $MF_CKPT"
}

mf_job_run() {
    local launcher=${MF_LAUNCHER:-} extra=${MF_TRAIN_ARGS:-}
    extra=${extra//%r/${SLURM_RESTART_COUNT:-0}}
    if [ -z "$launcher" ]; then
        if command -v srun >/dev/null 2>&1 && srun --mpi=list 2>&1 | grep -q pmi2; then launcher=srun; else launcher=mpiexec; fi
    fi
    # shellcheck disable=SC2086
    case "$launcher" in
    srun) srun --mpi=pmi2 --kill-on-bad-exit=1 "$MF_TRAIN" "$@" "${MF_RESUME[@]}" $extra & ;;
    mpiexec) mpiexec -n "${SLURM_NTASKS:-1}" "$MF_TRAIN" "$@" "${MF_RESUME[@]}" $extra & ;;
    *)
        echo "mpiflow-job: MF_LAUNCHER=$launcher is not srun or mpiexec" >&2
        return 2
        ;;
    esac
    local pid=$! rc=0
    MF_STOPPED=0
    # the time limit is near: the ranks checkpoint after this step and exit 0
    trap 'MF_STOPPED=1; echo "mpiflow-job: SIGUSR1: asking the ranks to checkpoint and stop"; kill -USR1 $pid' USR1
    # preemption or scancel: Slurm signals the ranks itself
    trap 'MF_STOPPED=1' TERM
    wait "$pid"
    rc=$?
    while kill -0 "$pid" 2>/dev/null; do   # a trapped signal ends the wait early
        wait "$pid"
        rc=$?
    done
    trap - USR1 TERM
    echo "mpiflow-job: $launcher exited with $rc"
    if [ "$MF_STOPPED" = 1 ] && [ "$rc" = 0 ] && [ "${MF_REQUEUE:-1}" = 1 ] && [ -n "${SLURM_JOB_ID:-}" ]; then
        echo "mpiflow-job: requeueing job $SLURM_JOB_ID; it resumes from $MF_CKPT"
        scontrol requeue "$SLURM_JOB_ID"
    fi
    return "$rc"
}
