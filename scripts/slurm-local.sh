#!/usr/bin/env bash
# A real one-node SLURM cluster on this machine (Debian 12: slurm-wlm 22.05 + munge), for the SLURM test
# (tests/test_slurm.py) and the DAG run through profiles/slurm-local. Needs root. Every command is idempotent.
#
#   scripts/slurm-local.sh install   # apt-get install slurm-wlm munge (skipped when installed)
#   scripts/slurm-local.sh start     # write the config (once), start munged, slurmctld, slurmd; wait for the node
#   scripts/slurm-local.sh status    # sinfo; exit 0 when the node takes jobs
#   scripts/slurm-local.sh stop      # stop the three daemons (by their pid files)
#   scripts/slurm-local.sh up        # install + start
#
# What runs (no cgroups, no accounting database: a container may not delegate cgroups, and slurmdbd needs MariaDB):
# ProctrackType=proctrack/linuxproc, TaskPlugin=task/none, select/cons_tres with CR_Core_Memory, SlurmUser=root,
# one node (this host, its CPUs and 85% of its memory, from `slurmd -C`), one partition `local`. Without slurmdbd
# there is no `sacct`: Snakemake polls with `--slurm-status-command squeue` (profiles/slurm-local), finished jobs
# stay in `scontrol show job` for MinJobAge (1 day here) and each end is appended to the jobcomp file below.
set -euo pipefail

CONF_DIR=/etc/slurm
CONF=$CONF_DIR/slurm.conf
RUN=/run/slurm-local
LOG=/var/log/slurm-local
JOBCOMP=$LOG/jobcomp.log
PARTITION=local
PACKAGES=(slurm-wlm munge)

need_root() { [ "$(id -u)" = 0 ] || { echo "slurm-local: $1 needs root" >&2; exit 2; }; }

installed() { command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null \
              && command -v munged >/dev/null; }

do_install() {
    if installed; then echo "slurm-local: installed (slurm $(dpkg-query -W -f '${Version}' slurmctld))"; return; fi
    need_root install
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" >/dev/null
    echo "slurm-local: installed (slurm $(dpkg-query -W -f '${Version}' slurmctld))"
}

alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

write_config() {
    mkdir -p "$CONF_DIR" "$RUN" "$LOG" /var/spool/slurmctld /var/spool/slurmd
    local node
    # "NodeName=vm CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=24000"
    node=$(slurmd -C | head -1 | awk '{for (i = 1; i <= NF; i++) if ($i ~ /^RealMemory=/) {
        split($i, kv, "="); $i = "RealMemory=" int(kv[2] * 0.85)}; print}')
    cat > "$CONF.new" <<EOF
# written by scripts/slurm-local.sh: a one-node cluster on this host
ClusterName=local
SlurmctldHost=$(hostname -s)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
MinJobAge=86400
JobCompType=jobcomp/filetxt
JobCompLoc=$JOBCOMP
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
SchedulerType=sched/backfill
MpiDefault=none
$node State=UNKNOWN
PartitionName=$PARTITION Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
    if cmp -s "$CONF.new" "$CONF"; then rm "$CONF.new"; return; fi
    mv "$CONF.new" "$CONF"
    echo "slurm-local: wrote $CONF"
    if alive $RUN/slurmctld.pid; then scontrol reconfigure; fi  # a running cluster reads it now
}

start_munge() {
    if alive /run/munge/munged.pid; then return; fi
    mkdir -p /run/munge /var/log/munge /var/lib/munge
    chown munge:munge /run/munge /var/log/munge /var/lib/munge
    if [ ! -s /etc/munge/munge.key ]; then
        (command -v mungekey >/dev/null && mungekey --create --keyfile /etc/munge/munge.key) \
            || dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
        chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key
    fi
    runuser -u munge -- /usr/sbin/munged --pid-file /run/munge/munged.pid
}

node_ready() { sinfo -h -N -p "$PARTITION" -o %t 2>/dev/null | grep -qE '^(idle|mix|alloc)'; }

do_start() {
    need_root start
    installed || { echo "slurm-local: not installed (scripts/slurm-local.sh install)" >&2; exit 1; }
    write_config
    start_munge
    alive $RUN/slurmctld.pid || /usr/sbin/slurmctld
    alive $RUN/slurmd.pid || /usr/sbin/slurmd
    for _ in $(seq 60); do
        if node_ready; then do_status; return; fi
        sleep 1
    done
    echo "slurm-local: the node did not come up in 60 s; logs in $LOG" >&2
    sinfo -N -l >&2 || true
    tail -n 20 "$LOG/slurmctld.log" "$LOG/slurmd.log" >&2 || true
    exit 1
}

do_stop() {
    need_root stop
    local f
    for f in $RUN/slurmd.pid $RUN/slurmctld.pid /run/munge/munged.pid; do
        if alive "$f"; then
            local pid; pid=$(cat "$f")
            kill "$pid"
            for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
            echo "slurm-local: stopped $(basename "$f" .pid) ($pid)"
        fi
    done
}

do_status() {
    if ! installed; then echo "slurm-local: not installed"; return 1; fi
    if ! node_ready; then echo "slurm-local: down (no node takes jobs)"; sinfo -N 2>/dev/null || true; return 1; fi
    sinfo -N -o "%N %P %t %c %m"
}

case "${1:-}" in
    install) do_install ;;
    start) do_start ;;
    up) do_install; do_start ;;
    stop) do_stop ;;
    status) do_status ;;
    *) echo "usage: $0 {install|start|up|stop|status}" >&2; exit 2 ;;
esac
