"""The text tables a session prints at its end: the cells' summary, the accuracy cells', the A/B cells'."""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from harness.judging.kinds import VerdictKind
from harness.judging.yardstick import normalise

if TYPE_CHECKING:
    from harness.store.baselines import BaselineFile
    from harness.session.paired import PairedResult
    from harness.session.results import AccuracyResult, CellResult


def summary_rows(results: Sequence[CellResult], baselines: BaselineFile | None) -> list[list[str]]:
    """One row per measured cell: its interval, per training rank too (a parameter server does not
    train), E_G, baseline, change, machine speed and verdict."""
    rows = [["cell", "launcher", "img/s (95% CI)", "img/s/rank", "E_G (95% CI)", "baseline img/s", "delta",
             "machine", "runs", "verdict"]]
    for r in results:
        reference = baselines.reference(r.cell.id, "throughput") if baselines else None
        baseline = f"{reference.value:.1f}" if reference else "-"
        if r.metrics is None:
            rows.append([r.cell.id, r.run.launcher, "-", "-", "-", baseline, "-", "-", str(len(r.runs)),
                         f"error ({r.run.status})"])
            continue
        if reference is None:
            delta = "-"
        elif r.verdict == VerdictKind.MACHINE_DIFFERS:  # normalising across machines means nothing: as measured
            delta = f"{r.throughput.value / reference.value - 1:+.1%} raw"
        else:
            delta = f"{normalise(r.throughput.value, r.machine_speed) / reference.value - 1:+.1%}"
        machine = f"{r.machine_speed - 1:+.1%}" if r.machine_speed else "-"
        efficiency = r.efficiency.text(3) if r.efficiency else "-"
        if r.efficiency_source == "baseline":
            efficiency += " (ref: baseline)"
        rows.append([r.cell.id, r.run.launcher, r.throughput.text(1),
                     f"{r.throughput.value / len(r.records):.1f}", efficiency, baseline, delta, machine,
                     f"{len(r.runs)} ({r.contended_runs} contended, left out)" if r.contended_runs else str(len(r.runs)),
                     r.verdict])
    return rows


def accuracy_rows(results: Sequence[AccuracyResult]) -> list[list[str]]:
    """Final validation accuracy, one row per framework and schedule, one column per global batch."""
    batches = sorted({r.cell.global_batch for r in results})
    rows = [["framework", "schedule"] + [f"batch {b}" for b in batches]]
    for framework, schedule in dict.fromkeys((r.cell.framework, r.cell.schedule) for r in results):
        row = [framework, schedule]
        for batch in batches:
            found = [r for r in results if (r.cell.framework, r.cell.schedule) == (framework, schedule)
                     and r.cell.global_batch == batch]
            row.append(", ".join(f"{r.outcome['final_val_accuracy']:.1%} ({r.verdict.kind})" if r.outcome
                                 else f"error ({r.run.status})" for r in found) or "-")
        rows.append(row)
    return rows


def paired_rows(results: Sequence[PairedResult]) -> list[list[str]]:
    """One row per A/B cell: each side's median throughput, their ratio with its interval, the
    test's p-value, each side's E_G and the verdict; and, where a cell has a stored baseline, the
    verdict that baseline gives the current side's launches."""
    stored = any(r.stored_baseline for r in results)
    rows = [["cell", "pairs", "reference img/s", "current img/s", "current/reference (95% CI)", "p",
             "E_G ref / cur", "verdict", *(["stored baseline"] if stored else [])]]
    for r in results:
        baseline_verdict = [r.stored_baseline["verdict"] if r.stored_baseline else "-"] if stored else []
        if not r.pairs or r.verdict is None:
            rows.append([r.cell.id, f"0 ({len(r.dropped)} dropped)", "-", "-", "-", "-", "-", r.verdict_kind,
                         *baseline_verdict])
            continue
        pairs = f"{len(r.pairs)} ({len(r.dropped)} dropped)" if r.dropped else str(len(r.pairs))
        efficiency = f"{r.efficiency['reference']:.3f} / {r.efficiency['current']:.3f}" if r.efficiency else "-"
        rows.append([r.cell.id, pairs, f"{r.median('reference'):.1f}", f"{r.median('current'):.1f}",
                     r.verdict.ratio.text(3), f"{r.verdict.p_value:.3g}", efficiency, r.verdict_kind,
                     *baseline_verdict])
    return rows


def format_table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)
