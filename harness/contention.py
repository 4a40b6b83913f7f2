"""How long a rank's threads waited for a CPU while they could have run: other work on the node.

The kernel counts, per thread, the time it spent runnable on a run queue without a CPU
(``/proc/<pid>/task/<tid>/schedstat``, second field, in nanoseconds). Sleeping, blocking on a
socket or waiting for a collective do not count, so a slower loader, network or framework does
not show here; a neighbour's job starting on the same cores does, within the very window it slowed.
The machine yardstick (:mod:`harness.yardstick`), timed before and after the window, can miss such
a burst; this cannot. It cannot see a hypervisor's steal, which the yardstick does see.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Mapping, Sequence, TypeVar

V = TypeVar("V")
"""A verdict dataclass with ``kind`` and ``message`` (harness.stats' or harness.baselines')."""

NOTABLE_SHARE = 0.05
"""A wait this much above the baseline's (a share of the step time) makes a fail untrustworthy.
No larger than the narrowest band (5%): summed over a rank's threads, the wait is at least the
time its compute thread lost, so a neighbour that alone pushed a cell past its band shows here."""


def runqueue_wait_s(pid: int | str = "self") -> float | None:
    """Seconds all threads of process ``pid`` have waited on a run queue so far; ``None`` where the
    kernel does not keep schedstat (then there is nothing to say, rather than a zero)."""
    total = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                total += int((task / "schedstat").read_text().split()[1])
            except FileNotFoundError:
                continue  # the thread ended while we read
    except (OSError, ValueError, IndexError):
        return None
    return total / 1e9


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


def contended(share: float | None, baseline_share: float | None) -> bool:
    """Whether the ranks waited for a CPU notably longer than when the baseline was recorded: a
    cell's own loader workers or helper threads can make some wait its normal state."""
    return share is not None and baseline_share is not None and share - baseline_share > NOTABLE_SHARE


def distrust(verdict: V, share: float | None, baseline_share: float | None) -> V:
    """A failing verdict made inconclusive when the ranks were ``contended``, saying why; a failing
    verdict with a notable wait but no baseline wait to compare with keeps its kind and says so."""
    if verdict.kind != "fail" or share is None or share <= NOTABLE_SHARE:
        return verdict
    clause = f"its ranks waited for a CPU for {share:.0%} of the step time"
    if not contended(share, baseline_share):
        if baseline_share is None:
            return dataclasses.replace(verdict, message=f"{verdict.message}; {clause} (other work on the node?)")
        return verdict
    return dataclasses.replace(verdict, kind="inconclusive", message=(
        f"{verdict.message}; not trusted: {clause}, {baseline_share:.0%} when the baseline was recorded, so other "
        "work competed for the cores; measure again on a quiet node"))
