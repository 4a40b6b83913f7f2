#!/usr/bin/env bash
# Stop the daemons that ci/slurm/start.sh started (listed in $state/started), by their pid files.
# A cluster that start.sh only reused is left alone. Idempotent.
set -euo pipefail
state="${DLSCALE_SLURM_STATE:-/var/lib/dlscale-slurm}"
log() { printf '[slurm] %s\n' "$*" >&2; }
# Process $1 is alive and named $2 (not a zombie, not a reused pid).
alive() { [[ "$(ps -p "$1" -o stat=,comm= 2>/dev/null)" =~ ^[^Z][^\ ]*\ +$2$ ]]; }

[[ -f "$state/started" ]] || { log "no daemons started by start.sh"; exit 0; }
# Reverse start order: slurmd, slurmctld, then munged (the others use it while exiting).
for name in $(tac "$state/started"); do
    pidfile="$state/$name.pid"
    pid="$(cat "$pidfile" 2>/dev/null || true)"
    # Stale pid file, or the pid now belongs to another program: nothing to stop.
    if [[ -z "$pid" ]] || ! alive "$pid" "$name"; then
        log "$name is not running"
    else
        log "stopping $name (pid $pid)"
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 100); do
            alive "$pid" "$name" || break
            sleep 0.1
        done
        if alive "$pid" "$name"; then
            log "$name did not exit within 10 s; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
        fi
    fi
    rm -f "$pidfile"
done
rm -f "$state/started"
