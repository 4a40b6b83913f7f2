"""How long a rank's threads waited for a CPU while they could have run: other work on the node.

The kernel counts, per thread, the time it spent runnable on a run queue without a CPU
(``/proc/<pid>/task/<tid>/schedstat``, second field, in nanoseconds). Sleeping, blocking on a
socket or waiting for a collective do not count, so a slower loader, network or framework does
not show here; a neighbour's job starting on the same cores does, within the very window it slowed.
The machine yardstick (:mod:`harness.machine.yardstick`), timed before and after the window, can miss such
a burst; this cannot. It cannot see a hypervisor's steal, which the yardstick does see.

A rank's own extra CPU use makes it wait too: its DataLoader workers share its cores, and a
framework's helper threads its process. A loader that got slower that way is a regression, and must
not be excused as contention. So where a rank owns its cores (``--cores-per-rank``), it also reads
how much of their time went to anything *outside* its own process tree (``outside_cpu``): the busy
time of its cores in ``/proc/stat``, steal included, less the CPU time of the rank, its threads and
its descendants (``/proc/<pid>/stat``). Interrupt and soft-interrupt time is left out of the busy
time: the kernel charges it to the core, never to a process, so the rank's own network and timer
work (a collective's packets, its loopback traffic) would read as outside work there, and a change
that adds kernel work of its own would be excused as "too busy". Only that outside share makes a
fail untrustworthy (the policy: :mod:`harness.judging.contention`).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Collection, Mapping, Sequence


def runqueue_waits(pid: int | str = "self") -> dict[str, int] | None:
    """Nanoseconds each thread of process ``pid`` has waited on a run queue so far, by thread id;
    ``None`` where the kernel does not keep schedstat (then there is nothing to say, rather than a
    zero)."""
    waits = {}
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                waits[task.name] = int((task / "schedstat").read_text().split()[1])
            except FileNotFoundError:
                continue  # the thread ended while we read
    except (OSError, ValueError, IndexError):
        return None
    return waits


class RunQueueWait:
    """Seconds this process's threads waited on a run queue since the last reading, thread by
    thread: a thread that ended in between loses only its wait since the last reading, where a
    difference of process-wide sums would lose its whole count and could read below zero (the
    silence watchdog of :mod:`harness.rank.stacks` is such a thread, restarted at each progress
    report); a thread started in between counts from its start."""

    def __init__(self, pid: int | str = "self"):
        self.pid = pid
        self.last = runqueue_waits(pid)

    def read(self) -> float | None:
        now = runqueue_waits(self.pid)
        before, self.last = self.last, now
        if now is None or before is None:
            return None
        return sum(ns - before.get(tid, 0) for tid, ns in now.items()) / 1e9


TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def busy_ticks(cpus: Collection[int]) -> int | None:
    """Clock ticks the ``cpus`` have spent so far on work a process can be charged with, or the
    hypervisor gave another guest (:func:`process_ticks`); ``None`` where unreadable."""
    try:
        return process_ticks(Path("/proc/stat").read_text(), cpus)
    except (OSError, ValueError):
        return None


def process_ticks(proc_stat: str, cpus: Collection[int]) -> int:
    """From the text of ``/proc/stat``: the ticks the ``cpus`` spent in user, nice and system time
    (some process's) and steal (another guest's). Not idle or iowait, and not irq or softirq: the
    kernel charges interrupts to the core, whichever process they serve, so a rank's own network
    and timer work would count as outside it. (Soft interrupts the kernel hands to its ksoftirqd
    thread under load are that thread's system time, and still count.)"""
    total = 0
    for name, *fields in (line.split() for line in proc_stat.splitlines() if line.strip()):
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
            user, nice, system, _idle, _iowait, _irq, _softirq, steal = (int(f) for f in fields[:8])
            total += user + nice + system + steal
    return total


def tree_ticks(pid: int | str = "self") -> int | None:
    """Clock ticks of CPU process ``pid`` has used so far with its threads, its live descendants and
    the children it has reaped; ``None`` where unreadable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        own = sum(int(fields[index]) for index in (11, 12, 13, 14))  # utime stime cutime cstime
        children = []
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                children += (task / "children").read_text().split()
            except OSError:
                continue  # the thread ended while we read
    except (OSError, ValueError, IndexError):
        return None
    return own + sum(ticks for child in children if (ticks := tree_ticks(child)) is not None)


class OutsideWork:
    """Seconds of its ``cores``' time that anything outside this process's tree took since the
    last reading: other jobs, the hypervisor's steal."""

    def __init__(self, cores: Collection[int]):
        self.cores = frozenset(cores)
        self.last = self._ticks()

    def _ticks(self) -> int | None:
        busy, own = busy_ticks(self.cores), tree_ticks()
        return None if busy is None or own is None else busy - own

    def read(self) -> float | None:
        """Seconds since the last reading; a step's may be slightly negative (a tick the cores'
        counter had not yet reached the process's), so only a window's sum means anything."""
        now = self._ticks()
        before, self.last = self.last, now
        if now is None or before is None:
            return None
        return (now - before) / TICKS_PER_S


TICKS_UNCERTAIN_PER_CORE = 2
"""How many clock ticks per core the cores' busy time and the process tree's CPU time can disagree
by over a window: each is counted its own way. A busy 2-core rank on an otherwise idle VM read -2
to +3 ticks over 60 windows of 0.26 s (52 ticks of its cores): up to 6% "outside work" from the
counters alone, and a 5% threshold crossed by a window too short to tell. A share counts only what
lies beyond this."""


def outside_share(records: Sequence[Mapping]) -> float | None:
    """The largest share of its own cores' time over its timed steps that work outside a rank's
    process tree surely took: less what the tick counters cannot resolve
    (:data:`TICKS_UNCERTAIN_PER_CORE`), so a short window reads 0 rather than its counters' noise;
    ``None`` unless every rank recorded its per-step ``outside_cpu``."""
    taken = _outside_by_rank(records)
    return max(seconds / (window * cores) for seconds, window, cores in taken) if taken else None


def outside_stall(records: Sequence[Mapping]) -> float | None:
    """The most of the window that work outside the ranks can have cost the cell: every second it
    took of any rank's cores counted as a second that rank, and with it every rank waiting for it
    at the next collective, stood still (summed over ranks: their stalls need not overlap). A bound,
    not an estimate; ``None`` where :func:`outside_share` is."""
    taken = _outside_by_rank(records)
    return sum(seconds / window for seconds, window, _ in taken) if taken else None


def _outside_by_rank(records: Sequence[Mapping]) -> list[tuple[float, float, int]] | None:
    """Per rank: seconds of its cores' time work outside its process tree surely took over its
    timed steps, those steps' seconds, and its cores; ``None`` unless every rank recorded them."""
    taken = []
    for record in records:
        outside, steps, cores = record.get("outside_cpu"), record.get("step_times"), record.get("cores")
        if outside is None or not steps or not cores or len(outside) != len(steps):
            return None
        unresolved = TICKS_UNCERTAIN_PER_CORE * len(cores) / TICKS_PER_S
        taken.append((max(0.0, sum(outside) - unresolved), sum(steps), len(cores)))
    return taken or None


def wait_share(records: Sequence[Mapping]) -> float | None:
    """The largest share of its timed steps any rank's threads spent waiting for a CPU (thread-
    seconds per second: 0.1 means a tenth of a thread's time), over the steps the throughput is
    computed from; ``None`` unless every rank recorded its per-step ``cpu_wait``."""
    shares = []
    for record in records:
        waits, steps = record.get("cpu_wait"), record.get("step_times")
        if waits is None or not steps or len(waits) != len(steps):
            return None
        shares.append(sum(waits) / sum(steps))
    return max(shares) if shares else None
