"""One scaling-suite session: prepare once, measure and judge each cell, keep its results and
history, record baselines. Free of pytest; the plugin drives it, the self-test too.

The session is thin: each job is a part of its own, built here once and called in one direction
(session -> its parts -> judging, launch, store):

- :mod:`harness.session.preparation`: the matrix's queries and the checks before the first cell;
- :mod:`harness.session.launching`: every launch the session makes (the bisect takes this part);
- :mod:`harness.session.stored`: a cell launched until its stored-baseline verdict is settled,
  judged by :mod:`harness.session.evaluation`;
- :mod:`harness.session.against`: ``--against``'s A/Bs;
- :mod:`harness.session.confirming`: ``--confirm``;
- :mod:`harness.session.discoveries`: the false-discovery control over the session's A/Bs;
- :mod:`harness.session.keeping`: the results, the history and the results file;
- :mod:`harness.session.baseline_keeping`: ``--update-baselines``."""
from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Callable

from harness.common.interrupts import INTERRUPTS
from harness.config.cells import AccuracyCell, config_hash
from harness.config.options import SuiteError, SuiteOptions
from harness.judging.verdicts import judge_accuracy
from harness.launch.launchers import Launcher
from harness.launch.runner import CellRun, RunLimits
from harness.machine import references
from harness.rank.cell import Cell
from harness.rank.spec import RankOptions
from harness.rank.workload import Workload
from harness.session import discoveries
from harness.session.against import Against
from harness.session.baseline_keeping import ACCURACY_SETTINGS, record_baselines
from harness.session.confirming import Confirming
from harness.session.evaluation import evaluate
from harness.session.history_keeping import SessionHistory
from harness.session.keeping import Keeping
from harness.session.launching import Launching
from harness.session.paired import Confirmation, PairedResult, PairSettings
from harness.session.preparation import Prepared, Preparation
from harness.session.results import AccuracyResult, CellResult
from harness.session.stored import measure_until_settled

__all__ = ["Suite", "SuiteError", "SuiteOptions", "CellResult", "AccuracyResult"]

Progress = Callable[[str], None] | None


class Suite:
    """A session: its parts, and what the plugin, the self-test and the bisect ask of it."""

    def __init__(self, options: SuiteOptions):
        self.options = options
        self.preparation = Preparation(options)
        self.launching = Launching(self.preparation)
        self.keeping = Keeping(self.preparation)
        self.against = Against(self.preparation, self.launching, self.keeping)
        self.confirming_part = Confirming(self.preparation, self.launching, self.against, self.keeping)
        self.baseline_changes: list[str] | None = None
        self.baseline_error: str | None = None
        """Why ``--update-baselines`` could not write the file (e.g. another session held its lock)."""
        self.baselines_kept: list[str] = []
        """Cells ``--update-baselines`` did not record, each with why."""
        self.package_sets_written: list[Path] = []
        """The package sets ``--update-baselines`` wrote beside the baseline file, which its entries
        name: to be committed with it (harness.store.environments)."""

    # -- what the parts found and keep -----------------------------------------------------------
    @property
    def prepared(self) -> Prepared | None:
        return self.preparation.prepared

    @prepared.setter
    def prepared(self, prepared: Prepared | None) -> None:
        self.preparation.prepared = prepared

    matrix = property(lambda self: self.preparation.matrix)
    launch_environment = property(lambda self: self.preparation.launch_environment)
    """The variables every rank of the session gets (:class:`harness.session.preparation.Preparation`)."""
    launcher_name = property(lambda self: self.preparation.launcher_name)
    uses_gpus = property(lambda self: self.preparation.uses_gpus)
    ps_servers = property(lambda self: self.preparation.ps_servers)
    pair_settings = property(lambda self: self.preparation.pair_settings)
    results = property(lambda self: self.keeping.results)
    accuracy_results = property(lambda self: self.keeping.accuracy_results)
    paired_results = property(lambda self: self.keeping.paired_results)
    confirming = property(lambda self: self.keeping.confirming)
    cut_short = property(lambda self: self.keeping.cut_short)
    unmeasured_for_time = property(lambda self: self.keeping.unmeasured_for_time)
    history = property(lambda self: self.keeping.history)

    # -- before any process starts -------------------------------------------------------------
    def cells(self) -> list[Cell]:
        return self.preparation.cells()

    def accuracy_cells(self) -> list[AccuracyCell]:
        return self.preparation.accuracy_cells()

    def skip_reason(self, cell: Cell | AccuracyCell) -> str | None:
        return self.preparation.skip_reason(cell)

    def prepare(self) -> Prepared:
        """Check everything a cell needs, once, before the first cell starts."""
        return self.preparation.prepare()

    # -- measuring -------------------------------------------------------------------------------
    def measure(self, cell: Cell, on_progress: Progress = None) -> CellResult:
        """Launch the cell until its throughput interval is narrow enough and its verdict is not
        inconclusive, or until its measuring budget is spent; judge the pooled samples
        (:func:`harness.session.stored.measure_until_settled`)."""
        ready = self.prepare()
        result = CellResult(cell=cell, runs=[], config_hash=config_hash(dataclasses.asdict(ready.workload), cell))
        judge = functools.partial(evaluate, config=dataclasses.asdict(ready.workload), baselines=ready.baselines,
                                  reference_cell=self.preparation.reference_cell(cell), earlier=self.results,
                                  use_yardstick=self.options.yardstick)
        try:
            measure_until_settled(result, functools.partial(self.launching.launch_cell, cell, on_progress), judge,
                                  precision=self.options.precision, budget_s=self.options.measure_budget,
                                  on_progress=on_progress)
        except BaseException:
            if not result.runs:
                self.cut_short.append(cell.id)
            raise
        finally:
            with INTERRUPTS.protect():
                self.keeping.record(result)
        return result

    def measure_against(self, cell: Cell, on_progress: Progress = None) -> PairedResult:
        """Measure the cell as pairs of launches, the reference environment's (``--against``) and the
        current one's (:class:`harness.session.against.Against`)."""
        return self.against.measure(cell, on_progress)

    def confirm(self, result: CellResult, on_progress: Progress = None) -> Confirmation:
        """Confirm a cell's stored-baseline verdict by an A/B against the environment its baseline was
        recorded with (:class:`harness.session.confirming.Confirming`)."""
        return self.confirming_part.confirm(result, on_progress)

    def change_surely_stands(self, result: PairedResult, cells: int) -> bool:
        return discoveries.change_surely_stands(result, cells, self.pair_settings.alpha)

    def control_false_discoveries(self, cells: int) -> list[PairedResult]:
        """The false-discovery control over the session's A/Bs
        (:func:`harness.session.discoveries.control_false_discoveries`)."""
        return discoveries.control_false_discoveries(self.keeping, cells, self.pair_settings.alpha)

    def measure_accuracy(self, cell: AccuracyCell, on_progress: Progress = None) -> AccuracyResult:
        """Train the accuracy task once under the cell's framework; judge its final accuracy."""
        ready = self.prepare()
        run = self.launching.launch_accuracy(cell, dataclasses.asdict(ACCURACY_SETTINGS), on_progress)
        result = AccuracyResult(cell=cell, run=run, config_hash=ACCURACY_SETTINGS.config_hash(cell))
        if run.ok:
            result.outcome = min(run.records, key=lambda r: r["rank"])
            result.verdict = judge_accuracy(result.outcome["final_val_accuracy"], ready.baselines.entry(cell.id),
                                            ready.baselines.reference(cell.id, "accuracy"),
                                            config_hash=result.config_hash)
        self.accuracy_results.append(result)
        self.keeping.keep(result)
        return result

    def launch_in(self, cell: Cell, environment: references.Environment, place: str, *,
                  launcher: Launcher | None = None, on_progress: Progress = None,
                  options: RankOptions | None = None, workload: Workload | None = None,
                  limits: RunLimits | None = None) -> CellRun:
        """One launch of ``cell`` in ``environment`` (:meth:`harness.session.launching.Launching.launch_in`)."""
        return self.launching.launch_in(cell, environment, place, launcher=launcher, on_progress=on_progress,
                                        options=options, workload=workload, limits=limits)

    def launch_counting_instructions(self, cell: Cell, environment: references.Environment, place: str, *,
                                     launcher: Launcher | None = None, on_progress: Progress = None) -> CellRun:
        return self.launching.launch_counting_instructions(cell, environment, place, launcher=launcher,
                                                           on_progress=on_progress)

    # -- keeping ---------------------------------------------------------------------------------
    def leave_unmeasured_for_time(self, cell_id: str) -> None:
        """A cell not started for want of time: named in the results file."""
        self.keeping.leave_unmeasured_for_time(cell_id)

    def history_rows(self) -> list[dict]:
        """The system's history lines, this session's included; none where it keeps no history."""
        return self.keeping.history_rows()

    def results_document(self) -> dict:
        return self.keeping.results_document()

    def write_results(self, path: Path) -> None:
        self.keeping.write_results(path)

    def update_baselines(self) -> list[str]:
        """Write the completed cells into the baseline file
        (:func:`harness.session.baseline_keeping.record_baselines`); the cells not recorded and the
        package sets written are kept beside the changes."""
        recorded = record_baselines(self.preparation, self.keeping)
        self.baselines_kept.extend(recorded.kept)
        self.package_sets_written.extend(recorded.package_sets_written)
        return recorded.changes
