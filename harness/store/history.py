"""A system's nightly history: ``history/<system>.jsonl``, one JSON line per cell per run.

    python -m harness.store.history history/<system>.jsonl [--cell ID] [--metric throughput] [--threshold 0.05]

reports, per cell, where its nightly figures shifted and stayed shifted (:func:`stats.change_points`)
and exits with status 1 when any cell's latest level is a drop of more than ``--threshold`` from
the level before it: a persistent regression, never one noisy night (a level lasts at least
``--min-nights`` nights). Format: ``history/README.md``.

The file is only ever appended to, one ``write`` per line, each batch flushed and fsynced: an
interrupted run loses at most the line being written, and :func:`append` ends such a torn line
before writing, so it never spoils the next one. :func:`read` reports a line it cannot use (its
number and why) and skips it; every other line is kept. The suite appends to no file holding a bad
line other than such a torn one (:attr:`Problem.torn`): something else writes there.
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from harness.common.filelock import locked
from harness.common.interrupts import INTERRUPTS
from harness.common.jsonio import finite_number, finite_or_none
from harness.judging.metrics import CELL_METRICS
from harness.judging.stats import Estimate, change_points

SCHEMA_VERSION = 1
DERIVED = {
    "throughput-normalised": "throughput x yardstick_s: the throughput at a fixed machine speed, as CPU cells are judged",
    "machine": "1 / yardstick_s: the machine's own speed by the yardstick, for a node that got slower",
    "accuracy": "final_val_accuracy: an accuracy cell's final validation accuracy",
}
"""Series computed from a line's other fields (lines without them are left out)."""
REQUIRED = {"cell": str, "run_id": str, "date": str, "verdict": str}
ROW_START = b'{"schema": '
"""How every line :func:`append` writes begins (``schema`` is :func:`make_row`'s first key)."""
DEFAULT_THRESHOLD = 0.05
"""A latest level this far below the level before it fails the report."""
DEFAULT_MIN_NIGHTS = 3
"""Shortest level ``change_points`` may find: one bad night cannot be a level of its own."""


@dataclasses.dataclass(frozen=True, slots=True)
class Problem:
    """A line of a history file that :func:`read` skipped."""

    line: int
    why: str
    torn: bool = False
    """The beginning of a line :func:`append` wrote, cut short by an interrupted run: expected damage.
    Any other bad line was written by something else."""

    def __str__(self) -> str:
        return f"line {self.line}: {self.why}"


def make_row(cell_id: str, *, run_id: str, verdict: str, throughput: Estimate | None = None,
             efficiency: Estimate | None = None, fingerprint: str | None = None, git_commit: str | None = None,
             date: str | None = None, **extra: Any) -> dict:
    """One history line for one cell of one run; ``date`` defaults to now (UTC, ISO 8601).

    ``verdict`` is the cell's overall verdict ("pass", "fail", "error", ...); ``fingerprint`` is
    :func:`harness.judging.fingerprint.fingerprint_hash` of the run's fingerprint. ``extra`` keys (e.g.
    ``launcher``, ``ranks``) are stored as given.
    """
    date = date or datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return {"schema": SCHEMA_VERSION, "cell": cell_id, "run_id": run_id, "date": date, "git_commit": git_commit,
            "throughput": _estimate(throughput), "efficiency": _estimate(efficiency), "verdict": verdict,
            "fingerprint": fingerprint, **extra}


def append(path: Path | str, rows: Iterable[Mapping]) -> None:
    """Append ``rows`` to the file, one line each, then flush and fsync.

    A torn last line (a run killed while writing it) is first ended with a newline, so that it
    stays one corrupt line that :func:`read` skips and the new rows stay whole. Several sessions
    may append to one file at once: each batch is written under the file's lock
    (:mod:`harness.common.filelock`), so lines never interleave and the torn-line check sees a quiet file.
    """
    path = Path(path)
    lines = [json.dumps(dict(row), sort_keys=False, allow_nan=False) + "\n" for row in rows]
    if not lines:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with locked(path), INTERRUPTS.writing():
        created = not path.exists()
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            if not created and _ends_torn(fd):
                _write_all(fd, b"\n")
            for line in lines:
                _write_all(fd, line.encode())  # one write per line: an interrupt lands between lines
            os.fsync(fd)
        finally:
            os.close(fd)
        if created:
            _fsync_directory(path.parent)


def read(path: Path | str) -> tuple[list[dict], list[Problem]]:
    """Every usable row in file order, and a :class:`Problem` for each line skipped.

    A missing file is an empty history. Blank lines are ignored without a problem.
    """
    path = Path(path)
    if not path.exists():
        return [], []
    rows, problems = [], []
    with open(path, "rb") as stream:
        for number, raw in enumerate(stream, start=1):
            if not raw.strip():
                continue
            try:
                row = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as error:
                problems.append(Problem(number, f"not UTF-8 ({error.reason} at byte {error.start})"))
                continue
            except json.JSONDecodeError as error:
                torn = _cut_short(raw)
                how = " (a line cut short: a run was interrupted while writing it)" if torn else ""
                problems.append(Problem(number, f"not valid JSON: {error.msg} at column {error.colno}{how}", torn))
                continue
            why = _invalid(row)
            if why:
                problems.append(Problem(number, why))
                continue
            rows.append(row)
    return rows, problems


# --- change-point report -------------------------------------------------------------------------


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


def report_rows(histories: Sequence[CellHistory], threshold: float) -> list[list[str]]:
    table = [["cell", "nights", "change at run", "date", "commit", "level before -> after", "note"]]
    for history in histories:
        if not history.changes:
            level = statistics.median(n.value for n in history.nights)
            table.append([history.cell, str(len(history.nights)), "-", "-", "-", f"steady at {level:.4g}", ""])
            continue
        for number, change in enumerate(history.changes):
            latest = number == len(history.changes) - 1
            previous = history.nights[change.at.index - 2]
            notes = []
            if change.at.fingerprint != previous.fingerprint:
                notes.append("fingerprint changed")
            if latest and change.relative < -threshold:
                notes.append("REGRESSION (latest level)")
            table.append([history.cell, str(len(history.nights)), str(change.at.index), change.at.date[:10],
                          (change.at.git_commit or "-")[:10],
                          f"{change.before:.4g} -> {change.after:.4g} ({change.relative:+.1%})", "; ".join(notes)])
    return table


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.store.history", description=__doc__.split("\n\n")[0])
    parser.add_argument("path", type=Path, help="history/<system>.jsonl")
    parser.add_argument("--cell", help="only this cell id")
    parser.add_argument("--metric", choices=[*CELL_METRICS, *DERIVED], default="throughput",
                        help="; ".join(f"{name}: {meaning}" for name, meaning in DERIVED.items()))
    parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD,
                        help=f"relative drop of the latest level that fails (default {DEFAULT_THRESHOLD})")
    parser.add_argument("--min-nights", type=int, default=DEFAULT_MIN_NIGHTS,
                        help=f"shortest level a change point may create (default {DEFAULT_MIN_NIGHTS})")
    parser.add_argument("--csv", type=Path, help="also write the lines (of --cell, if given) to this CSV file")
    args = parser.parse_args(argv)
    if not args.path.exists():
        parser.error(f"{args.path} does not exist")
    if args.threshold < 0:
        parser.error("--threshold must be >= 0")
    rows, problems = read(args.path)
    for problem in problems:
        print(f"{args.path}: skipped {problem}", file=sys.stderr)
    if args.csv:
        write_csv([row for row in rows if args.cell in (None, row["cell"])], args.csv)
        print(f"written to {args.csv}")
    histories = report(rows, metric=args.metric, cell=args.cell, min_nights=args.min_nights)
    if not histories:
        print(f"{args.path}: no {args.metric} figures" + (f" for {args.cell}" if args.cell else ""))
        return 0
    from harness.report.tables import format_table

    print(f"{args.metric} change points in {args.path} ({len(rows)} rows)")
    print(format_table(report_rows(histories, args.threshold)))
    regressed = [h.cell for h in histories if h.regressed(args.threshold)]
    if regressed:
        print(f"persistent regression (latest level more than {args.threshold:.0%} below the one before): "
              + ", ".join(regressed))
        return 1
    return 0


CSV_COLUMNS = ("date", "cell", "run_id", "verdict", "throughput", "throughput_low", "throughput_high",
               "efficiency", "efficiency_low", "efficiency_high", "git_commit", "fingerprint")


def write_csv(rows: Sequence[Mapping], path: Path) -> None:
    """The history lines as a table other tools read: one row per line, each figure with its interval."""
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(CSV_COLUMNS)
        for row in rows:
            figures = [(row.get(metric) or {}).get(part)
                       for metric in CELL_METRICS for part in ("value", "low", "high")]
            writer.writerow([row.get("date"), row["cell"], row.get("run_id"), row.get("verdict"), *figures,
                             row.get("git_commit"), row.get("fingerprint")])


# --- helpers -------------------------------------------------------------------------------------


def _estimate(estimate: Estimate | None) -> dict | None:
    if estimate is None:
        return None
    return {"value": estimate.value, "low": finite_or_none(estimate.low), "high": finite_or_none(estimate.high),
            "confidence": estimate.confidence}


def _invalid(row: Any) -> str | None:
    if not isinstance(row, dict):
        return f"not a JSON object but {type(row).__name__}"
    for field, kind in REQUIRED.items():
        if not isinstance(row.get(field), kind):
            return f"missing or non-{kind.__name__} field {field!r}"
    for metric in CELL_METRICS:
        figure = row.get(metric)
        if figure is None:
            continue
        value = figure.get("value") if isinstance(figure, dict) else None
        if not (finite_number(value) and value > 0):
            return f"{metric} must be null or an object with a positive \"value\", found {figure!r}"
    return None


def _cut_short(raw: bytes) -> bool:
    """Whether a line that is not JSON begins like every line :func:`make_row` makes: one an
    interrupted append left (that append's successor ended it with a newline)."""
    line = raw.rstrip(b"\n")
    return line.startswith(ROW_START) or ROW_START.startswith(line)


def _ends_torn(fd: int) -> bool:
    size = os.fstat(fd).st_size
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _fsync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


if __name__ == "__main__":
    sys.exit(main())
