"""When other work on a node makes a cell's measurement untrustworthy: the policy the verdicts
apply to what the ranks read (:mod:`harness.rank.contention`: their threads' wait for a CPU, and
the share of their own cores' time work outside their process trees took)."""
from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence, TypeVar

from harness.judging.kinds import VerdictKind
from harness.judging.stats import Estimate
from harness.judging.tunables import DEFAULT_TUNABLES
from harness.rank.contention import outside_share, wait_share

V = TypeVar("V")
"""A verdict dataclass with ``kind`` and ``message`` (:class:`harness.judging.verdicts.Verdict`)."""

def contended(share: float | None, baseline_share: float | None, outside: float | None = None, *,
              notable: float = DEFAULT_TUNABLES.notable_wait) -> bool:
    """Whether other work competed for the cell's cores: work outside its ranks' process trees took
    more than ``notable`` of their cores' time, or, where that was not measured, the ranks waited for a
    CPU that much longer than when the baseline was recorded (a cell's own loader workers or helper
    threads can make some wait its normal state)."""
    if outside is not None:
        return outside > notable
    return share is not None and baseline_share is not None and share - baseline_share > notable


def launch_contended(records: Sequence[Mapping], baseline_share: float | None, *,
                     notable: float = DEFAULT_TUNABLES.notable_wait) -> bool:
    """:func:`contended` for one launch's records."""
    return contended(wait_share(records), baseline_share, outside_share(records), notable=notable)


def beyond_contention(measured: Estimate, edge: float, stall: float | None) -> bool:
    """Whether a measurement (higher is better) failing below ``edge`` lies further below it than
    contention that stood the cell still for at most ``stall`` of its window can have pushed it:
    with that time given back, its whole interval would still be below the edge."""
    if stall is None or stall >= 1:
        return False
    return measured.high / (1 - stall) < edge


def distrust(verdict: V, share: float | None, baseline_share: float | None, outside: float | None = None, *,
             stall: float | None = None, beyond: bool = False, notable: float = DEFAULT_TUNABLES.notable_wait) -> V:
    """A failing verdict made inconclusive when the ranks were ``contended``, saying why, unless the
    failure lies ``beyond`` what that contention (costing at most ``stall`` of the window) explains.
    A failing verdict whose ranks waited notably while nothing outside the cell took their cores
    keeps its kind, and says that the cell's own processes made the wait; one with a notable wait
    and no baseline wait to compare with keeps its kind and says so."""
    if verdict.kind != VerdictKind.FAIL:
        return verdict
    if outside is not None:
        if contended(share, baseline_share, outside, notable=notable):
            if beyond:
                return dataclasses.replace(verdict, message=(
                    f"{verdict.message}; work outside the cell took {outside:.0%} of its cores' time, which can "
                    f"have stood it still for {stall:.0%} of the window at most: too little for this shortfall, so "
                    "the fail stands"))
            return dataclasses.replace(verdict, kind=VerdictKind.INCONCLUSIVE, message=(
                f"{verdict.message}; not trusted: work outside the cell took {outside:.0%} of its cores' time "
                "during the window (another job, or the hypervisor's steal); measure again on a quiet node"))
        if share is not None and share > notable:
            return dataclasses.replace(verdict, message=(
                f"{verdict.message}; its ranks waited for a CPU for {share:.0%} of the step time, but work outside "
                f"the cell took only {outside:.0%} of its cores: its own processes (loader workers, framework "
                "threads) made that wait, so the fail stands"))
        return verdict
    if share is None or share <= notable:
        return verdict
    clause = f"its ranks waited for a CPU for {share:.0%} of the step time"
    if not contended(share, baseline_share, notable=notable):
        if baseline_share is None:
            return dataclasses.replace(verdict, message=f"{verdict.message}; {clause} (other work on the node?)")
        return verdict
    return dataclasses.replace(verdict, kind=VerdictKind.INCONCLUSIVE, message=(
        f"{verdict.message}; not trusted: {clause}, {baseline_share:.0%} when the baseline was recorded, so other "
        "work competed for the cores; measure again on a quiet node"))
