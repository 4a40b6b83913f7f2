"""The tables a session's results make: the cells' summary (which the HTML report renders too), the
accuracy cells', the A/B cells'; and their text form."""
from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Sequence

from harness.common.jsonio import finite_number
from harness.judging.kinds import ERROR, VerdictKind
from harness.judging.stats import Estimate
from harness.judging.yardstick import normalise

if TYPE_CHECKING:
    from harness.session.paired import PairedResult
    from harness.session.results import AccuracyResult, CellResult


SUMMARY_COLUMNS = ("cell", "launcher", "img/s (95% CI)", "img/s/rank", "E_G (95% CI)", "step s", "baseline img/s",
                   "delta", "machine", "runs", "verdict")


def summary_rows(cells: Sequence[Mapping]) -> list[list[str]]:
    """The cells' summary, the one table the terminal and the HTML report both render: one row per
    cell of a results file (``CellResult.to_json``), headed by :data:`SUMMARY_COLUMNS`: its interval,
    per training rank too (a parameter server does not train), E_G, step time, baseline, change,
    machine speed, launches and verdict."""
    rows = [list(SUMMARY_COLUMNS)]
    for cell in cells:
        metrics = cell.get("metrics") or {}
        throughput = Estimate.from_json(cell.get("throughput"))
        baseline = cell.get("baseline_throughput")
        baseline = baseline if finite_number(baseline) and baseline > 0 else None
        machine_speed = cell.get("machine_speed") if finite_number(cell.get("machine_speed")) else None
        runs = str(cell.get("runs", "-"))
        if cell.get("contended_runs"):
            runs += f" ({cell['contended_runs']} contended, left out)"
        verdict = cell.get("verdict", "-")
        if verdict == ERROR:
            verdict = f"{ERROR} ({cell.get('status', '-')})"
        if throughput is None:
            rows.append([cell["cell"], cell.get("launcher", "-"), "-", "-", "-", "-",
                         f"{baseline:.1f}" if baseline else "-", "-", "-", runs, verdict])
            continue
        if baseline is None:
            delta = "-"
        elif verdict == VerdictKind.MACHINE_DIFFERS:  # normalising across machines means nothing: as measured
            delta = f"{throughput.value / baseline - 1:+.1%} raw"
        else:
            delta = f"{normalise(throughput.value, machine_speed) / baseline - 1:+.1%}"
        ranks = metrics.get("ranks")
        efficiency = Estimate.from_json(cell.get("efficiency"))
        efficiency = efficiency.text(3) if efficiency else "-"
        if cell.get("efficiency_source") not in (None, "measured"):
            efficiency += f" (ref: {cell['efficiency_source']})"
        rows.append([cell["cell"], cell.get("launcher", "-"), throughput.text(1),
                     f"{throughput.value / ranks:.1f}" if ranks else "-", efficiency,
                     f"{metrics['step_time']:.4f}" if finite_number(metrics.get("step_time")) else "-",
                     f"{baseline:.1f}" if baseline else "-", delta,
                     f"{machine_speed - 1:+.1%}" if machine_speed else "-", runs, verdict])
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
    """One row per A/B cell: whether its sides' counted work moved, each side's median throughput, their ratio with its interval (at the
    level of the look that reached it), the test's p-value, each side's E_G, each side's median
    launch against its measured window (what a launch costs beside what it measures) and the
    verdict; and, where a cell has a stored baseline, the verdict that baseline gives the current
    side's launches."""
    stored = any(r.stored_baseline for r in results)
    rows = [["cell", "pairs", "work", "reference img/s", "current img/s", "current/reference (interval)", "p",
             "E_G ref / cur", "launch s / measured s, ref | cur", "verdict", *(["stored baseline"] if stored else [])]]
    for r in results:
        baseline_verdict = [r.stored_baseline["verdict"] if r.stored_baseline else "-"] if stored else []
        pairs = str(len(r.pairs)) + "".join(f" ({count} {what})" for count, what in (
            (len(r.left_out), "left out"), (len(r.failures), "failed")) if count)
        times = " | ".join(_launch_times(r.side_times(side)) for side in ("reference", "current"))
        work = _work_word(r.work_change)
        if not r.pairs or r.verdict is None:
            rows.append([r.cell.id, pairs, work, "-", "-", "-", "-", "-", times, r.verdict_kind, *baseline_verdict])
            continue
        efficiency = f"{r.efficiency['reference']:.3f} / {r.efficiency['current']:.3f}" if r.efficiency else "-"
        rows.append([r.cell.id, pairs, work, f"{r.median('reference'):.1f}", f"{r.median('current'):.1f}",
                     f"{r.verdict.ratio.text(3)} {r.verdict.ratio.confidence:.1%}", f"{r.verdict.p_value:.3g}",
                     efficiency, times, r.verdict_kind, *baseline_verdict])
    return rows


def _work_word(change) -> str:
    """The work column: whether the sides' counted work moved (the lines under the table say what)."""
    if change is None or not change.comparable:
        return "-"
    return "moved" if change.changed else "same"


def _launch_times(times: tuple[float, float] | None) -> str:
    return f"{times[0]:.1f} / {times[1]:.2f}" if times else "-"


def format_table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)
