"""Each cell's nights as the site draws them, read from the history's lines (``history/README.md``).

A night is one run of one cell: its lines (several with ``--cell-repeats``) pooled at the line of median
throughput, failed nights (verdict ``error`` or no throughput) kept as failures rather than left
out. Acceptance lines (``"kind": "accepted"``) are not nights: :mod:`harness.judging.changepoints`
reads them. The schema-2 fields (``baseline``, ``work``,
``package_set``, ``machine``, ``session_dir``, ``report``) are optional: a schema-1 line has none.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

from harness.common.jsonio import finite_number
from harness.judging.changepoints import NIGHT, kind_of
from harness.judging.kinds import ERROR
from harness.judging.stats import Estimate


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Band:
    """The baseline a night was judged by: its value and the band's absolute ends."""

    value: float
    low: float
    high: float | None
    """``None``: the band has no upper edge."""
    defaulted: bool = False
    """The band is the default one, not derived from the baseline's own spread."""

    @classmethod
    def from_json(cls, data: Any) -> Band | None:
        if not isinstance(data, Mapping) or not all(finite_number(data.get(key)) for key in ("value", "low")) \
                or not (data.get("high") is None or finite_number(data["high"])):
            return None
        return cls(value=float(data["value"]), low=float(data["low"]),
                   high=float(data["high"]) if data.get("high") is not None else None,
                   defaulted=bool(data.get("defaulted")))


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Night:
    """One cell's run, as the site shows it."""

    run_id: str
    date: str
    git_commit: str | None
    verdict: str
    throughput: Estimate | None
    efficiency: Estimate | None
    flops: int | None
    """FLOPs of one counted step, where the night counted its work."""
    work_digest: str | None
    package_set: str | None
    machine: str | None
    fingerprint: str | None
    baselines: Mapping[str, Band]
    """The band each metric (``throughput``, ``efficiency``) was judged by that night."""
    session_dir: str | None
    report: str | None
    line: Mapping
    """The history line the night's figures come from."""

    @property
    def failed(self) -> bool:
        return self.verdict == ERROR or self.throughput is None

    @property
    def short_commit(self) -> str:
        return (self.git_commit or "-")[:10]

    def figure(self, metric: str) -> Estimate | None:
        """``throughput`` or ``efficiency`` with its interval, or the counted ``flops`` as a bare value."""
        if metric == "flops":
            return None if self.flops is None else Estimate(value=float(self.flops), low=self.flops, high=self.flops)
        return getattr(self, metric)


def cell_nights(rows: Sequence[Mapping]) -> dict[str, list[Night]]:
    """Each cell's nights in file order (acceptance lines left out), failed nights included."""
    by_cell: dict[str, dict[str, list[Mapping]]] = {}
    for row in rows:
        if kind_of(row) == NIGHT:
            by_cell.setdefault(row["cell"], {}).setdefault(row["run_id"], []).append(row)
    return {cell: [night_of(lines) for lines in runs.values()] for cell, runs in sorted(by_cell.items())}


def night_of(lines: Sequence[Mapping]) -> Night:
    """A night from its lines: the line of median throughput (the first line where none has one)."""
    measured = sorted((line for line in lines if _value(line, "throughput") is not None),
                      key=lambda line: _value(line, "throughput"))
    line = measured[(len(measured) - 1) // 2] if measured else lines[0]
    work = line.get("work") if isinstance(line.get("work"), Mapping) else {}
    flops = work.get("flops")
    return Night(run_id=line["run_id"], date=line["date"], git_commit=line.get("git_commit"),
                 verdict=ERROR if not measured else line["verdict"],
                 throughput=Estimate.from_json(line.get("throughput")),
                 efficiency=Estimate.from_json(line.get("efficiency")),
                 flops=int(flops) if finite_number(flops) else None, work_digest=work.get("digest"),
                 package_set=line.get("package_set"), machine=line.get("machine"),
                 fingerprint=line.get("fingerprint"), baselines=_bands(line),
                 session_dir=line.get("session_dir"), report=line.get("report"), line=line)


def differences(before: Night, after: Night) -> list[str]:
    """What ``after`` was measured with that ``before`` was not: commit, package set, work, machine."""
    changes = []
    if before.git_commit and after.git_commit and before.git_commit != after.git_commit:
        changes.append(f"commit {before.short_commit} -> {after.short_commit}")
    for label, was, now in (("package set", before.package_set, after.package_set),
                            ("work", before.work_digest, after.work_digest),
                            ("machine", before.machine, after.machine)):
        if was and now and was != now:
            changes.append(f"{label} {was} -> {now}")
    return changes


def _value(line: Mapping, metric: str) -> float | None:
    figure = line.get(metric)
    value = figure.get("value") if isinstance(figure, Mapping) else None
    return float(value) if finite_number(value) else None


def _bands(line: Mapping) -> dict[str, Band]:
    baseline = line.get("baseline") if isinstance(line.get("baseline"), Mapping) else {}
    return {metric: band for metric in ("throughput", "efficiency") if (band := Band.from_json(baseline.get(metric)))}
