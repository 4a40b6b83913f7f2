"""The nightly history's report: where each cell's figures shifted and stayed shifted.

    python -m harness.report.history history/<system>.jsonl [--cell ID] [--metric throughput] [--threshold 0.05]

reports, per cell, where its nightly figures shifted and stayed shifted
(:func:`harness.judging.changepoints.report`) and exits with status 1 when any cell's latest level
is a drop of more than ``--threshold`` from the level before it: a persistent regression, never one
noisy night (a level lasts at least ``--min-nights`` nights). ``--csv`` also writes the lines as a
table other tools read. The file is :mod:`harness.store.history`'s; its format: ``history/README.md``.
"""
from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path
from typing import Mapping, Sequence

from harness.judging import changepoints
from harness.judging.changepoints import DEFAULT_MIN_NIGHTS, DERIVED, CellHistory
from harness.judging.metrics import CELL_METRICS
from harness.report.tables import format_table
from harness.store.history import read

DEFAULT_THRESHOLD = 0.05
"""A latest level this far below the level before it fails the report."""


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
    parser = argparse.ArgumentParser(prog="python -m harness.report.history", description=__doc__.split("\n\n")[0])
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
    histories = changepoints.report(rows, metric=args.metric, cell=args.cell, min_nights=args.min_nights)
    if not histories:
        print(f"{args.path}: no {args.metric} figures" + (f" for {args.cell}" if args.cell else ""))
        return 0
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


if __name__ == "__main__":
    sys.exit(main())
