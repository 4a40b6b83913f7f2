"""Where a step's time goes, per rank: data wait, compute, exposed communication, optimizer step.

    cell_breakdown(records).slowest        -> the cell's Breakdown (its slowest rank's)
    attribute_regression(current, baseline) -> "data loading +180% (0.012 -> 0.034 s/step), ..."

Pure functions over the per-rank records harness.rank.trainloop writes. Every framework is measured the
same way (see the trainloop's docstring):

- **data**: the wait for the next batch, host-to-device copy included (``data_wait``);
- **compute**: forward+backward of a private copy of the model with no communication at all, the
  median of the rank's ``compute_probe`` runs (same batch, same device, same threads), as a share
  of the median ``fwd_bwd`` (the adapter's forward_backward, collectives included), applied to the
  mean ``fwd_bwd``: on a quiet machine simply the probe's time, on a noisy one the occasional slow
  step is split like a typical one rather than booked to communication whole;
- **communication**: the rest of ``fwd_bwd``, clamped at 0. It is the *exposed* communication, the
  part not hidden behind backward compute, together with the framework's own per-step bookkeeping
  (bucket copies, hooks) and any slowdown compute suffers from running beside the collectives. For
  ZeRO stages the parameter all-gather runs inside the optimizer step and is counted there;
- **optimizer**: the adapter's optimizer_step.

The three measured parts (data, fwd_bwd, optimizer) are timed back to back, so the four parts add up
to the step exactly unless the probe's compute exceeds the step's forward+backward (a probe that is
unrepresentative of the step, or noise): :attr:`Breakdown.closure` says how close the sum came.
"""
from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Mapping, Sequence, Union

from harness.common.jsonio import finite_or_none

PARTS = ("data", "compute", "communication", "optimizer")
LABELS = {"data": "data loading", "compute": "compute (forward/backward)",
          "communication": "exposed communication", "optimizer": "optimizer step"}
REQUIRED = ("step_times", "data_wait", "fwd_bwd", "optimizer", "compute_probe")


class BreakdownUnavailable(ValueError):
    """The records lack the breakdown's series (written before the probes existed, or a task
    that has no training step)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Breakdown:
    """Mean seconds per timed step in each part, for one rank (or a cell: its slowest rank's)."""

    rank: int | None
    step: float
    """Mean measured step time."""
    data: float
    compute: float
    communication: float
    optimizer: float
    steps: int = 0
    """Timed steps the means rest on."""
    probe_spread: float = math.nan
    """(max - min) / median of the compute probes: how steady the rank's compute speed was."""
    steps_below_probe: int = 0
    """Timed steps whose forward+backward took less than the probe's compute (noise, or a probe
    that does not represent the step)."""

    def parts(self) -> dict[str, float]:
        return {part: getattr(self, part) for part in PARTS}

    def shares(self) -> dict[str, float]:
        """Each part over the measured step time."""
        return {part: value / self.step if self.step > 0 else math.nan for part, value in self.parts().items()}

    @property
    def accounted(self) -> float:
        return sum(self.parts().values())

    @property
    def closure(self) -> float:
        """Sum of the parts over the measured step: 1.0 when they add up exactly."""
        return self.accounted / self.step if self.step > 0 else math.nan

    def to_json(self) -> dict:
        return {"rank": self.rank, "step": self.step, **self.parts(), "steps": self.steps,
                "probe_spread": finite_or_none(self.probe_spread), "steps_below_probe": self.steps_below_probe,
                "shares": {part: finite_or_none(share) for part, share in self.shares().items()},
                "closure": finite_or_none(self.closure)}

    @classmethod
    def from_json(cls, data: Mapping) -> "Breakdown":
        missing = [key for key in ("step", *PARTS) if key not in data]
        if missing:
            raise ValueError(f"not a breakdown: missing {', '.join(missing)}")
        spread = data.get("probe_spread")
        return cls(rank=data.get("rank"), step=float(data["step"]), **{p: float(data[p]) for p in PARTS},
                   steps=int(data.get("steps", 0)), probe_spread=math.nan if spread is None else float(spread),
                   steps_below_probe=int(data.get("steps_below_probe", 0)))


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CellBreakdown:
    ranks: tuple[Breakdown, ...]
    slowest_rank: int
    """The rank with the most local work (data + compute + optimizer): the all-reduce makes every
    rank's step as long as this one's, and its peers show the difference as communication."""

    @property
    def slowest(self) -> Breakdown:
        return next(b for b in self.ranks if b.rank == self.slowest_rank)

    def mean(self) -> Breakdown:
        """The parts averaged over ranks."""
        values = {key: statistics.fmean(getattr(b, key) for b in self.ranks) for key in ("step", *PARTS)}
        return Breakdown(rank=None, **values, steps=min(b.steps for b in self.ranks),
                         steps_below_probe=sum(b.steps_below_probe for b in self.ranks))

    def to_json(self) -> dict:
        return {"slowest_rank": self.slowest_rank, "cell": self.slowest.to_json(),
                "ranks": [b.to_json() for b in self.ranks]}

    @classmethod
    def from_json(cls, data: Mapping) -> "CellBreakdown":
        return cls(ranks=tuple(Breakdown.from_json(b) for b in data["ranks"]), slowest_rank=data["slowest_rank"])


def has_breakdown(records: Sequence[Mapping]) -> bool:
    return bool(records) and all(all(key in record for key in REQUIRED) for record in records)


def rank_breakdown(record: Mapping) -> Breakdown:
    """One rank's breakdown from its record.

    Series of different lengths (records trimmed or pooled by code that knows only the older
    series) are aligned on their last steps.
    """
    missing = [key for key in REQUIRED if key not in record]
    if missing:
        raise BreakdownUnavailable(f"rank {record.get('rank')}'s record has no {', '.join(missing)}: "
                                   "it was written without the compute probe")
    probes = list(record["compute_probe"])
    if not probes:
        raise BreakdownUnavailable(f"rank {record.get('rank')} ran no compute probe")
    n = min(len(record[key]) for key in ("step_times", "data_wait", "fwd_bwd", "optimizer"))
    if n == 0:
        raise BreakdownUnavailable(f"rank {record.get('rank')} has no timed step")
    tail = lambda key: list(record[key][-n:])  # noqa: E731
    step, data, fwd_bwd, optimizer = tail("step_times"), tail("data_wait"), tail("fwd_bwd"), tail("optimizer")
    probe = statistics.median(probes)
    typical, mean_fwd_bwd = statistics.median(fwd_bwd), statistics.fmean(fwd_bwd)
    # A typical step's split, scaled to the mean: an occasional slow step (a noisy neighbour, a page
    # fault) is shared out like the others instead of being booked to communication whole.
    compute = mean_fwd_bwd * probe / typical if typical > 0 else probe
    return Breakdown(
        rank=record.get("rank"), step=statistics.fmean(step), data=statistics.fmean(data), compute=compute,
        communication=max(mean_fwd_bwd - compute, 0.0), optimizer=statistics.fmean(optimizer), steps=n,
        probe_spread=(max(probes) - min(probes)) / probe if probe > 0 else math.nan,
        steps_below_probe=sum(1 for value in fwd_bwd if value < probe),
    )


def cell_breakdown(records: Sequence[Mapping]) -> CellBreakdown:
    """Every rank's breakdown and the slowest rank, named."""
    if not records:
        raise BreakdownUnavailable("no rank records")
    ranks = tuple(sorted((rank_breakdown(record) for record in records), key=lambda b: (b.rank is None, b.rank)))
    slowest = max(ranks, key=lambda b: b.data + b.compute + b.optimizer)
    return CellBreakdown(ranks=ranks, slowest_rank=slowest.rank)


BreakdownLike = Union[Breakdown, CellBreakdown, Mapping]


def as_breakdown(value: BreakdownLike) -> Breakdown:
    """A cell's breakdown from any of: Breakdown, CellBreakdown (its slowest rank), or their JSON."""
    if isinstance(value, Breakdown):
        return value
    if isinstance(value, CellBreakdown):
        return value.slowest
    if isinstance(value, Mapping):
        return Breakdown.from_json(value["cell"] if "cell" in value and isinstance(value["cell"], Mapping) else value)
    raise TypeError(f"expected a Breakdown, CellBreakdown or its JSON, got {type(value).__name__}")


def _change(before: float, after: float, step: float) -> str:
    if before >= 0.01 * step:  # a percentage of next to nothing says nothing
        return f"{after / before - 1:+.0%} ({before:.3f} -> {after:.3f} s/step)"
    return f"from {before:.3f} to {after:.3f} s/step"


STEADY_STEP = 0.01
"""A step time that changed less than this (relative) did not change: no part gets a share of it."""


def attribute_regression(current: BreakdownLike, baseline_breakdown: BreakdownLike) -> str:
    """Which part of the step moved most against a baseline, in one line, e.g.
    ``"data loading +180% (0.012 -> 0.034 s/step): 96% of the step's +0.023 s/step; ..."``.

    The part named is the one whose seconds per step changed most in the direction the step time
    changed (the largest increase for a slower step, the largest decrease for a faster one).
    """
    now, before = as_breakdown(current), as_breakdown(baseline_breakdown)
    deltas = {part: getattr(now, part) - getattr(before, part) for part in PARTS}
    step_delta = now.step - before.step
    direction = 1.0 if step_delta >= 0 else -1.0
    part = max(PARTS, key=lambda p: direction * deltas[p])
    if direction * deltas[part] <= 0:  # no part moved in the step's direction
        part = max(PARTS, key=lambda p: abs(deltas[p]))
    line = f"{LABELS[part]} {_change(getattr(before, part), getattr(now, part), before.step)}"
    if abs(step_delta) > STEADY_STEP * before.step:
        line += f": {deltas[part] / step_delta:.0%} of the step's {step_delta:+.3f} s/step change"
    else:  # a share of a change that did not happen says nothing: the parts traded time
        line += f", while the step time held within {STEADY_STEP:.0%}"
    others = ", ".join(f"{p} {deltas[p]:+.3f}" for p in PARTS if p != part)
    return f"{line} (step {before.step:.3f} -> {now.step:.3f} s/step; {others} s/step)"


def breakdown_rows(cell: CellBreakdown) -> list[list[str]]:
    """A table: one row per rank, absolute seconds per step with each part's share of the step."""
    rows = [["rank", "step s", *(f"{p} s (share)" for p in PARTS), "sum/step", "probe spread"]]
    for b in cell.ranks:
        shares = b.shares()
        mark = " (slowest)" if b.rank == cell.slowest_rank else ""
        rows.append([f"{b.rank}{mark}", f"{b.step:.4f}",
                     *(f"{getattr(b, p):.4f} ({shares[p]:.1%})" for p in PARTS),
                     f"{b.closure:.3f}", "-" if math.isnan(b.probe_spread) else f"{b.probe_spread:.1%}"])
    return rows
