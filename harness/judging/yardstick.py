"""What the machine yardstick's times say: the machine's speed during a measurement, and a figure
normalised to the speed of the machine its baseline was measured on. The workload the ranks time is
:mod:`harness.machine.yardstick`; this module only reads its times (from the rank records).

A throughput measured when the yardstick took ``y`` seconds, judged against a baseline whose
yardstick took ``y_ref``, is normalised to the baseline's machine speed as ``throughput * y / y_ref``.
Only CPU cells are normalised: a CPU workload says nothing about a GPU's speed.

The window's own speed is known only to lie between the machine's speed before it and after it. On
a quiet machine the two differ by a few per cent; on a shared host they can differ by 20% within a
half-minute launch. The normalised interval is widened by that ``drift``, so that a verdict never
rests on a machine speed the yardstick could not pin down.
"""
from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Mapping, Sequence

from harness.judging.stats import Estimate
from harness.judging.tunables import DEFAULT_TUNABLES
from harness.machine.yardstick import REPEATS, VERSION


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Yardstick:
    """A run's machine speed: the mean seconds of one yardstick repeat over all ranks."""

    seconds: float
    spread: float
    """Relative standard deviation of the repeats (over ranks, before and after the window)."""
    version: int = VERSION
    drift: float = 0.0
    """How far apart the machine's speed before and after the timed window was: ``|after - before|``
    over their mean, averaged over ranks and launches (0 where unknown)."""
    noise: float | None = None
    """A baseline's: how far one more launch's yardstick may stray from this mean on the same
    machine, relative (the 99% prediction half-width over the launches it was recorded from);
    ``None`` where it was recorded from one launch (the system's ``yardstick_noise`` tunable stands in)."""

    def to_json(self) -> dict:
        stored = {"seconds": round(self.seconds, 6), "spread": round(self.spread, 4), "version": self.version,
                  "drift": round(self.drift, 4)}
        if self.noise is not None:
            stored["noise"] = round(self.noise, 4)
        return stored

    @classmethod
    def from_json(cls, data: Mapping | None) -> "Yardstick | None":
        """The stored form back; ``None`` for a missing or unusable entry (a hand-written baseline)."""
        if not isinstance(data, Mapping):
            return None
        seconds = data.get("seconds")
        if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not seconds > 0:
            return None
        noise = data.get("noise")
        return cls(seconds=float(seconds), spread=float(data.get("spread") or 0.0), version=int(data.get("version", 0)),
                   drift=float(data.get("drift") or 0.0),
                   noise=float(noise) if isinstance(noise, (int, float)) and noise >= 0 else None)


def from_records(records: Sequence[Mapping]) -> Yardstick | None:
    """The yardstick of one or more launches' rank records; ``None`` unless every rank timed it.

    The mean, not the median: on a shared core a short repeat can fall between the scheduler's
    slices of other work, and the mean keeps that work's share of the time, as the steps do.
    """
    samples = [record.get("yardstick") for record in records]
    if not samples or any(not sample for sample in samples):
        return None
    times = [float(t) for sample in samples for t in sample]
    mean = statistics.fmean(times)
    spread = statistics.stdev(times) / mean if len(times) > 1 else math.nan
    drifts = [d for sample in samples for d in launch_drifts(sample)]
    return Yardstick(seconds=mean, spread=spread, drift=statistics.fmean(drifts) if drifts else 0.0)


def launch_drifts(sample: Sequence[float], repeats: int = REPEATS) -> list[float]:
    """``|after - before| / mean(before, after)`` of each launch in one rank's yardstick times: the
    worker times ``repeats`` before its framework starts and ``repeats`` after it has shut down, and pooled
    launches follow each other. Nothing for a sample of another shape."""
    if not sample or len(sample) % (2 * repeats):
        return []
    drifts = []
    for start in range(0, len(sample), 2 * repeats):
        before = statistics.fmean(sample[start:start + repeats])
        after = statistics.fmean(sample[start + repeats:start + 2 * repeats])
        drifts.append(abs(after - before) / ((after + before) / 2))
    return drifts


def mean_of(yardsticks: Sequence[Yardstick], noise: float | None = None) -> Yardstick:
    """The yardstick a baseline recorded from several measurements holds: their mean, with the
    launch-to-launch ``noise`` measured among them."""
    return Yardstick(seconds=statistics.fmean(y.seconds for y in yardsticks),
                     spread=statistics.fmean(y.spread for y in yardsticks),
                     drift=statistics.fmean(y.drift for y in yardsticks), noise=noise)


def speed_ratio(now: Yardstick | None, then: Yardstick | None) -> float | None:
    """How much faster the machine runs now than then (1.2: the yardstick took 1/1.2 of the time);
    ``None`` when either side lacks a yardstick or they come from different workload versions."""
    if now is None or then is None or now.version != then.version:
        return None
    return then.seconds / now.seconds


def beyond_noise(ratio: float | None, baseline: "Yardstick | None",
                 default_noise: float = DEFAULT_TUNABLES.yardstick_noise) -> bool:
    """Whether the machine's speed ``ratio`` against the ``baseline``'s moved further than the
    yardstick moves by itself from launch to launch: only such a move is evidence that the machine
    changed speed, and worth normalising by. Within it, normalising adds the yardstick's own noise
    to the throughput's and corrects nothing."""
    if ratio is None:
        return False
    noise = launch_noise(baseline, default_noise)
    return not 1 / (1 + noise) <= ratio <= 1 + noise


def launch_noise(baseline: "Yardstick | None", default_noise: float = DEFAULT_TUNABLES.yardstick_noise) -> float:
    """How far one launch's yardstick may stray from the ``baseline``'s: what it measured among its
    repeats, else ``default_noise`` (:attr:`harness.judging.tunables.Tunables.yardstick_noise`)."""
    return default_noise if baseline is None or baseline.noise is None else baseline.noise


def another_machine(ratio: float | None, drift: float = DEFAULT_TUNABLES.same_machine_drift) -> str | None:
    """Why a machine ``ratio`` times as fast as the baseline's is not the baseline's machine, or
    ``None`` when it is within ``1 +- drift`` (in either direction) or unknown."""
    if ratio is None or 1 / (1 + drift) <= ratio <= 1 + drift:
        return None
    how = f"{ratio:.2f}x as fast as" if ratio > 1 else f"{1 / ratio:.2f}x slower than"
    return (f"this machine runs the yardstick {how} the baseline's, beyond the +-{drift:.0%} a node drifts by: it "
            "is another machine (or a far busier one), so its figures are not judged against this baseline; "
            "re-record it here with --update-baselines, or compare machines with --no-yardstick")


def normalise(value: float, ratio: float | None) -> float:
    """``value`` (higher is better, proportional to machine speed) at the reference machine speed."""
    return value if ratio is None else value / ratio


def normalise_estimate(estimate: Estimate, ratio: float | None, drift: float = 0.0) -> Estimate:
    """The interval scaled as :func:`normalise` scales its value, and widened by the machine's
    ``drift`` (:attr:`Yardstick.drift`) across the launch: the window ran at a speed anywhere from
    ``ratio * (1 - drift / 2)`` to ``ratio * (1 + drift / 2)``."""
    if ratio is None:
        return estimate
    half = min(drift, 1.0) / 2
    return dataclasses.replace(estimate, value=estimate.value / ratio, low=estimate.low / (ratio * (1 + half)),
                               high=estimate.high / (ratio * (1 - half)))
