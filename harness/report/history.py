"""The nightly history's report: where each cell's figures shifted and stayed shifted.

    dlscale-history history/<system>.jsonl [--cell ID] [--metric throughput] [--threshold 0.05]
    dlscale-history history/<system>.jsonl --accept CELL[,CELL] --reason TEXT [--by NAME]

reports, per cell, where its nightly figures shifted and stayed shifted
(:func:`harness.judging.changepoints.report`), what the lines say changed there (the work, the
package set, the machine, or neither), and the levels the team accepted; it exits with status 1
when any cell's latest level is a drop of more than ``--threshold`` from the level accepted last
(else from the level before it): a persistent regression, never one noisy night (a level lasts at
least ``--min-nights`` nights). ``--accept`` accepts the cells' levels as they stand, without
re-recording their baselines (``--update-baselines`` accepts the cells it re-records). ``--csv``
also writes the lines as a table other tools read. The file is :mod:`harness.store.history`'s; its
format: ``history/README.md``.
"""
from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
from pathlib import Path
from typing import Mapping, Sequence

from harness.judging import changepoints
from harness.judging.changepoints import DEFAULT_MIN_NIGHTS, DERIVED, NIGHT, CellHistory, explained, kind_of
from harness.judging.metrics import CELL_METRICS
from harness.report.tables import format_table
from harness.store.history import accepted_by, append, make_acceptance, read

DEFAULT_THRESHOLD = 0.05
"""A latest level this far below the level before it fails the report."""


def report_rows(histories: Sequence[CellHistory], threshold: float) -> list[list[str]]:
    """A row per change point and per accepted level, in the order of the cell's nights; a steady
    cell's one row. The latest level's row says REGRESSION where :meth:`CellHistory.regressed`."""
    table = [["cell", "nights", "at night", "date", "commit", "level before -> after", "note"]]
    for history in histories:
        rows = []
        for number, change in enumerate(history.changes):
            previous = history.nights[change.at.index - 2]
            notes = [explained(previous, change.at)]
            if change.at.fingerprint != previous.fingerprint:
                notes.append("fingerprint changed")
            if number == len(history.changes) - 1 and history.regressed(threshold):
                notes.append("REGRESSION (latest level)")
            rows.append((change.at.index, [history.cell, str(len(history.nights)), str(change.at.index),
                                           change.at.date[:10], (change.at.git_commit or "-")[:10],
                                           f"{change.before:.4g} -> {change.after:.4g} ({change.relative:+.1%})",
                                           "; ".join(note for note in notes if note)]))
        for acceptance in history.accepted:
            note = f"ACCEPTED ({acceptance.how}{f' by {acceptance.by}' if acceptance.by else ''}): {acceptance.reason}"
            if acceptance is history.accepted[-1] and history.regressed(threshold):
                note += f"; REGRESSION: the latest level {history.latest_level:.4g} is below it"
            rows.append((acceptance.after + 0.5, [history.cell, str(len(history.nights)), f"after {acceptance.after}",
                                                  acceptance.date[:10], "-",
                                                  f"accepted at {history.level_of(acceptance.after):.4g}", note]))
        if not rows:
            level = statistics.median(n.value for n in history.nights)
            rows.append((0, [history.cell, str(len(history.nights)), "-", "-", "-", f"steady at {level:.4g}", ""]))
        table.extend(row for _, row in sorted(rows, key=lambda pair: pair[0]))
    return table


def accept(path: Path, cells: Sequence[str], reason: str, by: str) -> str:
    """Append an acceptance line for each of ``cells`` (each with the band its latest night was
    judged by); the file is left as it was when a cell has no night in it or a line of it was
    written by something else."""
    rows, problems = read(path)
    foreign = [problem for problem in problems if not problem.torn]
    if foreign:
        raise ValueError(f"{path}: {foreign[0]}: something else wrote to the file; nothing accepted")
    latest = {row["cell"]: row for row in rows if kind_of(row) == NIGHT}
    unknown = [cell for cell in cells if cell not in latest]
    if unknown:
        raise ValueError(f"{path} has no night of {', '.join(unknown)}; its cells: {', '.join(sorted(latest)) or 'none'}")
    append(path, [make_acceptance(cell, run_id=latest[cell]["run_id"], how="declared", by=by, reason=reason,
                                  git_commit=latest[cell].get("git_commit"), baseline=latest[cell].get("baseline"))
                  for cell in cells])
    return f"accepted the latest level of {', '.join(cells)} in {path} ({by}: {reason})"


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
    parser.add_argument("--accept", metavar="CELL[,CELL]",
                        help="accept these cells' levels as they stand (a slowdown the team lives with), without "
                             "re-recording their baselines; needs --reason")
    parser.add_argument("--reason", help="why the change is accepted (kept in the history)")
    parser.add_argument("--by", help="who accepts it (default: the CI's user, else user@host)")
    args = parser.parse_args(argv)
    if not args.path.exists():
        parser.error(f"{args.path} does not exist")
    if args.threshold < 0:
        parser.error("--threshold must be >= 0")
    if args.accept is not None:
        cells = [cell.strip() for cell in args.accept.split(",") if cell.strip()]
        if not cells or not (args.reason or "").strip():
            parser.error("--accept needs one or more cell ids and a --reason")
        try:
            print(accept(args.path, cells, args.reason.strip(), args.by or accepted_by(os.environ)))
        except ValueError as error:
            print(f"dlscale-history: {error}", file=sys.stderr)
            return 2
        return 0
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
        print(f"persistent regression (latest level more than {args.threshold:.0%} below the level accepted last, "
              f"else the one before): " + ", ".join(regressed))
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
