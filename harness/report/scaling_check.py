"""The scaling model against this machine's own cells, where the answer is measured: E_G of each
cell predicted from the same cell at fewer ranks (1 -> 2 on one node), beside what the suite
measured.

    python -m harness.report.scaling_validation --results RESULTS [--intra COLLECTIVES]

Only the smaller cell goes in: its mean step (each step's slowest rank), the spread and the delay
of its ranks' step times (:func:`harness.report.stragglers.estimate_rank_delay`), its compute
(what backward can hide) and, with ``--intra``, this machine's all-reduce timings. Then

    predicted E_G = step(ref) / (step(ref) + wait(G) - wait(ref) + exposed(G) - exposed(ref))

Its interval: 95% of a bootstrap over the reference's timed steps, widened to the ends the link's
interval and the overlap (none to all of backward, on a 1-rank reference) reach. The measured E_G
and its interval are the suite's own. Beside them, what the model does not hold, from both cells'
records: each rank's wait for a CPU per step (``cpu_wait``: other work on its cores) and its
compute probe (forward+backward alone, timed while the cell's other ranks run: ranks that slow
each other's compute through shared caches, memory or cores).
"""
from __future__ import annotations

import dataclasses
import json
import random
import statistics
import sys
from pathlib import Path
from typing import Mapping, Sequence

from harness.config.cells import scaling_cell
from harness.report.network import Link, read_link
from harness.report.scaling_model import Assumptions, CellModel, Network, corners, model_of_records, step_terms
from harness.report.stragglers import estimate_rank_delay, expected_wait
from harness.report.tables import format_table

RESAMPLES = 1000
SEED = 59


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PredictedEfficiency:
    value: float
    low: float
    high: float
    wait_s: float
    """What the wait for the slowest rank adds to the step."""
    exposed_s: float
    """What communication backward does not hide adds (most likely overlap)."""

    def holds(self, measured: float) -> bool:
        return self.low <= measured <= self.high


def cell_step_s(step_times_by_rank: Sequence[Sequence[float]]) -> float:
    """A cell's mean step: each timed step's slowest rank."""
    return statistics.fmean(max(step) for step in zip(*step_times_by_rank))


def _efficiency(model: CellModel, network: Network | None, ranks: int, steps: Sequence[Sequence[float]],
                assumptions: Assumptions) -> tuple[float, float, float]:
    step = cell_step_s(steps)
    delay = estimate_rank_delay(steps)
    wait = expected_wait(delay, ranks) - expected_wait(delay, model.reference_gpus)
    exposed = 0.0
    if network is not None:
        exposed = (step_terms(model, network, ranks, assumptions)["exposed communication"]
                   - step_terms(model, network, model.reference_gpus, assumptions)["exposed communication"])
    return step / (step + wait + exposed), wait, exposed


def predict_from_reference(reference: Mapping, ranks: int, *, batch_per_gpu: int, num_classes: int,
                           link: Link | None, resamples: int = RESAMPLES, seed: int = SEED) -> PredictedEfficiency:
    """E_G of the cell ``reference`` (a results file's cell) at ``ranks`` ranks on one node, from
    its own records alone; ``link`` None: communication counts as hidden."""
    records = reference.get("records") or []
    model = model_of_records(reference["cell"], records, batch_per_gpu=batch_per_gpu, num_classes=num_classes)
    network = Network(intra=link, inter=link, gpus_per_node=ranks) if link else None
    steps = [r["step_times"] for r in records]
    likely, *others = corners(model, network) if network else [Assumptions()]
    value, wait, exposed = _efficiency(model, network, ranks, steps, likely)
    rng = random.Random(seed)
    count = min(len(s) for s in steps)
    resampled = []
    for _ in range(resamples):
        picks = [rng.randrange(count) for _ in range(count)]
        resampled.append(_efficiency(model, network, ranks, [[s[i] for i in picks] for s in steps], likely)[0])
    cuts = statistics.quantiles(resampled, n=40, method="inclusive")
    ends = [_efficiency(model, network, ranks, steps, corner)[0] for corner in others]
    return PredictedEfficiency(value=value, low=min([cuts[0], *ends]), high=max([cuts[-1], *ends]),
                               wait_s=wait, exposed_s=exposed)


def reference_pairs(results: Mapping) -> list[tuple[Mapping, Mapping]]:
    """(smaller, larger) pairs of a results file's completed cells that differ only in ranks: each
    larger cell with the cell of fewest ranks beside it."""
    groups: dict[object, list[tuple[int, Mapping]]] = {}
    for cell in results.get("cells", []):
        parsed = scaling_cell(cell.get("cell", ""))
        if parsed is None or not cell.get("records"):
            continue
        groups.setdefault(dataclasses.replace(parsed, ranks=0), []).append((parsed.ranks, cell))
    pairs = []
    for members in groups.values():
        members.sort(key=lambda member: member[0])
        pairs += [(members[0][1], larger) for _, larger in members[1:]]
    return pairs


def _cpu_wait_per_step(cell: Mapping) -> float | None:
    waits = [statistics.fmean(r["cpu_wait"]) for r in cell.get("records") or [] if r.get("cpu_wait")]
    return statistics.fmean(waits) if waits else None


def _compute_probe_s(cell: Mapping) -> float | None:
    probes = [probe for r in cell.get("records") or [] for probe in r.get("compute_probe") or []]
    return statistics.median(probes) if probes else None


def _interval(value: float, low: float | None, high: float | None) -> str:
    return f"{value:.3f} [{low:.3f}, {high:.3f}]" if low is not None and high is not None else f"{value:.3f}"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Beside:
    """A measured cell's E_G beside the model's prediction from the same cell at fewest ranks."""

    reference: Mapping
    cell: Mapping
    predicted: PredictedEfficiency

    @property
    def measured(self) -> float | None:
        return (self.cell.get("efficiency") or {}).get("value")

    @property
    def gap(self) -> float | None:
        """How far the measured E_G lies beyond the predicted band (0 inside it); None unmeasured."""
        measured = self.measured
        if measured is None:
            return None
        return measured - self.predicted.high if measured > self.predicted.high else \
            measured - self.predicted.low if measured < self.predicted.low else 0.0


def measured_beside_predicted(results: Mapping, link: Link | None) -> list[Beside]:
    """Each larger cell of a results file beside its prediction from the cell at fewest ranks."""
    workload = results.get("workload") or {}
    out = []
    for reference, cell in reference_pairs(results):
        predicted = predict_from_reference(reference, scaling_cell(cell["cell"]).ranks,
                                           batch_per_gpu=int(workload["batch_size"]),
                                           num_classes=int(workload.get("num_classes") or 1000), link=link)
        out.append(Beside(reference=reference, cell=cell, predicted=predicted))
    return out


def gap_lines(results: Mapping, link: Link | None) -> list[str]:
    """The session summary's lines: how many measured cells lie inside the model's band, each one
    beyond it with its gap, and that predictions past the measured ranks are extrapolations."""
    besides = [b for b in measured_beside_predicted(results, link) if b.measured is not None]
    if not besides:
        return []
    inside = sum(b.gap == 0 for b in besides)
    measured_ranks = max(scaling_cell(b.cell["cell"]).ranks for b in besides)
    lines = [f"scaling model: {inside} of {len(besides)} cell(s) measured inside the band predicted from their "
             f"fewest-rank cell ({'all-reduce: ' + link.source if link else 'no all-reduce timings: communication counts as hidden'})"]
    for b in besides:
        if b.gap:
            lines.append(f"{b.cell['cell']}: measured E_G {b.measured:.3f}, {b.gap:+.3f} beyond the scaling model's band "
                         f"[{b.predicted.low:.3f}, {b.predicted.high:.3f}] (predicted {b.predicted.value:.3f} from "
                         f"{b.reference['cell']}: +{b.predicted.wait_s * 1e3:.2f} ms wait for the slowest rank, "
                         f"+{b.predicted.exposed_s * 1e3:.2f} ms communication; what the model does not hold, e.g. ranks "
                         "sharing cores, is in python -m harness.report.scaling_validation --results)")
    lines.append(f"scaling model: predictions beyond {measured_ranks} rank(s) on one node are extrapolations until "
                 "checked on multi-node data")
    return lines


def check_rows(results: Mapping, link: Link | None) -> list[list[str]]:
    rows = [["cell", "from", "predicted E_G [95%]", "measured E_G [95%]", "measured inside", "gap beyond the band",
             "+wait ms", "+communication ms", "step s (from -> cell)", "CPU wait ms/step (from -> cell)",
             "compute probe s (from -> cell)"]]
    for beside in measured_beside_predicted(results, link):
        reference, cell, predicted = beside.reference, beside.cell, beside.predicted
        measured = cell.get("efficiency") or {}
        waits = [_cpu_wait_per_step(c) for c in (reference, cell)]
        probes = [_compute_probe_s(c) for c in (reference, cell)]
        steps = [cell_step_s([r["step_times"] for r in c["records"]]) for c in (reference, cell)]
        rows.append([cell["cell"], reference["cell"], _interval(predicted.value, predicted.low, predicted.high),
                     _interval(measured["value"], measured.get("low"), measured.get("high")) if measured else "-",
                     ("yes" if predicted.holds(measured["value"]) else "no") if measured else "-",
                     "-" if beside.gap is None else f"{beside.gap:+.3f}",
                     f"{predicted.wait_s * 1e3:.2f}", f"{predicted.exposed_s * 1e3:.2f}" if link else "hidden",
                     f"{steps[0]:.4f} -> {steps[1]:.4f}",
                     " -> ".join("-" if w is None else f"{w * 1e3:.1f}" for w in waits),
                     " -> ".join("-" if p is None else f"{p:.4f}" for p in probes)])
    return rows


def main(results_path: Path, intra: Path | None = None, ranks: int | None = None) -> int:
    try:
        results = json.loads(Path(results_path).read_text())
        link = read_link(intra, ranks) if intra else None
        rows = check_rows(results, link)
    except (OSError, ValueError, KeyError) as error:
        print(f"scaling_validation: {error}", file=sys.stderr)
        return 2
    if len(rows) == 1:
        print(f"scaling_validation: {results_path} holds no two cells that differ only in ranks", file=sys.stderr)
        return 2
    print(__doc__.split("\n\n")[0].replace("\n", " "))
    print(f"all-reduce: {link.describe()}" if link else
          "all-reduce: not given (--intra): communication counts as hidden behind backward")
    print(format_table(rows))
    return 0


def session_lines(cells: Sequence[Mapping], *, batch_per_gpu: int, num_classes: int,
                  collectives: Path | None = None) -> list[str]:
    """:func:`gap_lines` for a session's cells, with the node's measured all-reduce where a
    collective benchmark file exists; a file that cannot be read is said, not raised."""
    try:
        link = read_link(collectives) if collectives is not None and Path(collectives).exists() else None
        return gap_lines({"workload": {"batch_size": batch_per_gpu, "num_classes": num_classes},
                          "cells": list(cells)}, link)
    except (OSError, ValueError, KeyError) as error:
        return [f"scaling model: not compared with the measured cells ({error})"]
