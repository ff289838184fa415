#!/usr/bin/env bash
# A one-node Slurm on this machine, for the tests and for trying the README's "On a Slurm cluster" steps:
# munged, slurmctld and slurmd on localhost with a generated configuration (Debian's slurm-wlm and munge).
#   scripts/slurm_local.sh start   configure and start (idempotent); prints the node's state
#   scripts/slurm_local.sh stop    stop the daemons
# No cgroups (proctrack/linuxproc, task/none): it runs in containers and CI machines that have none.
set -euo pipefail
STATE=${SLURM_LOCAL_DIR:-/var/lib/gpucourse-slurm}
CONF=/etc/slurm/slurm.conf

start() {
    command -v slurmctld >/dev/null || { echo "slurm_local: no slurmctld: apt-get install slurm-wlm munge" >&2; exit 1; }
    mkdir -p "$STATE/ctld" "$STATE/d" /etc/slurm /run/munge
    # One start at a time: two at once (two test runs on one machine) both found no munged and both started one.
    exec 9>"$STATE/start.lock"
    flock 9
    local host cpus memory
    host=$(hostname -s)
    cpus=$(nproc)
    memory=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))
    cat > "$CONF" <<CONFIG
ClusterName=gpucourse
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
MpiDefault=none
SchedulerType=sched/backfill
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONFIG
    chown munge:munge /run/munge
    # Started again at each look: a daemon that was still shutting down (a stop just before) was
    # found running at the first look and is gone at the next.
    local deadline=$((SECONDS + 60))
    while (( SECONDS < deadline )); do
        start_missing_daemons
        if timeout 10 sinfo -h -o "%T" 2>/dev/null | grep -qE "^(idle|mixed|allocated)"; then
            sinfo
            return 0
        fi
        sleep 1
    done
    echo "slurm_local: the node did not come up; logs in $STATE" >&2
    tail -n 20 "$STATE/slurmctld.log" "$STATE/slurmd.log" >&2 || true
    exit 1
}

start_missing_daemons() {
    # The daemons must not inherit the lock (9>&-), or they would hold it for as long as they run.
    # munged is judged by a credential it signs, not by its name: one left running by a package since
    # removed (or reinstalled) has lost its socket and key, and slurmd then fails to register.
    if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
        pkill -x munged && sleep 1 || true
        su -s /bin/sh munge -c "munged" 9>&-
    fi
    pgrep -x slurmctld >/dev/null || slurmctld 9>&-
    pgrep -x slurmd >/dev/null || slurmd 9>&-
}

stop() {
    pkill -x slurmd || true
    pkill -x slurmctld || true
    # Until they have exited (slurmctld saves its state first): a start right after must not find them still running.
    for _ in $(seq 30); do
        pgrep -x slurmd >/dev/null || pgrep -x slurmctld >/dev/null || return 0
        sleep 1
    done
    echo "slurm_local: slurmd or slurmctld still running after 30 s" >&2
    return 1
}

"${1:-start}"
