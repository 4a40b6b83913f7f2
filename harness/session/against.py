"""``--against``: a cell measured as pairs of launches, the reference environment's and the current
one's, on the same nodes in balanced random order (the A/B core, :mod:`harness.session.paired`),
its host instructions counted first where asked, the stored baseline's verdict of its current side's
launches and each side's E_G beside it. ``--confirm`` runs its A/Bs through :meth:`Against.pairs`."""
from __future__ import annotations

import dataclasses
from typing import Callable

from harness.config.cells import config_hash
from harness.judging.kinds import VerdictKind
from harness.launch.launchers import Launcher
from harness.launch.runner import CellRun
from harness.machine import references
from harness.rank.cell import Cell
from harness.rank.frameworks import training_ranks
from harness.session import preflight
from harness.session.evaluation import evaluate
from harness.session.keeping import Keeping
from harness.session.launching import Launching
from harness.session.paired import PairedResult, PairsInterrupted, measure_pairs, side_efficiency
from harness.session.preparation import Preparation
from harness.session.results import CellResult, to_json


class Against:
    """The session's A/Bs."""

    def __init__(self, preparation: Preparation, launching: Launching, keeping: Keeping):
        self.preparation, self.launching, self.keeping = preparation, launching, keeping
        self.options = preparation.options

    def measure(self, cell: Cell, on_progress: Callable[[str], None] | None = None) -> PairedResult:
        """Measure the cell as pairs of launches, the reference environment's (``--against``) and the
        current one's, on the same nodes in balanced random order; judge the pairs' ratios."""
        ready = self.preparation.prepare()
        reason = preflight.cannot_start_in(ready.reference.environment, cell.framework)
        interrupt = None
        if reason:
            result = PairedResult(cell=cell, reference=ready.reference.environment, error=reason)
        else:
            current_runs: list[CellRun] = []
            result, interrupt = self.pairs(cell, ready.reference.environment, ready.reference.launcher, on_progress,
                                           current_runs=current_runs)
            if result.pairs and ready.baselines.entry(cell.id) and not result.duet:  # a duet's ran on half the node
                result.stored_baseline = self.stored_verdict(cell, current_runs)
        reference_cell = self.preparation.reference_cell(cell)
        for earlier in self.keeping.paired_results:
            if earlier.cell == reference_cell:
                servers = self.preparation.ps_servers
                result.efficiency = side_efficiency(
                    result, earlier, training_ranks(cell.framework, cell.ranks, servers),
                    training_ranks(reference_cell.framework, reference_cell.ranks, servers))
        self.keeping.paired_results.append(result)
        self.keeping.keep_results()
        if interrupt:
            raise interrupt
        return result

    def stored_verdict(self, cell: Cell, runs: list[CellRun]) -> dict:
        """The stored-baseline verdict of ``runs`` (an A/B's current side), pooled as :meth:`measure`
        pools a cell's launches; without the yardstick, which pairs do not run."""
        ready = self.preparation.prepare()
        judged = CellResult(cell=cell, runs=[run for run in runs if run.ok],
                            config_hash=config_hash(dataclasses.asdict(ready.workload), cell))
        evaluate(judged, config=dataclasses.asdict(ready.workload), baselines=ready.baselines,
                 reference_cell=self.preparation.reference_cell(cell), earlier=[], use_yardstick=False)
        return {"verdict": judged.verdict, "throughput": to_json(judged.throughput), "launches": len(judged.runs),
                "contended_left_out": judged.contended_runs,
                "reasons": [f"{v.kind}: {v.message}" for v in judged.verdicts
                            if v.kind not in (VerdictKind.PASS, VerdictKind.NO_BASELINE)]}

    def pairs(self, cell: Cell, reference: references.Environment, reference_launcher: Launcher,
              on_progress: Callable[[str], None] | None, current_runs: list[CellRun] | None = None
              ) -> tuple[PairedResult, PairsInterrupted | None]:
        """The A/B's pairs, and the interrupt that ended them if one did: the caller keeps the
        pairs, then raises it again."""
        ready = self.preparation.prepare()
        sides = {"reference": (reference_launcher, reference), "current": (ready.launcher, ready.current_environment)}

        def launch(side: str) -> CellRun:
            launcher, environment = sides[side]
            run = self.launching.launch_in(cell, environment, side, launcher=launcher, on_progress=on_progress)
            if side == "current" and current_runs is not None:
                current_runs.append(run)
            return run

        o = self.options
        settings = self.preparation.pair_settings
        if reason := preflight.worker_cannot_pair(reference, self.launching.pair_rank_options()):
            return PairedResult(cell=cell, reference=reference, duet=o.duet, error=reason), None
        together = None
        if o.duet:
            if reason := self.launching.cannot_duet(cell, reference):
                return PairedResult(cell=cell, reference=reference, duet=True, error=reason), None
            together = self.launching.duet_launches(cell, sides, on_progress, current_runs)
        instructions = None
        if o.count_instructions:
            try:
                instructions = self.launching.instructions_of(cell, sides, on_progress)
            except KeyboardInterrupt as interrupt:
                result = PairedResult(cell=cell, reference=reference, duet=o.duet, interrupted=True,
                                      error="interrupted while counting instructions, before any pair")
                return result, PairsInterrupted(result)
        try:
            # the A/B's own lines (its first pair's work, its looks) are never dropped for the launches' pace
            said = getattr(on_progress, "always", on_progress)
            result = measure_pairs(cell, reference, launch, settings, on_progress=said, together=together)
            interrupt = None
        except PairsInterrupted as interrupted:
            result, interrupt = interrupted.result, interrupted
        result.instructions = instructions
        if instructions:  # its launches logged before the pairs', as they ran
            result.launch_log[:0] = instructions["launches"].values()
            result.launches += len(instructions["launches"])
        return result, interrupt
