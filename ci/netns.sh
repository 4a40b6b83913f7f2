#!/usr/bin/env bash
# Two "hosts" on this machine for multi-node drills: network namespaces <prefix>0 and <prefix>1,
# joined by one veth pair whose ends both carry the interface name $DLSCALE_NETNS_IFNAME, with the
# addresses <subnet>.1/24 and <subnet>.2/24. Nothing is added to the machine's own network: the
# pair is created directly inside the namespaces. Needs root and iproute2.
# Each host also has its own PID, mount and UTS namespaces, held by a small init process: as on two
# real nodes, a process on one host cannot see or signal the other host's processes in its /proc.
#
#   ci/netns.sh up                 create both (idempotent; a half-made pair is made again)
#   ci/netns.sh down               end what runs inside them, delete both (idempotent)
#   ci/netns.sh status             exit 0 when both are up, and print them
#   ci/netns.sh exec N CMD...      run CMD on host N (0 or 1), with that host's name (its own UTS
#                                  namespace) and /etc/hosts naming both hosts
#   ci/netns.sh run CMD...         up, run CMD here, down on exit (also on Ctrl-C or failure)
#
# Settings: DLSCALE_NETNS_PREFIX (default dlscale-h), DLSCALE_NETNS_SUBNET (default 10.231.0),
# DLSCALE_NETNS_IFNAME (default dls0). Host N is named <prefix>N and answers at <subnet>.(N+1).
set -euo pipefail
prefix="${DLSCALE_NETNS_PREFIX:-dlscale-h}"
subnet="${DLSCALE_NETNS_SUBNET:-10.231.0}"
ifname="${DLSCALE_NETNS_IFNAME:-dls0}"
log() { printf '[netns] %s\n' "$*" >&2; }
fail() { log "ERROR: $*"; exit 1; }

[[ "$prefix" =~ ^[A-Za-z0-9_.-]{1,40}$ ]] || fail "DLSCALE_NETNS_PREFIX must be 1-40 of [A-Za-z0-9_.-]"
[[ "$subnet" =~ ^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$ ]] || fail "DLSCALE_NETNS_SUBNET must look like 10.231.0"
((${#ifname} <= 15)) || fail "DLSCALE_NETNS_IFNAME must be at most 15 characters"

ns() { echo "$prefix$1"; }
addr() { echo "$subnet.$(($1 + 1))"; }

preflight() {
    [[ $EUID -eq 0 ]] || fail "network namespaces need root"
    command -v ip >/dev/null || fail "ip not found; install iproute2"
    command -v nsenter >/dev/null && command -v unshare >/dev/null || fail "nsenter/unshare not found; install util-linux"
    ip netns list >/dev/null 2>&1 || fail "'ip netns' does not work here (no network namespace support?)"
}

exists() { [[ -e "/run/netns/$1" ]]; }
# PID (as this machine sees it) of host N's init: PID 1 of the host's own PID namespace.
holder_file() { echo "/run/netns/$(ns "$1").init"; }
holder() { local pid; pid="$(cat "$(holder_file "$1")" 2>/dev/null)" && kill -0 "$pid" 2>/dev/null && echo "$pid"; }
is_up() {
    local n
    for n in 0 1; do
        exists "$(ns $n)" || return 1
        holder "$n" >/dev/null || return 1
        ip -n "$(ns $n)" -o -4 addr show dev "$ifname" 2>/dev/null | grep -q " $(addr $n)/24 " || return 1
    done
}

down() {
    local n name pids pid
    for n in 0 1; do
        name="$(ns $n)"
        # Killing a PID namespace's init ends every process inside it.
        pid="$(holder "$n" || true)"
        [[ -n "$pid" ]] && kill -KILL "$pid" 2>/dev/null || true
        rm -f "$(holder_file "$n")"
        if exists "$name"; then
            # Whatever still runs inside was started through this script: end it with the namespace.
            pids="$(ip netns pids "$name" 2>/dev/null || true)"
            [[ -n "$pids" ]] && kill -KILL $pids 2>/dev/null || true
            ip netns delete "$name" 2>/dev/null || true
        fi
        rm -rf "/etc/netns/$name"
    done
}

up() {
    is_up && return 0
    down  # a half-made pair: start over
    local n name
    for n in 0 1; do
        ip netns add "$(ns $n)"
    done
    # Both ends are born inside their namespaces, under the same name (names are per namespace).
    ip link add name "$ifname" netns "$(ns 0)" type veth peer name "$ifname" netns "$(ns 1)"
    for n in 0 1; do
        name="$(ns $n)"
        ip -n "$name" addr add "$(addr $n)/24" dev "$ifname"
        ip -n "$name" link set lo up
        ip -n "$name" link set "$ifname" up
        # The host's /etc/hosts, bind-mounted by 'exec' (and by 'ip netns exec').
        mkdir -p "/etc/netns/$name"
        printf '127.0.0.1 localhost\n%s %s\n%s %s\n' "$(addr 0)" "$(ns 0)" "$(addr 1)" "$(ns 1)" \
            > "/etc/netns/$name/hosts"
        start_init "$n"
    done
    is_up || fail "namespaces made but $ifname does not carry its address"
    log "up: $(ns 0) $(addr 0), $(ns 1) $(addr 1) on $ifname"
}

# Host N's init: PID 1 of a new PID namespace with its own /proc, host name and /etc/hosts. It
# ignores SIGCHLD, so the orphans it adopts are reaped by the kernel.
start_init() {
    local n="$1" name launcher child
    name="$(ns "$n")"
    nsenter --net="/run/netns/$name" unshare --pid --fork --mount-proc --uts --propagation private \
        sh -c 'hostname "$0" && mount --bind "/etc/netns/$0/hosts" /etc/hosts &&
               exec python3 -c "import signal; signal.signal(signal.SIGCHLD, signal.SIG_IGN); [signal.pause() for _ in iter(int, 1)]"' \
        "$name" </dev/null >/dev/null 2>&1 &
    launcher=$!
    for _ in $(seq 100); do
        child="$(cat "/proc/$launcher/task/$launcher/children" 2>/dev/null | awk '{print $1}')"
        [[ -n "$child" ]] && [[ "$(readlink "/proc/$child/ns/pid")" != "$(readlink /proc/self/ns/pid)" ]] && break
        child=""
        sleep 0.05
    done
    [[ -n "$child" ]] || fail "the init of $name did not start"
    for _ in $(seq 100); do  # ready once it runs python (the host name and /etc/hosts are set)
        grep -q python "/proc/$child/comm" 2>/dev/null && break
        sleep 0.05
    done
    echo "$child" > "$(holder_file "$n")"
}

case "${1:-}" in
    up) preflight; up ;;
    down) preflight; down ;;
    status)
        preflight
        is_up || { log "not up"; exit 1; }
        for n in 0 1; do echo "$(ns $n) $(addr $n) $ifname"; done ;;
    exec)
        preflight
        [[ "${2:-}" =~ ^[01]$ ]] || fail "usage: $0 exec 0|1 CMD..."
        n="$2"; shift 2
        (($#)) || fail "usage: $0 exec 0|1 CMD..."
        is_up || fail "namespaces are not up; run $0 up first"
        # nsenter rather than 'ip netns exec', which remounts /sys and hides /sys/fs/cgroup (slurmd
        # needs it); the host's mount namespace carries its /proc and /etc/hosts.
        exec nsenter --target "$(holder "$n")" --net --pid --mount --uts --wd="$PWD" "$@" ;;
    run)
        preflight
        shift
        (($#)) || fail "usage: $0 run CMD..."
        trap down EXIT
        trap 'exit 130' INT
        trap 'exit 143' TERM
        up
        "$@" ;;
    *) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
