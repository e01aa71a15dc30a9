# shellcheck shell=sh disable=SC2034
# tests/slurm_lib.sh - a private Slurm cluster on this one machine, for
# the Slurm tests (sourced after tests/lib.sh).
#
# slurm_up starts munged, slurmctld and two slurmd with `slurmd -N`, which
# emulate nodes n1 and n2 of 2 CPUs each on 127.0.0.1, all configured in
# a temporary directory with ports of their own; SLURM_CONF points the
# client commands at it. Everything is stopped by PID when the test
# exits. Without the Slurm or munge packages the test SKIPs (exit 77):
# it never passes without having run.

# slurm_need CMD...: SKIP unless every command is installed
slurm_need() {
    for c in "$@"; do
        command -v "$c" >/dev/null 2>&1 ||
            skip "$c is not installed (Debian packages slurm-wlm and munge; scripts/install-deps.sh installs them)"
    done
}

slurm_down() {
    [ -n "${SLURM_DIR:-}" ] || return 0
    for f in "$SLURM_DIR"/slurmd-n1.pid "$SLURM_DIR"/slurmd-n2.pid "$SLURM_DIR"/slurmctld.pid "$SLURM_DIR"/munged.pid; do
        [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null
    done
    sleep 1
    for f in "$SLURM_DIR"/slurmd-n1.pid "$SLURM_DIR"/slurmd-n2.pid "$SLURM_DIR"/slurmctld.pid "$SLURM_DIR"/munged.pid; do
        [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null
    done
    return 0
}

# slurm_log: the daemons' logs, for a failure
slurm_log() {
    for f in "$SLURM_DIR"/slurmctld.log "$SLURM_DIR"/slurmd-n1.log "$SLURM_DIR"/munged.log; do
        [ -f "$f" ] && { echo "== $f"; tail -20 "$f"; }
    done
}

slurm_up() {
    slurm_need munged mungekey slurmctld slurmd sbatch srun scontrol sinfo squeue
    SLURM_DIR="$TMPDIR_TEST/slurm"
    S=$SLURM_DIR
    mkdir -p "$S/state" "$S/spool/n1" "$S/spool/n2" || fail "cannot make $S"
    chmod 700 "$S"
    trap 'slurm_down; rm -rf "$TMPDIR_TEST"' EXIT
    user=$(id -un)
    host=$(hostname)
    base=$((20000 + $$ % 20000))   # ports of our own: another test's cluster may be up
    mungekey -c -k "$S/munge.key" -b 1024 2>/dev/null || fail "mungekey failed"
    chmod 400 "$S/munge.key"
    munged -f --key-file="$S/munge.key" --socket="$S/munge.sock" --pid-file="$S/munged.pid" \
        --log-file="$S/munged.log" --seed-file="$S/munged.seed" || fail "munged did not start"
    cat >"$S/slurm.conf" <<EOF
ClusterName=mftest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$base
SlurmdPort=$((base + 1))
AuthType=auth/munge
AuthInfo=socket=$S/munge.sock
CredType=cred/munge
SlurmUser=$user
SlurmdUser=$user
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool/%n
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd-%n.pid
SlurmctldLogFile=$S/slurmctld.log
SlurmdLogFile=$S/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=pmi2
SlurmdParameters=config_overrides
ReturnToService=2
JobRequeue=1
KillWait=5
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
NodeName=n1 NodeHostname=$host NodeAddr=127.0.0.1 Port=$((base + 2)) CPUs=2 State=UNKNOWN
NodeName=n2 NodeHostname=$host NodeAddr=127.0.0.1 Port=$((base + 3)) CPUs=2 State=UNKNOWN
PartitionName=debug Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
    printf 'CgroupPlugin=autodetect\nIgnoreSystemd=yes\n' >"$S/cgroup.conf"
    SLURM_CONF="$S/slurm.conf"
    export SLURM_CONF
    slurmctld -f "$SLURM_CONF" || { slurm_log; fail "slurmctld did not start"; }
    slurmd -N n1 -f "$SLURM_CONF" || { slurm_log; fail "slurmd n1 did not start"; }
    slurmd -N n2 -f "$SLURM_CONF" || { slurm_log; fail "slurmd n2 did not start"; }
    i=0
    until [ "$(sinfo -h -N -t idle -o '%N' 2>/dev/null | sort -u | wc -l)" -eq 2 ]; do
        i=$((i + 1))
        [ "$i" -le 60 ] || { sinfo; slurm_log; fail "the 2 nodes did not come up idle within 30 s"; }
        sleep 0.5
    done
    echo "slurm: controller on port $base, nodes n1 n2 idle ($S)"
}

# slurm_wait JOBID SECONDS: waits until the job has ended; prints its state
slurm_wait() {
    i=0
    while :; do
        state=$(scontrol -o show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n 's/^JobState=//p')
        case "$state" in
        COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE | PREEMPTED)
            echo "$state"
            return 0
            ;;
        esac
        i=$((i + 1))
        if [ "$i" -gt $(($2 * 2)) ]; then
            echo "TIMEOUT_WAITING($state)"
            return 1
        fi
        sleep 0.5
    done
}
