#!/usr/bin/env bash
# Start a one-node Slurm cluster (munged, slurmctld, slurmd) on this machine, unless a cluster
# already answers (asked with sinfo: a site's cluster, configless ones included, is used as it is).
# Idempotent; ci/slurm/stop.sh stops only the daemons started here, and this script signals no
# daemon it did not start itself. Needs root and the Debian packages slurm-wlm and munge.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
state="${DLSCALE_SLURM_STATE:-/var/lib/dlscale-slurm}"
conf="${SLURM_CONF:-/etc/slurm/slurm.conf}"
marker='# written by dlscale ci/slurm/start.sh'
host="$(hostname)"

log() { printf '[slurm] %s\n' "$*" >&2; }
fail() {
    log "ERROR: $*"
    local f
    for f in "$state/munged.log" "$state/slurmctld.log" "$state/slurmd.log"; do
        [[ -s "$f" ]] && { log "--- last lines of $f"; tail -n 20 "$f" >&2; }
    done
    exit 1
}
ours() { [[ -f "$conf" ]] && [[ "$(head -n 1 "$conf")" == "$marker"* ]]; }
# Without a configuration file here, sinfo finds a configless cluster's on its own (slurmd's cache).
node_states() {
    if [[ -f "$conf" ]]; then SLURM_CONF="$conf" timeout 10 sinfo -h -o %T 2>/dev/null
    else env -u SLURM_CONF timeout 10 sinfo -h -o %T 2>/dev/null; fi
}
# Reads all its input: with pipefail, grep -q could fail the pipeline by SIGPIPE to sinfo.
usable() { grep -E '^(idle|mixed|allocated)' >/dev/null; }
# A live process named $1; exited daemons can linger as zombies for a moment here.
alive() { ps -C "$1" -o stat= | grep -q '^[^Z]'; }
# Record a daemon we started so that stop.sh stops it and nothing else.
started() { grep -qx "$1" "$state/started" 2>/dev/null || echo "$1" >> "$state/started"; }
# The pid of daemon $1 if this script started it and it still runs under that pid, else nothing.
our_pid() {
    local pid
    grep -qx "$1" "$state/started" 2>/dev/null || return 0
    pid="$(cat "$state/$1.pid" 2>/dev/null || true)"
    [[ -n "$pid" && "$(ps -p "$pid" -o stat=,comm= 2>/dev/null)" =~ ^[^Z][^\ ]*\ +$1$ ]] && echo "$pid"
    return 0
}

# A cluster that already answers is reused. With our own configuration, our daemons must be
# running too: slurmctld goes on reporting a dead slurmd's node idle for minutes.
if { ! ours || { alive slurmctld && alive slurmd; }; } && node_states | usable; then
    where="$([[ -f "$conf" ]] && echo "with $conf" || echo "without a local configuration (configless)")"
    echo "[slurm] reusing the Slurm cluster that answers $where (partition, nodes, state: $(sinfo -h -o '%P %D %T' | head -n 1))"
    exit 0
fi
if [[ -f "$conf" ]] && ! ours; then
    fail "$conf was not written by dlscale and no usable cluster answers with it; start that cluster, or remove the file (or point SLURM_CONF elsewhere) to let this script set up a local one"
fi
# A Slurm daemon this script did not start belongs to someone's cluster, answering or not: nothing
# here is set up beside it, written over its files or signalled.
for daemon in slurmctld slurmd; do
    if alive "$daemon" && [[ -z "$(our_pid "$daemon")" ]]; then
        fail "a $daemon this script did not start is running (pid $(pgrep -d, -x "$daemon")) and no usable cluster answers; start or repair that cluster, stop it yourself, or set DLSCALE_NO_LOCAL_SLURM=1 to use no local cluster"
    fi
done
[[ $EUID -eq 0 ]] || fail "setting up the local cluster needs root"
export SLURM_CONF="$conf"
for cmd in munged munge slurmctld slurmd sinfo srun scontrol; do
    command -v "$cmd" >/dev/null || fail "$cmd not found; install the Debian packages slurm-wlm and munge"
done
mkdir -p "$state/ctld" "$state/d"

# munge
if [[ ! -s /etc/munge/munge.key ]]; then
    log "creating /etc/munge/munge.key"
    install -d -o munge -g munge -m 0700 /etc/munge
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
    chown munge:munge /etc/munge/munge.key
    chmod 0400 /etc/munge/munge.key
fi
install -d -o munge -g munge -m 0755 /run/munge
if ! munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
    log "starting munged"
    # --force: munged refuses to run as root otherwise (there is no init system here to run it as munge).
    munged --force --pid-file="$state/munged.pid" --log-file="$state/munged.log" \
        || fail "munged did not start"
    started munged
    for _ in $(seq 50); do
        munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1 && break
        sleep 0.1
    done
    munge -n </dev/null | unmunge >/dev/null || fail "munge does not answer"
fi

# slurm.conf: (re)written only when absent or ours, and only if its content changes.
mem_mb="$(free -m | awk '/^Mem:/ { print int($2 * 0.95) }')"
new="$(sed -e "s|@HOST@|$host|g" -e "s|@CPUS@|$(nproc)|g" -e "s|@MEMORY@|$mem_mb|g" \
    -e "s|@STATE@|$state|g" "$here/slurm.conf.in")"
if [[ "$(cat "$conf" 2>/dev/null)" != "$new" ]]; then
    log "writing $conf"
    mkdir -p "$(dirname "$conf")"
    printf '%s\n' "$new" > "$conf"
fi

# Both daemons start together, from a clean state (-c). Jobs saved by an earlier life of this
# cluster (a machine restart, killed daemons) have no processes left, yet a recovered controller
# keeps the node allocated to them until InactiveLimit cancels them; and a slurmd that outlived its
# controller rejects the restarted job ids as replayed credentials.
if ! alive slurmctld || ! alive slurmd; then
    for daemon in slurmd slurmctld; do
        pid="$(our_pid "$daemon")"  # any live one is ours (checked above)
        [[ -n "$pid" ]] || continue
        log "stopping the $daemon (pid $pid) this script started, left without its partner"
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 100); do [[ -n "$(our_pid "$daemon")" ]] || break; sleep 0.1; done
        [[ -z "$(our_pid "$daemon")" ]] || kill -KILL "$pid" 2>/dev/null || true
    done
    log "starting slurmctld"
    slurmctld -c -f "$conf" || fail "slurmctld did not start"
    started slurmctld
    log "starting slurmd"
    slurmd -c -f "$conf" || fail "slurmd did not start"
    started slurmd
fi

# The node shows unk*/down until slurmd registers.
for ((i = 0; ; i++)); do
    st="$(node_states | head -n 1)" || true
    usable <<<"$st" && break
    ((i < 60)) || fail "node $host is not idle after 60 s (state: ${st:-no answer})"
    if [[ "$st" =~ ^(down|drain) && "$st" != *'*' ]]; then
        scontrol update nodename="$host" state=resume 2>/dev/null || true
    fi
    sleep 1
done
timeout 60 srun -n 1 true || fail "smoke test 'srun -n 1 true' failed"
log "local Slurm cluster ready: node $host $st, config $conf, state and logs in $state"
