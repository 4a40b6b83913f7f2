"""Where a cell's nightly figures shifted and stayed shifted: the change-point analysis of the
nightly history's lines (:mod:`harness.store.history` reads and writes them; the report that prints
it and fails on a persistent regression is :mod:`harness.report.history`).

Pure functions of the lines: each cell's series of nights (repeats within a run pooled by their
median), split into levels by :func:`harness.judging.stats.change_points`, a level lasting at least
``min_nights`` nights, so that one noisy night is never a level of its own.
"""
from __future__ import annotations

import dataclasses
import statistics
from typing import Mapping, Sequence

from harness.common.jsonio import finite_number
from harness.judging.metrics import CELL_METRICS
from harness.judging.stats import change_points

DERIVED = {
    "throughput-normalised": "throughput x yardstick_s: the throughput at a fixed machine speed, as CPU cells are judged",
    "machine": "1 / yardstick_s: the machine's own speed by the yardstick, for a node that got slower",
    "accuracy": "final_val_accuracy: an accuracy cell's final validation accuracy",
}
"""Series computed from a line's other fields (lines without them are left out)."""
DEFAULT_MIN_NIGHTS = 3
"""Shortest level ``change_points`` may find: one bad night cannot be a level of its own."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Night:
    """One cell's figure for one run (repeats within a run pooled by their median)."""

    index: int
    """1-based position in the cell's series."""
    run_id: str
    date: str
    git_commit: str | None
    value: float
    fingerprint: str | None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Change:
    at: Night
    """First night of the new level."""
    before: float
    """Median of the level before the change."""
    after: float

    @property
    def relative(self) -> float:
        return self.after / self.before - 1


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CellHistory:
    cell: str
    nights: list[Night]
    changes: list[Change]

    def regressed(self, threshold: float) -> bool:
        """Whether the latest level is more than ``threshold`` below the level before it."""
        return bool(self.changes) and self.changes[-1].relative < -threshold


def figure(row: Mapping, metric: str) -> float | None:
    """A line's value of a stored metric (:data:`harness.judging.metrics.CELL_METRICS`) or a derived
    one (:data:`DERIVED`)."""
    if metric in CELL_METRICS:
        return (row.get(metric) or {}).get("value")
    if metric == "accuracy":
        accuracy = row.get("final_val_accuracy")
        return accuracy if finite_number(accuracy) else None
    yardstick = row.get("yardstick_s")
    if not (isinstance(yardstick, (int, float)) and not isinstance(yardstick, bool) and yardstick > 0):
        return None
    if metric == "machine":
        return 1 / yardstick
    throughput = figure(row, "throughput")
    return None if throughput is None else throughput * yardstick


def series(rows: Sequence[Mapping], metric: str = "throughput") -> dict[str, list[Night]]:
    """Each cell's nights in file order; rows without a value of ``metric`` (errors) are left out."""
    if metric not in CELL_METRICS and metric not in DERIVED:
        raise ValueError(f"unknown metric {metric!r}; valid metrics: {', '.join([*CELL_METRICS, *DERIVED])}")
    by_cell: dict[str, dict[str, list[tuple[Mapping, float]]]] = {}
    for row in rows:
        value = figure(row, metric)
        if value is None:
            continue
        by_cell.setdefault(row["cell"], {}).setdefault(row["run_id"], []).append((row, value))
    result = {}
    for cell, runs in by_cell.items():
        nights = []
        for run_rows in runs.values():
            first = run_rows[0][0]
            nights.append(Night(index=len(nights) + 1, run_id=first["run_id"], date=first["date"],
                                git_commit=first.get("git_commit"), fingerprint=first.get("fingerprint"),
                                value=statistics.median(float(value) for _, value in run_rows)))
        result[cell] = nights
    return result


def analyse(nights: Sequence[Night], cell: str, min_nights: int = DEFAULT_MIN_NIGHTS) -> CellHistory:
    values = [night.value for night in nights]
    bounds = [0, *change_points(values, min_size=min_nights), len(values)]
    levels = [statistics.median(values[a:b]) for a, b in zip(bounds, bounds[1:])]
    changes = [Change(at=nights[start], before=levels[i], after=levels[i + 1])
               for i, start in enumerate(bounds[1:-1])]
    return CellHistory(cell=cell, nights=list(nights), changes=changes)


def report(rows: Sequence[Mapping], *, metric: str = "throughput", cell: str | None = None,
           min_nights: int = DEFAULT_MIN_NIGHTS) -> list[CellHistory]:
    by_cell = series(rows, metric)
    if cell is not None:
        by_cell = {cell: by_cell[cell]} if cell in by_cell else {}
    return [analyse(nights, name, min_nights) for name, nights in sorted(by_cell.items())]
