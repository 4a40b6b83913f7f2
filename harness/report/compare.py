"""Two results files side by side: each cell's change, with intervals, judged by the suite's own core.

    python -m harness.report.compare OLD.json NEW.json [--band 0.15] [--no-yardstick] [--csv FILE]
    dlscale-compare OLD.json NEW.json

The older file stands where a baseline would: each of its cells becomes a baseline entry (value,
config hash, fingerprint, machine yardstick) with a band of ``+-band``, and the newer file's cell
is judged against it by :func:`harness.judging.verdicts.judge_cell`, so a comparison says exactly what the
suite would (``stale`` for another workload or other hardware, ``machine-differs``, the software
that changed, both readings of a CPU throughput). Where both files counted a cell's work
(harness.judging.work), what moved between them is said beside it. Exit status 1 when a cell
fails, else 0.
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import sys
from pathlib import Path
from typing import Mapping, Sequence

from harness.judging.kinds import ERROR, VerdictKind
from harness.judging.stats import Estimate
from harness.judging.tunables import DEFAULT_TUNABLES
from harness.judging.verdicts import Evidence, Reference, judge_cell, overall
from harness.judging.work import WorkChange, compare_work
from harness.judging.yardstick import Yardstick
from harness.report.tables import format_table

HEADER = ["cell", "old img/s (95% CI)", "new img/s (95% CI)", "delta", "machine", "work", "verdict"]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Compared:
    cell: str
    old: Estimate | None
    new: Estimate | None
    verdict: str
    """A verdict kind, or ``only in old`` / ``only in new`` / ``error``."""
    machine_speed: float | None = None
    messages: tuple[str, ...] = ()
    work: WorkChange | None = None
    """What moved from the old file's counted work to the new one's, where both counted."""

    def row(self) -> list[str]:
        delta = f"{self.new.value / self.old.value - 1:+.1%}" if self.old and self.new else "-"
        machine = f"{self.machine_speed - 1:+.1%}" if self.machine_speed else "-"
        work = "-" if self.work is None or not self.work.comparable else "moved" if self.work.changed else "same"
        return [self.cell, self.old.text(1) if self.old else "-",
                self.new.text(1) if self.new else "-", delta, machine, work, self.verdict]


def compare(old: Mapping, new: Mapping, *, band: float = DEFAULT_TUNABLES.default_band, use_yardstick: bool = True,
            old_name: str = "the old results") -> list[Compared]:
    """Every cell of either results document (``results.json`` as the suite writes it), in the new
    file's order, then those only the old one has."""
    before = {cell["cell"]: cell for cell in old.get("cells", [])}
    after = {cell["cell"]: cell for cell in new.get("cells", [])}
    compared = []
    for cell_id, measured in after.items():
        if cell_id not in before:
            compared.append(Compared(cell=cell_id, old=None, new=Estimate.from_json(measured.get("throughput")),
                                     verdict="only in new"))
            continue
        compared.append(_judged(before[cell_id], measured, old.get("workload") or {}, new.get("workload") or {},
                                band=band, use_yardstick=use_yardstick, old_name=old_name))
    compared += [Compared(cell=cell_id, old=Estimate.from_json(cell.get("throughput")), new=None, verdict="only in old")
                 for cell_id, cell in before.items() if cell_id not in after]
    return compared


def _judged(old: Mapping, new: Mapping, old_config: Mapping, new_config: Mapping, *, band: float,
            use_yardstick: bool, old_name: str) -> Compared:
    before, after = Estimate.from_json(old.get("throughput")), Estimate.from_json(new.get("throughput"))
    if before is None or after is None:
        return Compared(cell=new["cell"], old=before, new=after, verdict=ERROR,
                        messages=(f"no throughput in the {'old' if before is None else 'new'} file",))
    entry = {"throughput": {"value": before.value}, "config_hash": old.get("config_hash"), "config": old_config,
             "fingerprint": old.get("fingerprint"), "yardstick": old.get("yardstick"),
             "cpu_wait_share": old.get("cpu_wait_share")}
    references = {"throughput": Reference(value=before.value, lower=-band, upper=band, unit="img/s")}
    old_efficiency = Estimate.from_json(old.get("efficiency"))
    if old_efficiency and old.get("efficiency_source") == "measured":
        references["efficiency"] = Reference(value=old_efficiency.value, lower=-band, upper=band, unit="")
    evidence = Evidence(cell_id=new["cell"], config_hash=new.get("config_hash") or "", config=new_config,
                        throughput=after, efficiency=Estimate.from_json(new.get("efficiency")),
                        efficiency_source=new.get("efficiency_source"), fingerprint=new.get("fingerprint"),
                        yardstick=Yardstick.from_json(new.get("yardstick")), cpu_wait_share=new.get("cpu_wait_share"),
                        outside_share=new.get("outside_share"),
                        launches=max(1, int(new.get("runs") or 1) - int(new.get("contended_runs") or 0)))
    judgement = judge_cell(evidence, entry, references, use_yardstick=use_yardstick, baseline_path=old_name)
    work = compare_work(old.get("work"), new.get("work"), before_name="the old file", after_name="the new file") \
        if old.get("work") or new.get("work") else None
    return Compared(cell=new["cell"], old=before, new=after, verdict=overall(judgement.verdicts),
                    machine_speed=judgement.machine_speed, messages=tuple(v.message for v in judgement.verdicts),
                    work=work)


def write_csv(compared: Sequence[Compared], path: Path) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["cell", "old", "old_low", "old_high", "new", "new_low", "new_high", "machine_speed",
                         "verdict", "message", "work"])
        for c in compared:
            figures = [value if value is not None else "" for estimate in (c.old, c.new)
                       for value in (estimate.to_json()[key] if estimate else None for key in ("value", "low", "high"))]
            writer.writerow([c.cell, *figures, c.machine_speed or "", c.verdict, " | ".join(c.messages),
                             c.work.text() if c.work else ""])


def _load(path: Path) -> Mapping:
    try:
        document = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise SystemExit(f"dlscale-compare: cannot read {path}: {error}") from None
    if not isinstance(document, Mapping) or not isinstance(document.get("cells"), list):
        raise SystemExit(f"dlscale-compare: {path} is not a dlscale results file (no \"cells\" list)")
    return document


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dlscale-compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("old", type=Path, help="the earlier results.json (it stands where a baseline would)")
    parser.add_argument("new", type=Path, help="the later results.json")
    parser.add_argument("--band", type=float, default=DEFAULT_TUNABLES.default_band,
                        help="relative band around the old figure (default %(default)s)")
    parser.add_argument("--no-yardstick", action="store_true", help="judge CPU throughputs as measured only")
    parser.add_argument("--csv", type=Path, help="also write the comparison to this CSV file")
    args = parser.parse_args(argv)
    if not 0 < args.band < 1:
        parser.error(f"--band must lie between 0 and 1, got {args.band}")
    compared = compare(_load(args.old), _load(args.new), band=args.band, use_yardstick=not args.no_yardstick,
                       old_name=str(args.old))
    print(format_table([HEADER, *(c.row() for c in compared)]))
    for c in compared:
        if c.verdict not in (VerdictKind.PASS, "only in old", "only in new"):
            print(f"{c.cell}: {c.verdict}: {'; '.join(c.messages)}")
        if c.work is not None and (c.work.changed or not c.work.comparable):
            print(f"{c.cell}: {c.work.text()}")
    if args.csv:
        write_csv(compared, args.csv)
        print(f"written to {args.csv}")
    return 1 if any(c.verdict == VerdictKind.FAIL for c in compared) else 0


if __name__ == "__main__":
    sys.exit(main())
