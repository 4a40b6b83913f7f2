#!/usr/bin/env bash
# A two-node Slurm cluster on the two hosts of ci/netns.sh: slurmctld and one slurmd on host 0, one
# slurmd on host 1, each daemon with its host's name and address. Stock Slurm, no multiple-slurmd
# build: every slurmd is alone in its network and UTS namespaces. Uses this machine's munged.
# Apart from the machine's own cluster: its own slurm.conf, state, and ports inside the namespaces.
#
#   ci/netns-slurm.sh up        start it (idempotent); prints the SLURM_CONF to use on host 0
#   ci/netns-slurm.sh down      stop its daemons (ci/netns.sh down also ends them)
#   ci/netns.sh exec 0 env SLURM_CONF=<printed path> srun -N 2 -n 2 hostname
#
# Same settings as ci/netns.sh (DLSCALE_NETNS_PREFIX, DLSCALE_NETNS_SUBNET); state in
# $DLSCALE_NETNS_SLURM_STATE (default /var/lib/dlscale-netns-slurm/<prefix>).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
prefix="${DLSCALE_NETNS_PREFIX:-dlscale-h}"
subnet="${DLSCALE_NETNS_SUBNET:-10.231.0}"
state="${DLSCALE_NETNS_SLURM_STATE:-/var/lib/dlscale-netns-slurm/$prefix}"
conf="$state/slurm.conf"
log() { printf '[netns-slurm] %s\n' "$*" >&2; }
fail() {
    log "ERROR: $*"
    for f in "$state"/*.log; do [[ -s "$f" ]] && { log "--- $f"; tail -n 8 "$f" >&2; }; done
    exit 1
}
on() { local n="$1"; shift; "$here/netns.sh" exec "$n" "$@"; }
# The host each daemon runs on; its pid file holds its PID as that host sees it.
host_of() { case "$1" in "slurmd-${prefix}1") echo 1 ;; *) echo 0 ;; esac; }
# A live daemon started from our pid file.
running() {
    local pid
    pid="$(cat "$state/$1.pid" 2>/dev/null)" && "$here/netns.sh" status >/dev/null 2>&1 &&
        on "$(host_of "$1")" kill -0 "$pid" 2>/dev/null
}

stop() {
    local name pid host
    "$here/netns.sh" status >/dev/null 2>&1 || { rm -f "$state"/*.pid; return 0; }  # gone with its hosts
    for name in "slurmd-${prefix}1" "slurmd-${prefix}0" slurmctld; do
        pid="$(cat "$state/$name.pid" 2>/dev/null || true)"
        host="$(host_of "$name")"
        if [[ -n "$pid" ]]; then
            on "$host" kill -TERM "$pid" 2>/dev/null || true
            for _ in $(seq 50); do on "$host" kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            on "$host" kill -KILL "$pid" 2>/dev/null || true
        fi
        rm -f "$state/$name.pid"
    done
}

case "${1:-}" in
    down) stop; exit 0 ;;
    up) ;;
    *) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac

"$here/netns.sh" status >/dev/null || fail "the two hosts are not up: run ci/netns.sh up first"
munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1 || fail "munged does not answer (ci/slurm/start.sh starts it)"
if running slurmctld && running "slurmd-${prefix}0" && running "slurmd-${prefix}1"; then
    echo "$conf"
    exit 0
fi
stop
mkdir -p "$state/ctld" "$state/d-${prefix}0" "$state/d-${prefix}1"
cat > "$conf" <<EOF
# written by dlscale ci/netns-slurm.sh: two one-CPU nodes, one per network namespace
ClusterName=dlscale-netns
SlurmctldHost=${prefix}0($subnet.1)
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$state/ctld
SlurmdSpoolDir=$state/d-%n
SlurmctldPidFile=$state/slurmctld.pid
SlurmdPidFile=$state/slurmd-%n.pid
SlurmctldLogFile=$state/slurmctld.log
SlurmdLogFile=$state/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
MailProg=/bin/true
KillWait=5
InactiveLimit=30
NodeName=${prefix}0 NodeAddr=$subnet.1 CPUs=1 State=UNKNOWN
NodeName=${prefix}1 NodeAddr=$subnet.2 CPUs=1 State=UNKNOWN
PartitionName=two Nodes=${prefix}[0-1] Default=YES OverSubscribe=YES MaxTime=INFINITE State=UP
EOF
on 0 slurmctld -f "$conf" || fail "slurmctld did not start"
on 0 slurmd -f "$conf" || fail "slurmd on ${prefix}0 did not start"
on 1 slurmd -f "$conf" || fail "slurmd on ${prefix}1 did not start"
for ((i = 0; ; i++)); do
    idle="$(on 0 env SLURM_CONF="$conf" sinfo -h -N -o %T 2>/dev/null | grep -cE '^(idle|mixed|allocated)$' || true)"
    [[ "$idle" == 2 ]] && break
    ((i < 30)) || fail "the two nodes are not idle after 30 s"
    sleep 1
done
log "two-node cluster up: ${prefix}[0-1], config $conf"
echo "$conf"
