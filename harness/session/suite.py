"""One scaling-suite session: prepare once, measure and judge each cell, keep its results and
history, record baselines. Free of pytest; the plugin drives it, the self-test too.

Its parts live beside it: the settings (:mod:`harness.config.options`), the checks before the first cell
(:mod:`harness.session.preflight`), one cell's launches (:mod:`harness.launch.runner`), the figures from its
records (:mod:`harness.session.evaluation`), the verdicts (:mod:`harness.judging.verdicts`), the baseline entries
(:mod:`harness.judging.recording`) and the end-of-run tables (:mod:`harness.report.tables`)."""
from __future__ import annotations

import dataclasses
import functools
import os
import time
import uuid
from pathlib import Path
from typing import Callable

from harness import HARNESS_SOURCE
from harness.common.interrupts import INTERRUPTS
from harness.common.jsonio import write_json_atomic
from harness.config.cells import PROFILES, AccuracyCell, AccuracySettings, Profile, accuracy_cells, config_hash
from harness.config.options import SuiteError, SuiteOptions, check_settings
from harness.judging.kinds import VerdictKind
from harness.judging.recording import accuracy_entry, baseline_entries
from harness.judging.verdicts import judge_accuracy, measured_enough
from harness.launch.launchers import LAUNCHERS, Launcher, default_launcher_name
from harness.launch.runner import CellRun, run_cell
from harness.machine.allocation import launch_environment
from harness.machine.environment import capture as capture_environment
from harness.machine import references
from harness.machine.provenance import installed_packages, provenance
from harness.machine.system import detect_system, rank_capacity
from harness.rank.cell import Cell
from harness.rank.faults import Fault
from harness.rank.frameworks import training_ranks
from harness.rank.packages import tracked_packages
from harness.rank.spec import RankOptions
from harness.rank.workload import Workload
from harness.session import preflight
from harness.session.evaluation import evaluate
from harness.session.paired import (Confirmation, PairedResult, PairSettings, confirmed_by, measure_pairs,
                                    side_efficiency)
from harness.session.results import AccuracyResult, CellResult, to_json
from harness.store import environments
from harness.store.baselines import BaselineError, BaselineFile
from harness.store.history import append as append_history
from harness.store.history import read as read_history

__all__ = ["Suite", "SuiteError", "SuiteOptions", "CellResult", "AccuracyResult"]

ACCURACY_SETTINGS = AccuracySettings()


class Suite:
    def __init__(self, options: SuiteOptions):
        self.options = options
        self.results: list[CellResult] = []
        self.baseline_changes: list[str] | None = None
        self.baseline_error: str | None = None
        """Why ``--update-baselines`` could not write the file (e.g. another session held its lock)."""
        self.baselines_kept: list[str] = []
        """Cells ``--update-baselines`` did not record, each with why."""
        self.accuracy_results: list[AccuracyResult] = []
        self.paired_results: list[PairedResult] = []
        """Cells measured as an A/B against the reference environment (``--against``)."""
        self.cut_short: list[str] = []
        """Cells an interrupt ended before any launch of theirs was judged."""
        self._prepared = False
        check_settings(options)
        self.matrix = preflight.matrix_of(options)
        try:
            self.launch_environment = launch_environment(options.launch_env, options.launch_env_file, os.environ)
        except ValueError as error:
            raise SuiteError(str(error)) from None

    @functools.cached_property
    def launcher_name(self) -> str:
        return self.options.launcher or default_launcher_name()

    # -- before any process starts -------------------------------------------------------------
    def cells(self) -> list[Cell]:
        return self.matrix.cells()

    def accuracy_cells(self) -> list[AccuracyCell]:
        frameworks = self.matrix.frameworks if self.options.frameworks else ("ddp",)
        return [c for c in accuracy_cells(frameworks) if c.ranks in self.matrix.ranks or not self.options.gpus]

    @functools.cached_property
    def uses_gpus(self) -> bool:
        return preflight.uses_gpus(self.options.device)

    def skip_reason(self, cell: Cell | AccuracyCell) -> str | None:
        reason = preflight.skip_reason(cell, self.uses_gpus, *self._rank_capacity, ps_servers=self.ps_servers)
        return reason or (self._launcher_as_named.cannot_lay_out(cell.ranks) if self._launcher_as_named else None)

    @functools.cached_property
    def _launcher_as_named(self) -> Launcher | None:
        """The launcher, before :meth:`prepare` has checked it can be used, to ask how it lays ranks
        out; None for a name :meth:`prepare` will refuse."""
        try:
            return LAUNCHERS.create(self.launcher_name, environment=self.launch_environment)
        except ValueError:
            return None

    @functools.cached_property
    def _rank_capacity(self) -> tuple[int, str]:
        return rank_capacity(self.uses_gpus)

    @functools.cached_property
    def ps_servers(self) -> int:
        return self.profile.workload.replace(ps_servers=self.options.ps_servers).ps_servers

    @functools.cached_property
    def profile(self) -> Profile:
        name = self.options.profile
        return PROFILES[("study" if self.uses_gpus else "cpu-small") if name == "auto" else name]

    def workload(self) -> Workload:
        o = self.options
        return self.profile.workload.replace(image_size=o.image_size, batch_size=o.batch_size, steps=o.steps,
                                         warmup_steps=o.warmup_steps, num_workers=o.num_workers,
                                         ps_servers=o.ps_servers,
                                         data_dir=str(self.data_dir) if self.data_dir else None,
                                         tfrecord_dir=str(self.tfrecord_dir) if self.tfrecord_dir else None)

    def prepare(self) -> None:
        """Check everything a cell needs, once, before the first cell starts."""
        if self._prepared:
            return
        options = self.options
        if options.gpus:
            preflight.check_rank_counts(options, self.cells(), self.ps_servers, *self._rank_capacity)
        preflight.check_numerics(self.cells(), self.uses_gpus)
        preflight.check_writable_places(options)
        self.data_dir, self.tfrecord_dir = preflight.prepare_data(options, {cell.loader for cell in self.cells()},
                                                                   self.profile.dataset)
        self.launcher: Launcher = preflight.usable_launcher(self.launcher_name, self.launch_environment,
                                                            options.partition)
        try:
            self.system = detect_system(options.system, options.partition)
        except ValueError as error:
            raise SuiteError(str(error)) from None
        self.baselines = BaselineFile.load(options.baselines_dir / f"{self.system}.json", self.system)
        preflight.check_baseline_cells(self.baselines)
        if options.history_dir is not None:
            preflight.check_history(options.history_dir / f"{self.system}.jsonl")
        self._workload = self.workload()
        self.cores_per_rank = preflight.cores_per_rank(options, preflight.processes(
            self.cells(), self.ps_servers, self._rank_capacity[0]), self.uses_gpus)
        self._packages = installed_packages()
        self._provenance = provenance(HARNESS_SOURCE, self._packages, tracked=tracked_packages())
        self._environment = capture_environment()
        self.run_id = uuid.uuid4().hex[:12]
        self.limits = preflight.run_limits(options)
        self.current_environment = references.current(self.launch_environment)
        if options.against:
            self._prepare_reference()
        self._prepared = True

    def _prepare_reference(self) -> None:
        """The reference environment built, and a launcher that gives its ranks its variables."""
        try:
            self.reference_environment = references.build(self.options.against, self.current_environment)
        except references.ReferenceError as error:
            raise SuiteError(str(error)) from None
        self.reference_launcher = preflight.usable_launcher(
            self.launcher_name, dict(self.reference_environment.launch_environment), self.options.partition)
        self.environment_difference = references.difference(self.reference_environment, self.current_environment)

    # -- measuring -------------------------------------------------------------------------------
    def measure(self, cell: Cell, on_progress: Callable[[str], None] | None = None) -> CellResult:
        """Launch the cell until its throughput interval is narrow enough and its verdict is not
        inconclusive, or until its measuring budget is spent; judge the pooled samples."""
        self.prepare()
        result = CellResult(cell=cell, runs=[], config_hash=config_hash(dataclasses.asdict(self._workload), cell))
        started = time.monotonic()
        try:
            while True:
                run = run_cell(cell, self._workload, self.launcher, workdir=self.options.workdir,
                               limits=self.limits, options=self._rank_options(), on_progress=on_progress)
                with INTERRUPTS.protect(raise_pending=False):  # a judged launch is kept whole
                    result.runs.append(run)
                    if run.ok:
                        evaluate(result, config=dataclasses.asdict(self._workload), baselines=self.baselines,
                                 reference_cell=preflight.reference_cell(cell, self.matrix.ranks, self.ps_servers),
                                 earlier=self.results, use_yardstick=self.options.yardstick)
                if not run.ok or self._measured_enough(result, started, run.wall_s):
                    break
                if on_progress:
                    on_progress(f"{cell.id}: measuring again (interval +-{result.throughput.half_width_rel:.1%}, "
                                f"verdict {result.verdict})")
        except BaseException:
            if not result.runs:
                self.cut_short.append(cell.id)
            raise
        finally:
            with INTERRUPTS.protect():
                self._record(result)
        return result

    def measure_against(self, cell: Cell, on_progress: Callable[[str], None] | None = None) -> PairedResult:
        """Measure the cell as pairs of launches, the reference environment's (``--against``) and the
        current one's, on the same nodes in balanced random order; judge the pairs' ratios."""
        self.prepare()
        reason = preflight.cannot_start_in(self.reference_environment, cell.framework)
        if reason:
            result = PairedResult(cell=cell, reference=self.reference_environment, error=reason)
        else:
            current_runs: list[CellRun] = []
            result = self._pairs(cell, self.reference_environment, self.reference_launcher, on_progress,
                                 current_runs=current_runs)
            if result.pairs and self.baselines.entry(cell.id):
                result.stored_baseline = self._stored_verdict(cell, current_runs)
        reference_cell = preflight.reference_cell(cell, self.matrix.ranks, self.ps_servers)
        for earlier in self.paired_results:
            if earlier.cell == reference_cell:
                result.efficiency = side_efficiency(
                    result, earlier, training_ranks(cell.framework, cell.ranks, self.ps_servers),
                    training_ranks(reference_cell.framework, reference_cell.ranks, self.ps_servers))
        self.paired_results.append(result)
        self._keep_results()
        return result

    def confirm(self, result: CellResult, on_progress: Callable[[str], None] | None = None) -> Confirmation:
        """Confirm a cell's stored-baseline verdict by an A/B against the environment its baseline
        was recorded with, on this node now: a software or a system change (harness.session.paired)."""
        recorded = (self.baselines.entry(result.cell.id) or {}).get("provenance") or {}
        try:
            reference = self._baseline_environment(recorded, result.stack_changes)
        except references.ReferenceError as error:
            confirmation = Confirmation(cause="unknown", message=f"not confirmed by an A/B: {error}")
        else:
            if reference is None:
                confirmation = Confirmation(
                    cause="system", message=f"system: the baseline was recorded with this very environment (commit "
                                            f"{str(recorded['git_commit'])[:10]}, the same packages): the node changed")
            else:
                confirmation = confirmed_by(self._pairs(result.cell, reference, self.launcher, on_progress),
                                            references.describe_difference(
                                                references.difference(reference, self.current_environment)))
        result.confirmation = confirmation.to_json()
        self._keep_results()
        return confirmation

    def _baseline_environment(self, recorded: dict, stack_changes: list[str]) -> references.Environment | None:
        """The environment a baseline entry's provenance names, as a reference; None where it is the
        current one. :class:`references.ReferenceError` where it cannot be built here. A baseline from
        before full package sets were kept is compared by the tracked software (``stack_changes``)."""
        commit = recorded.get("git_commit")
        if not commit:
            raise references.ReferenceError("the baseline records no git commit")
        recorded_packages = environments.load(self.options.baselines_dir, recorded.get("environment") or "")
        if recorded_packages is None and stack_changes:
            raise references.ReferenceError(f"its full package set was not kept, and its packages differ "
                                            f"({', '.join(stack_changes[:4])}{' ...' if len(stack_changes) > 4 else ''})")
        pins = references.pins_to_rebuild(recorded_packages or {}, self._packages, references.project_distributions())
        if not pins and commit == self.current_environment.commit and not references.uncommitted_changes():
            return None
        return references.build([f"git:{commit}", *pins], self.current_environment)

    def _stored_verdict(self, cell: Cell, runs: list[CellRun]) -> dict:
        """The stored-baseline verdict of ``runs`` (an A/B's current side), pooled as :meth:`measure`
        pools a cell's launches; without the yardstick, which pairs do not run."""
        judged = CellResult(cell=cell, runs=[run for run in runs if run.ok],
                            config_hash=config_hash(dataclasses.asdict(self._workload), cell))
        evaluate(judged, config=dataclasses.asdict(self._workload), baselines=self.baselines,
                 reference_cell=preflight.reference_cell(cell, self.matrix.ranks, self.ps_servers), earlier=[],
                 use_yardstick=False)
        return {"verdict": judged.verdict, "throughput": to_json(judged.throughput), "launches": len(judged.runs),
                "contended_left_out": judged.contended_runs,
                "reasons": [f"{v.kind}: {v.message}" for v in judged.verdicts
                            if v.kind not in (VerdictKind.PASS, VerdictKind.NO_BASELINE)]}

    def _pairs(self, cell: Cell, reference: references.Environment, reference_launcher: Launcher,
               on_progress: Callable[[str], None] | None, current_runs: list[CellRun] | None = None) -> PairedResult:
        sides = {"reference": (reference_launcher, reference), "current": (self.launcher, self.current_environment)}

        def launch(side: str) -> CellRun:
            launcher, environment = sides[side]
            run = self.launch_in(cell, environment, side, launcher=launcher, on_progress=on_progress)
            if side == "current" and current_runs is not None:
                current_runs.append(run)
            return run

        o = self.options
        return measure_pairs(cell, reference, launch, PairSettings(first=o.pairs, most=o.max_pairs,
                                                                   min_effect=o.min_effect, budget_s=o.pairs_budget),
                             on_progress=on_progress)

    def launch_in(self, cell: Cell, environment: references.Environment, place: str, *,
                  launcher: Launcher | None = None, on_progress: Callable[[str], None] | None = None) -> CellRun:
        """One launch of ``cell`` in ``environment`` (an A/B's side, a bisect's point), its files under
        the workdir's ``place``. Without the yardstick: the ratios of launches side by side cancel the
        node's speed, which it would time."""
        self.prepare()
        return run_cell(cell, self._workload, launcher or self.launcher, workdir=self.options.workdir / place,
                        limits=self.limits, options=dataclasses.replace(self._rank_options(), yardstick=False),
                        on_progress=on_progress, source=environment.source, python=environment.python)

    def _rank_options(self) -> RankOptions:
        return RankOptions(device=self.options.device, cores_per_rank=self.cores_per_rank or None,
                           fault=Fault(**self.options.fault) if self.options.fault else None)

    def _measured_enough(self, result: CellResult, started: float, last_wall_s: float) -> bool:
        return measured_enough(result.throughput, result.verdict, precision=self.options.precision,
                               spent_s=time.monotonic() - started, next_launch_s=last_wall_s,
                               budget_s=self.options.measure_budget)

    def _record(self, result: CellResult) -> None:
        """Keep a cell with at least one launch: in the results, the history and the results file.
        An interrupt during a further launch keeps the launches already judged."""
        if not result.runs or (result.run.ok and result.metrics is None):
            return  # nothing launched, or judging it failed
        self.results.append(result)
        self._keep(result)

    def _keep(self, result: CellResult | AccuracyResult) -> None:
        """A result just added to the session's: its history line, and the results file again."""
        self._append_history(result)
        self._keep_results()

    def _keep_results(self) -> None:
        if self.options.results_json:
            self.write_results(self.options.results_json)

    def _append_history(self, result: CellResult | AccuracyResult) -> None:
        """One line per measured cell in ``history/<system>.jsonl``, written as soon as it is known."""
        if self.options.history_dir is None:
            return
        row = result.history_row(run_id=self.run_id, git_commit=self._provenance["git_commit"])
        append_history(self.options.history_dir / f"{self.system}.jsonl", [row])

    def history_rows(self) -> list[dict]:
        """The system's history lines, this session's included; none where it keeps no history."""
        if self.options.history_dir is None or not self._prepared:
            return []
        return read_history(self.options.history_dir / f"{self.system}.jsonl")[0]

    def measure_accuracy(self, cell: AccuracyCell,
                         on_progress: Callable[[str], None] | None = None) -> "AccuracyResult":
        """Train the accuracy task once under the cell's framework; judge its final accuracy."""
        self.prepare()
        run = run_cell(cell, None, self.launcher, workdir=self.options.workdir, limits=self.limits,
                       options=RankOptions(device=self.options.device,
                                           accuracy=dataclasses.asdict(ACCURACY_SETTINGS)),
                       on_progress=on_progress)
        result = AccuracyResult(cell=cell, run=run, config_hash=ACCURACY_SETTINGS.config_hash(cell))
        if run.ok:
            result.outcome = min(run.records, key=lambda r: r["rank"])
            result.verdict = judge_accuracy(result.outcome["final_val_accuracy"], self.baselines.entry(cell.id),
                                            self.baselines.reference(cell.id, "accuracy"),
                                            config_hash=result.config_hash)
        self.accuracy_results.append(result)
        self._keep(result)
        return result

    # -- after the cells -------------------------------------------------------------------------
    def results_document(self) -> dict:
        return {
            "system": getattr(self, "system", None), "launcher": self.launcher_name, "run_id": self.run_id,
            "cores_per_rank": getattr(self, "cores_per_rank", None),
            "workload": dataclasses.asdict(self._workload) if self._prepared else None,
            "provenance": self._provenance, "environment": self._environment,
            "launch_environment": self.launch_environment,
            "cells": [result.to_json() for result in self.results],
            "accuracy_cells": [result.to_json() for result in self.accuracy_results],
            "against": {"reference": self.reference_environment.to_json(),
                        "current": self.current_environment.to_json(),
                        "difference": self.environment_difference} if self.options.against and self._prepared else None,
            "paired_cells": [result.to_json() for result in self.paired_results],
        }

    def write_results(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, self.results_document())

    def update_baselines(self) -> list[str]:
        """Write the completed cells into the baseline file. A cell measured several times
        (``--repeat``) is stored as the mean of its repeats with a band derived from their spread
        (:mod:`harness.judging.recording`)."""
        entries, kept = baseline_entries(self.results, config=dataclasses.asdict(self._workload),
                                         provenance=self._provenance, band_floor=self.options.band_floor,
                                         accept_regressions=self.options.accept_regressions,
                                         widest=self.options.widest_baseline, use_yardstick=self.options.yardstick)
        self.baselines_kept.extend(kept)
        entries += [accuracy_entry(result, config=dataclasses.asdict(ACCURACY_SETTINGS), provenance=self._provenance)
                    for result in self.accuracy_results if result.outcome]
        if not entries:
            return []
        try:
            environments.keep(self.options.baselines_dir, self._packages)
        except OSError as error:
            raise BaselineError(f"cannot keep the environment's package set: {error.strerror}: {error.filename}") from None
        return self.baselines.update(entries)
