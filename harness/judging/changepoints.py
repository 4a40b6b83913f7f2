"""Where a cell's nightly figures shifted and stayed shifted: the change-point analysis of the
nightly history's lines (:mod:`harness.store.history` reads and writes them; the report that prints
it and fails on a persistent regression is :mod:`harness.report.history`).

Pure functions of the lines: each cell's series of nights (repeats within a run pooled by their
median), split into levels by :func:`harness.judging.stats.change_points`, a level lasting at least
``min_nights`` nights, so that one noisy night is never a level of its own.

A level the team accepted (its baseline re-recorded, or a change declared accepted: an
``accepted`` line) is the one later levels are compared with: a drop that was accepted is no
longer a regression, a new drop after it is (:meth:`CellHistory.regressed`). Without one, the
latest level is compared with the level before it.
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
NIGHT, ACCEPTED = "night", "accepted"
"""The kinds of history line: a cell's measured night (a schema 1 line has no ``kind`` and is one),
and a level the team accepted."""
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
    work: str | None = None
    """The digest of the work a step did, where it was counted (schema 2 lines)."""
    package_set: str | None = None
    machine: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Acceptance:
    """A cell's level accepted by the team (an ``accepted`` line of the history)."""

    after: int
    """How many of the cell's nights came before it: the level holding the last of them is accepted."""
    date: str
    how: str
    by: str | None
    reason: str


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
    accepted: list[Acceptance] = dataclasses.field(default_factory=list)

    def level_of(self, index: int) -> float:
        """The median of the level holding night ``index`` (1-based; 0 reads as the first)."""
        for change in self.changes:
            if change.at.index > max(index, 1):
                return change.before
        return self.changes[-1].after if self.changes else statistics.median(n.value for n in self.nights)

    def compared_with(self) -> tuple[float, Acceptance | None] | None:
        """The level the latest one is judged against, and the acceptance that set it: the level
        the latest acceptance accepted, else the level before the latest change; None where the
        cell has neither (one steady level)."""
        if self.accepted:
            return self.level_of(self.accepted[-1].after), self.accepted[-1]
        if self.changes:
            return self.changes[-1].before, None
        return None

    @property
    def latest_level(self) -> float:
        return self.level_of(len(self.nights))

    def regressed(self, threshold: float) -> bool:
        """Whether the latest level is more than ``threshold`` below the accepted level, or, where
        none was accepted, below the level before it."""
        against = self.compared_with()
        return against is not None and self.latest_level / against[0] - 1 < -threshold


def what_changed(before: Night, at: Night) -> list[str]:
    """What the lines say changed between the last night of a level and the first of the next: the
    work (its digest), the package set, the machine. Empty where they say nothing changed, or
    do not say (lines older than schema 2)."""
    said = []
    for field, words in (("work", "the work changed here"), ("package_set", "the package set changed here"),
                         ("machine", "the machine changed here")):
        old, new = getattr(before, field), getattr(at, field)
        if old is not None and new is not None and old != new:
            said.append(words)
    return said


def explained(before: Night, at: Night) -> str:
    """:func:`what_changed` in words; where the lines carry the work and the package set and
    neither moved: ``neither work nor packages: the node or the kernels``."""
    said = what_changed(before, at)
    if said:
        return "; ".join(said)
    if None not in (before.work, at.work, before.package_set, at.package_set):
        return "neither work nor packages: the node or the kernels"
    return ""


def kind_of(row: Mapping) -> str:
    """A history line's kind: :data:`NIGHT` or :data:`ACCEPTED`; a schema 1 line is a night."""
    return row.get("kind", NIGHT)


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
        value = figure(row, metric) if kind_of(row) == NIGHT else None
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
                                value=statistics.median(float(value) for _, value in run_rows),
                                work=(first.get("work") or {}).get("digest"), package_set=first.get("package_set"),
                                machine=first.get("machine")))
        result[cell] = nights
    return result


def acceptances(rows: Sequence[Mapping], metric: str = "throughput") -> dict[str, list[Acceptance]]:
    """Each cell's accepted levels in file order, each placed after the nights of ``metric`` that
    came before it (a night's repeats count once)."""
    runs_seen: dict[str, set[str]] = {}
    found: dict[str, list[Acceptance]] = {}
    for row in rows:
        if kind_of(row) == ACCEPTED:
            found.setdefault(row["cell"], []).append(Acceptance(
                after=len(runs_seen.get(row["cell"], ())), date=row["date"], how=row["how"], by=row.get("by"),
                reason=row["reason"]))
        elif figure(row, metric) is not None:
            runs_seen.setdefault(row["cell"], set()).add(row["run_id"])
    return found


def analyse(nights: Sequence[Night], cell: str, min_nights: int = DEFAULT_MIN_NIGHTS,
            accepted: Sequence[Acceptance] = ()) -> CellHistory:
    values = [night.value for night in nights]
    bounds = [0, *change_points(values, min_size=min_nights), len(values)]
    levels = [statistics.median(values[a:b]) for a, b in zip(bounds, bounds[1:])]
    changes = [Change(at=nights[start], before=levels[i], after=levels[i + 1])
               for i, start in enumerate(bounds[1:-1])]
    return CellHistory(cell=cell, nights=list(nights), changes=changes, accepted=list(accepted))


def report(rows: Sequence[Mapping], *, metric: str = "throughput", cell: str | None = None,
           min_nights: int = DEFAULT_MIN_NIGHTS) -> list[CellHistory]:
    by_cell = series(rows, metric)
    if cell is not None:
        by_cell = {cell: by_cell[cell]} if cell in by_cell else {}
    accepted = acceptances(rows, metric)
    return [analyse(nights, name, min_nights, accepted.get(name, ())) for name, nights in sorted(by_cell.items())]
