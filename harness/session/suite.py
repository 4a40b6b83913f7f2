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
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Callable, Mapping

from harness import HARNESS_SOURCE
from harness.common.interrupts import INTERRUPTS
from harness.common.jsonio import write_json_atomic
from harness.config.cells import PROFILES, AccuracyCell, AccuracySettings, Profile, accuracy_cells, config_hash
from harness.config.options import SuiteError, SuiteOptions, check_settings
from harness.judging.confirmation import (SOFTWARE, UNKNOWN, Rebuild, Setting, Split, conclude, judged_now,
                                          plan_rebuild, rebuilt_code_missing, scaled, software_by_work)
from harness.judging.kinds import ERROR, VerdictKind
from harness.judging.paired import CALLS, calls_that_stand, hold, surely_stands
from harness.judging.recording import accuracy_entry, baseline_entries
from harness.judging.verdicts import Evidence, config_change, judge_accuracy
from harness.launch.launchers import LAUNCHERS, Launcher, default_launcher_name
from harness.launch.runner import CellRun, RunLimits, Together, run_cell, run_cells_together, worker_options
from harness.machine.allocation import launch_environment
from harness.machine.environment import capture as capture_environment
from harness.machine.environment import rank_settings
from harness.machine.huge_pages import HugePages
from harness.machine import references
from harness.machine.provenance import code_hash, environment_id, installed_packages, packages_of, provenance
from harness.machine.system import detect_system, rank_capacity
from harness.rank.cell import Cell
from harness.rank.faults import Fault
from harness.rank.frameworks import FRAMEWORKS, training_ranks
from harness.rank.packages import tracked_packages
from harness.rank.runtime import interpreter
from harness.rank.spec import RankOptions
from harness.rank.workload import Workload
from harness.session import duet, preflight
from harness.session.evaluation import evaluate
from harness.session.history_keeping import PackageSets, SessionHistory, band_of, night_of
from harness.session.instructions import count_instructions, instruction_limits, instruction_workload
from harness.session.paired import (Confirmation, PairedResult, PairsInterrupted, PairSettings, TogetherFn,
                                    confirmed_by, measure_pairs, side_efficiency)
from harness.session.results import AccuracyResult, CellResult, to_json
from harness.session.stored import measure_until_settled
from harness.store import environments
from harness.store.baselines import BaselineError, BaselineFile

__all__ = ["Suite", "SuiteError", "SuiteOptions", "CellResult", "AccuracyResult"]

ACCURACY_SETTINGS = AccuracySettings()


@dataclasses.dataclass(frozen=True)
class Reference:
    """The ``--against`` side: its environment, a launcher that gives its ranks its variables, and
    how it differs from the current environment."""
    environment: references.Environment
    launcher: Launcher
    difference: dict


@dataclasses.dataclass(frozen=True)
class Prepared:
    """What :meth:`Suite.prepare` checked and found before the first cell: fixed for the session."""
    system: str
    baselines: BaselineFile
    launcher: Launcher
    workload: Workload
    cores_per_rank: int | None
    """Cores each CPU rank owns in the session's own launches (a cell's, measured against its stored
    baseline, and an A/B's pairs back to back): the whole node's share."""
    limits: RunLimits
    packages: dict[str, str]
    provenance: dict
    environment: dict
    current_environment: references.Environment
    reference: Reference | None
    huge_pages: HugePages | None = None
    """The huge pages every launch's ranks get through the launch environment (``--huge-pages``)."""
    duet: duet.DuetPlan | None = None
    """The node's halves for ``--duet``."""
    duet_cores_per_rank: int | None = None
    """Cores each CPU rank owns in a duet's launches (``--duet``), each on half the node: those
    launches' only, for the stored baselines were measured with the whole node's share."""
    run_id: str = dataclasses.field(default_factory=lambda: uuid.uuid4().hex[:12])


@dataclasses.dataclass(frozen=True)
class ConfirmingAB:
    """An A/B that ``--confirm`` ran for a cell's stored-baseline verdict, kept for the session's
    false-discovery control: the confirmation stands on the A/B's call, so a call the control holds
    back is concluded again (:meth:`held`)."""
    result: CellResult
    paired: PairedResult
    conclude: Callable[[PairedResult], Confirmation]
    """The confirmation an A/B's pairs give, as :func:`harness.session.paired.confirmed_by` makes it."""

    def held(self) -> Confirmation:
        """The confirmation concluded again from the A/B's call held ``inconclusive`` by the control
        (its cause then ``unknown``, saying why); the A/B kept as it was, its ``false_discovery`` set."""
        control = self.paired.false_discovery
        reason = (f"the call does not stand among the {control['cells']} A/Bs of the session (Benjamini-Hochberg at "
                  f"{control['rate']:.0%}, repeated p {control['repeated_p']:.2g})")
        again = dataclasses.replace(self.paired, verdict=hold(self.paired.verdict, [reason]))
        return dataclasses.replace(self.conclude(again), paired=self.paired)


class Suite:
    def __init__(self, options: SuiteOptions):
        self.options = options
        self.results: list[CellResult] = []
        self.baseline_changes: list[str] | None = None
        self.baseline_error: str | None = None
        """Why ``--update-baselines`` could not write the file (e.g. another session held its lock)."""
        self.baselines_kept: list[str] = []
        """Cells ``--update-baselines`` did not record, each with why."""
        self.package_sets_written: list[Path] = []
        """The package sets ``--update-baselines`` wrote beside the baseline file, which its entries
        name: to be committed with it (harness.store.environments)."""
        self.accuracy_results: list[AccuracyResult] = []
        self.paired_results: list[PairedResult] = []
        """Cells measured as an A/B against the reference environment (``--against``)."""
        self.confirming: list[ConfirmingAB] = []
        """The A/Bs ``--confirm`` ran, each entering the session's false-discovery control."""
        self.cut_short: list[str] = []
        """Cells an interrupt ended before any launch of theirs was judged."""
        self.unmeasured_for_time: list[str] = []
        """Cells not started because they could not finish before the session's deadline
        (harness.session.deadline)."""
        self.prepared: Prepared | None = None
        """Set by :meth:`prepare`; None until it succeeded."""
        check_settings(options)
        self.matrix = preflight.matrix_of(options)
        try:
            self.launch_environment = references.with_shell_values(
                options.against, launch_environment(options.launch_env, options.launch_env_file, os.environ),
                os.environ)
            """The variables every rank of the session gets: the user's (``--launch-env``), and from
            :meth:`prepare` on the huge pages' ``GLIBC_TUNABLES`` (:attr:`Prepared.huge_pages`)."""
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

    def _workload(self, data_dir: Path | None, tfrecord_dir: Path | None) -> Workload:
        o = self.options
        return self.profile.workload.replace(image_size=o.image_size, batch_size=o.batch_size, steps=o.steps,
                                         warmup_steps=o.warmup_steps, num_workers=o.num_workers,
                                         ps_servers=o.ps_servers,
                                         data_dir=str(data_dir) if data_dir else None,
                                         tfrecord_dir=str(tfrecord_dir) if tfrecord_dir else None)

    def prepare(self) -> Prepared:
        """Check everything a cell needs, once, before the first cell starts."""
        if self.prepared:
            return self.prepared
        options = self.options
        preflight.check_duet(options, self.launcher_name)
        preflight.check_instructions(options, self.uses_gpus)
        if options.gpus:
            preflight.check_rank_counts(options, self.cells(), self.ps_servers, *self._rank_capacity)
        preflight.check_numerics(self.cells(), self.uses_gpus)
        processes = preflight.processes(self.cells(), self.ps_servers, self._rank_capacity[0])
        huge_pages = preflight.decide_huge_pages(options, processes, self.uses_gpus, self.launch_environment)
        launch_variables = huge_pages.over(self.launch_environment)
        preflight.check_writable_places(options)
        data_dir, tfrecord_dir = preflight.prepare_data(options, {cell.loader for cell in self.cells()},
                                                        self.profile.dataset)
        launcher = preflight.usable_launcher(self.launcher_name, launch_variables, options.partition)
        try:
            system = detect_system(options.system, options.partition)
        except ValueError as error:
            raise SuiteError(str(error)) from None
        baselines = BaselineFile.load(options.baselines_dir / f"{system}.json", system)
        preflight.check_baseline_cells(baselines)
        if options.history_dir is not None:
            preflight.check_history(options.history_dir / f"{system}.jsonl")
        packages = installed_packages()
        current_environment = references.current(launch_variables)
        duet_plan = self._duet_plan() if options.duet else None
        self.prepared = Prepared(
            system=system, baselines=baselines, launcher=launcher, workload=self._workload(data_dir, tfrecord_dir),
            cores_per_rank=preflight.cores_per_rank(options, processes, self.uses_gpus),
            limits=preflight.run_limits(options), packages=packages,
            provenance=provenance(HARNESS_SOURCE, packages, tracked=tracked_packages()),
            environment=capture_environment(), current_environment=current_environment,
            reference=self._reference(current_environment) if options.against else None, huge_pages=huge_pages,
            duet=duet_plan,
            duet_cores_per_rank=preflight.cores_per_rank(options, processes, self.uses_gpus, halves=True)
            if duet_plan else None)
        self.launch_environment = launch_variables
        return self.prepared

    def _duet_plan(self) -> duet.DuetPlan:
        try:
            return duet.plan(self.uses_gpus, self._rank_capacity[0] if self.uses_gpus else 0)
        except ValueError as error:
            raise SuiteError(f"--duet: {error}") from None

    def _reference(self, current: references.Environment) -> Reference:
        """The reference environment built, and a launcher that gives its ranks its variables."""
        try:
            environment = references.build(self.options.against, current)
        except references.ReferenceError as error:
            raise SuiteError(str(error)) from None
        return Reference(environment=environment, launcher=preflight.usable_launcher(
            self.launcher_name, dict(environment.launch_environment), self.options.partition, environment.unset),
            difference=references.difference(environment, current))

    # -- measuring -------------------------------------------------------------------------------
    def measure(self, cell: Cell, on_progress: Callable[[str], None] | None = None) -> CellResult:
        """Launch the cell until its throughput interval is narrow enough and its verdict is not
        inconclusive, or until its measuring budget is spent; judge the pooled samples
        (:func:`harness.session.stored.measure_until_settled`)."""
        ready = self.prepare()
        result = CellResult(cell=cell, runs=[], config_hash=config_hash(dataclasses.asdict(ready.workload), cell))
        launch = functools.partial(run_cell, cell, ready.workload, ready.launcher, workdir=self.options.workdir,
                                   limits=ready.limits, options=self._rank_options(), on_progress=on_progress)
        judge = functools.partial(evaluate, config=dataclasses.asdict(ready.workload), baselines=ready.baselines,
                                  reference_cell=preflight.reference_cell(cell, self.matrix.ranks, self.ps_servers),
                                  earlier=self.results, use_yardstick=self.options.yardstick)
        try:
            measure_until_settled(result, launch, judge, precision=self.options.precision,
                                  budget_s=self.options.measure_budget, on_progress=on_progress)
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
        ready = self.prepare()
        reason = preflight.cannot_start_in(ready.reference.environment, cell.framework)
        interrupt = None
        if reason:
            result = PairedResult(cell=cell, reference=ready.reference.environment, error=reason)
        else:
            current_runs: list[CellRun] = []
            result, interrupt = self._pairs(cell, ready.reference.environment, ready.reference.launcher, on_progress,
                                            current_runs=current_runs)
            if result.pairs and ready.baselines.entry(cell.id) and not result.duet:  # a duet's ran on half the node
                result.stored_baseline = self._stored_verdict(cell, current_runs)
        reference_cell = preflight.reference_cell(cell, self.matrix.ranks, self.ps_servers)
        for earlier in self.paired_results:
            if earlier.cell == reference_cell:
                result.efficiency = side_efficiency(
                    result, earlier, training_ranks(cell.framework, cell.ranks, self.ps_servers),
                    training_ranks(reference_cell.framework, reference_cell.ranks, self.ps_servers))
        self.paired_results.append(result)
        self._keep_results()
        if interrupt:
            raise interrupt
        return result

    def confirm(self, result: CellResult, on_progress: Callable[[str], None] | None = None) -> Confirmation:
        """Confirm a cell's stored-baseline verdict (a fail, inconclusive, machine-differs or stale
        one) by an A/B against the environment its baseline was recorded with, rebuilt, on this node
        now: ``software``, ``system`` only on positive evidence, else ``unknown`` naming why
        (harness.judging.confirmation)."""
        ready = self.prepare()
        hardware = (result.fingerprint or {}).get("hardware")
        band = ready.baselines.reference(result.cell.id, "throughput", hardware)
        interrupt = None
        entry = ready.baselines.entry(result.cell.id, hardware) or {}
        if band is None or result.throughput is None:
            confirmation = Confirmation(cause=UNKNOWN, message="unknown: the baseline has no throughput figure to "
                                                               "confirm a move of")
        elif moved := software_by_work(result.work_change, entry.get("config_hash") == result.config_hash):
            confirmation = Confirmation(cause=SOFTWARE, message=moved)
        else:
            stored = scaled(result.throughput, 1 / band.value)
            rebuild, reference = self._baseline_environment(result)
            if reference is None and rebuild.identical and rebuild.exact:  # the cell's own launches are the
                launches = max(1, len(result.runs) - result.contended_runs)  # baseline environment's, now
                split = Split.identical(stored, judged_now(stored, band, launches))
                confirmation = Confirmation.of(conclude(rebuild, split), rebuild)
            elif reference is None:
                confirmation = Confirmation.of(conclude(rebuild, Split.of(stored)), rebuild)
            else:
                paired, interrupt = self._pairs(result.cell, reference, self._launcher_of(reference), on_progress)
                confirmation = self.confirm_by(result, paired, functools.partial(
                    confirmed_by, rebuild=rebuild, stored=stored, band=band,
                    difference=references.describe_difference(references.difference(reference,
                                                                                     ready.current_environment))))
        result.confirmation = confirmation.to_json()
        self._keep_results()
        if interrupt:
            raise interrupt
        return confirmation

    def confirm_by(self, result: CellResult, paired: PairedResult,
                   conclude: Callable[[PairedResult], Confirmation]) -> Confirmation:
        """The confirmation ``paired`` (an A/B against the baseline's environment) gives ``result``'s
        verdict, the A/B kept for the session's false-discovery control
        (:meth:`control_false_discoveries`)."""
        self.confirming.append(ConfirmingAB(result=result, paired=paired, conclude=conclude))
        return conclude(paired)

    def _baseline_environment(self, result: CellResult) -> tuple[Rebuild, references.Environment | None]:
        """How the environment a cell's baseline entry was recorded with is rebuilt here, and the
        reference that rebuilds it; None where nothing differs from the current environment that can
        be rebuilt, or it cannot be built (the rebuild's ``missing`` says which part, and why)."""
        ready = self.prepare()
        entry = ready.baselines.entry(result.cell.id, (result.fingerprint or {}).get("hardware")) or {}
        recorded = entry.get("provenance") or {}
        runtime = FRAMEWORKS.entry(result.cell.framework).runtime
        package_set = recorded.get("rank_environment") or (recorded.get("environment") if runtime == "torch" else None)
        then = Setting(commit=recorded.get("git_commit"), code=recorded.get("code"), runtime=runtime,
                       packages=environments.load(self.options.baselines_dir, package_set) if package_set else None,
                       stack=entry["fingerprint"].get("stack") if entry.get("fingerprint") else None,
                       launch_environment=recorded.get("launch_environment"), launcher=recorded.get("launcher"),
                       layout=entry["fingerprint"].get("hardware") if entry.get("fingerprint") else None)
        now = Setting(commit=ready.current_environment.commit, committed=not references.uncommitted_changes(),
                      code=ready.provenance.get("code"), runtime=runtime,
                      packages=ready.packages if runtime == "torch" else packages_of(interpreter(runtime)),
                      stack=(result.fingerprint or {}).get("stack"),
                      launch_environment=rank_settings(os.environ, self.launch_environment),
                      launcher=result.run.launcher, layout=(result.fingerprint or {}).get("hardware"))
        workload = config_change(entry, Evidence(cell_id=result.cell.id, config_hash=result.config_hash,
                                                 config=dataclasses.asdict(ready.workload),
                                                 throughput=result.throughput))
        rebuild = plan_rebuild(then, now, project=references.project_distributions(), workload_change=workload)
        if rebuild.commit is None or rebuild.identical:
            return rebuild, None
        try:
            reference = references.build([f"git:{rebuild.commit}", *rebuild.parts], ready.current_environment)
        except references.ReferenceError as error:
            return rebuild.with_missing(f"build: {error}"), None
        if reason := preflight.cannot_start_in(reference, result.cell.framework):
            return rebuild.with_missing(f"packages: {reason}"), None
        return rebuild.with_missing(rebuilt_code_missing(then, code_hash(reference.source / "harness"))), reference

    def _launcher_of(self, reference: references.Environment) -> Launcher:
        """The session's launcher where the reference's ranks get the current launch environment,
        else one that gives them the reference's."""
        ready = self.prepare()
        if reference.launch_environment == ready.current_environment.launch_environment and not reference.unset:
            return ready.launcher
        return preflight.usable_launcher(self.launcher_name, dict(reference.launch_environment),
                                         self.options.partition, reference.unset)

    def _stored_verdict(self, cell: Cell, runs: list[CellRun]) -> dict:
        """The stored-baseline verdict of ``runs`` (an A/B's current side), pooled as :meth:`measure`
        pools a cell's launches; without the yardstick, which pairs do not run."""
        ready = self.prepare()
        judged = CellResult(cell=cell, runs=[run for run in runs if run.ok],
                            config_hash=config_hash(dataclasses.asdict(ready.workload), cell))
        evaluate(judged, config=dataclasses.asdict(ready.workload), baselines=ready.baselines,
                 reference_cell=preflight.reference_cell(cell, self.matrix.ranks, self.ps_servers), earlier=[],
                 use_yardstick=False)
        return {"verdict": judged.verdict, "throughput": to_json(judged.throughput), "launches": len(judged.runs),
                "contended_left_out": judged.contended_runs,
                "reasons": [f"{v.kind}: {v.message}" for v in judged.verdicts
                            if v.kind not in (VerdictKind.PASS, VerdictKind.NO_BASELINE)]}

    def _pairs(self, cell: Cell, reference: references.Environment, reference_launcher: Launcher,
               on_progress: Callable[[str], None] | None, current_runs: list[CellRun] | None = None
               ) -> tuple[PairedResult, PairsInterrupted | None]:
        """The A/B's pairs, and the interrupt that ended them if one did: the caller keeps the
        pairs, then raises it again."""
        ready = self.prepare()
        sides = {"reference": (reference_launcher, reference), "current": (ready.launcher, ready.current_environment)}

        def launch(side: str) -> CellRun:
            launcher, environment = sides[side]
            run = self.launch_in(cell, environment, side, launcher=launcher, on_progress=on_progress)
            if side == "current" and current_runs is not None:
                current_runs.append(run)
            return run

        o = self.options
        settings = self.pair_settings
        if reason := preflight.worker_cannot_pair(reference, self._pair_rank_options()):
            return PairedResult(cell=cell, reference=reference, duet=o.duet, error=reason), None
        together = None
        if o.duet:
            if reason := self._cannot_duet(cell, reference):
                return PairedResult(cell=cell, reference=reference, duet=True, error=reason), None
            together = self._duet_launches(cell, sides, on_progress, current_runs)
        instructions = None
        if o.count_instructions:
            try:
                instructions = self._count_instructions(cell, sides, on_progress)
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

    @functools.cached_property
    def pair_settings(self) -> PairSettings:
        """How the session's A/Bs measure and judge their pairs."""
        o = self.options
        tunables = self.prepare().baselines.tunables
        return PairSettings(first=o.pairs, most=o.max_pairs, budget_s=o.pairs_budget, rule=o.spending,
                            min_effect=o.min_effect or tunables.min_effect, notable=tunables.notable_wait)

    def change_surely_stands(self, result: PairedResult, cells: int) -> bool:
        """Whether the A/B's verdict stands under the false-discovery control whatever the session's
        other ``cells`` - 1 A/Bs find (:func:`harness.judging.paired.surely_stands`): a call whose
        repeated p-value is within Bonferroni's share, or a verdict that claims nothing."""
        if not result.ok or result.verdict.kind not in CALLS:
            return True
        return surely_stands(result.change_p, cells, self.pair_settings.alpha)

    def control_false_discoveries(self, cells: int) -> list[PairedResult]:
        """The false-discovery control (:func:`harness.judging.paired.calls_that_stand`) over the
        session's A/Bs: the ``--against`` ones among ``cells`` compared (at least those measured),
        and those ``--confirm`` ran, each a cell compared. Sets each judged A/B's
        ``false_discovery``; a confirmation whose A/B's call does not stand is concluded again from
        it held ``inconclusive`` (:meth:`ConfirmingAB.held`). Returns the A/Bs whose call does not
        stand."""
        results = self.paired_results + [confirming.paired for confirming in self.confirming]
        compared = (max(cells, len(self.paired_results)) if self.paired_results else 0) + len(self.confirming)
        if compared < 2:
            return []
        alpha = self.pair_settings.alpha
        stands = calls_that_stand([(result.verdict.kind if result.ok else ERROR, result.change_p)
                                   for result in results], compared, alpha)
        held = []
        for result, stand in zip(results, stands):
            if result.verdict is None:
                continue
            result.false_discovery = {"procedure": "Benjamini-Hochberg", "rate": alpha, "cells": compared,
                                      "repeated_p": result.change_p, "stands": stand}
            if not stand:
                held.append(result)
        for confirming in self.confirming:  # each kept again: its A/B's ``false_discovery`` is set now
            is_held = any(confirming.paired is result for result in held)
            confirmation = confirming.held() if is_held else confirming.conclude(confirming.paired)
            confirming.result.confirmation = confirmation.to_json()
        self._keep_results()
        return held

    def _cannot_duet(self, cell: Cell, reference: references.Environment) -> str | None:
        """Why ``cell`` cannot be measured in duet pairs against ``reference``, or None."""
        ready = self.prepare()
        lacking = duet.worker_lacks(worker_options(reference.source))
        if lacking:
            return (f"the {reference.label}'s harness predates duet launches (its ranks do not know "
                    f"{', '.join(lacking)}): measure it without --duet")
        return duet.does_not_fit(ready.duet, cell, cell.ranks, ready.duet_cores_per_rank)

    def _duet_launches(self, cell: Cell, sides: dict, on_progress: Callable[[str], None] | None,
                       current_runs: list[CellRun] | None) -> TogetherFn:
        """A duet pair's launches: both sides at once, each on the half of the node it is given with
        the half's cores per rank, their first ranks meeting at a gate of their own before the timed
        windows."""
        ready = self.prepare()

        def together(halves: Mapping[str, int]) -> dict[str, CellRun]:
            self.options.workdir.mkdir(parents=True, exist_ok=True)
            gate = Path(tempfile.mkdtemp(prefix="duet-gate-", dir=self.options.workdir))
            try:
                launches = [Together(cell=cell, workload=ready.workload, workdir=self.options.workdir / side,
                                     launcher=sides[side][0].with_variables(ready.duet.environment(half)),
                                     options=dataclasses.replace(self._pair_rank_options(),
                                                                 cores_per_rank=ready.duet_cores_per_rank or None,
                                                                 core_set=ready.duet.core_set(half),
                                                                 window_gate=str(gate)),
                                     source=sides[side][1].source, python=sides[side][1].python,
                                     on_progress=on_progress)
                            for side, half in halves.items()]
                runs = dict(zip(halves, run_cells_together(launches, ready.limits)))
            finally:
                shutil.rmtree(gate, ignore_errors=True)
            if current_runs is not None:
                current_runs.append(runs["current"])
            return runs
        return together

    def launch_in(self, cell: Cell, environment: references.Environment, place: str, *,
                  launcher: Launcher | None = None, on_progress: Callable[[str], None] | None = None,
                  options: RankOptions | None = None, workload: Workload | None = None,
                  limits: RunLimits | None = None) -> CellRun:
        """One launch of ``cell`` in ``environment`` (an A/B's side, a bisect's point), its files under
        the workdir's ``place``, with the pairs' rank options (:meth:`_pair_rank_options`), the
        session's workload and limits unless given others."""
        ready = self.prepare()
        return run_cell(cell, workload or ready.workload, launcher or ready.launcher,
                        workdir=self.options.workdir / place, limits=limits or ready.limits,
                        options=options or self._pair_rank_options(),
                        on_progress=on_progress, source=environment.source, python=environment.python)

    def launch_counting_instructions(self, cell: Cell, environment: references.Environment, place: str, *,
                                     launcher: Launcher | None = None,
                                     on_progress: Callable[[str], None] | None = None) -> CellRun:
        """One launch of ``cell`` in ``environment`` with its ranks under callgrind, counting the host
        instructions of steps after a one-step window (harness.session.instructions)."""
        ready = self.prepare()
        return self.launch_in(cell, environment, place, launcher=launcher, on_progress=on_progress,
                              options=self.instruction_rank_options(), workload=instruction_workload(ready.workload),
                              limits=instruction_limits(ready.limits))

    def instruction_rank_options(self) -> RankOptions:
        return dataclasses.replace(self._pair_rank_options(), count_instructions=True, count_work=False)

    def _count_instructions(self, cell: Cell, sides: Mapping[str, tuple[Launcher, references.Environment]],
                            on_progress: Callable[[str], None] | None) -> dict:
        """The A/B's host instructions: one launch a side under callgrind (harness.session.instructions)."""
        def launch(side: str) -> CellRun:
            launcher, environment = sides[side]
            return self.launch_counting_instructions(cell, environment, f"{side}-instructions", launcher=launcher,
                                                     on_progress=on_progress)

        def refused(side: str) -> str | None:
            return (preflight.worker_cannot_pair(sides[side][1], self.instruction_rank_options())
                    if side == "reference" else None)

        return count_instructions(launch, refused, getattr(on_progress, "always", on_progress), cell.id)

    def _pair_rank_options(self) -> RankOptions:
        """How an A/B's or a bisect's launches run: without the yardstick (the ratios of launches side
        by side cancel the node's speed, which it would time) and without the compute probe (its
        figure reads neither)."""
        return dataclasses.replace(self._rank_options(), yardstick=False, compute_probe=False)

    def _rank_options(self) -> RankOptions:
        ready = self.prepare()
        return RankOptions(device=self.options.device, cores_per_rank=ready.cores_per_rank or None,
                           count_work=self.options.count_work,
                           fault=Fault(**self.options.fault) if self.options.fault else None)

    def _record(self, result: CellResult) -> None:
        """Keep a cell with at least one launch: in the results, the history and the results file.
        An interrupt during a further launch keeps the launches already judged."""
        if not result.runs or (result.run.ok and result.metrics is None):
            return  # nothing launched, or judging it failed
        self.results.append(result)
        self._keep(result)

    def _keep(self, result: CellResult | AccuracyResult) -> None:
        """A result just added to the session's: its history line, and the results file again."""
        self.history.keep(result)
        self._keep_results()

    def leave_unmeasured_for_time(self, cell_id: str) -> None:
        """A cell not started for want of time: named in the results file."""
        self.unmeasured_for_time.append(cell_id)
        self._keep_results()

    def _keep_results(self) -> None:
        if self.options.results_json:
            self.write_results(self.options.results_json)

    @functools.cached_property
    def history(self) -> SessionHistory:
        """The session's part that writes its history lines."""
        ready = self.prepare()
        path = self.options.history_dir / f"{ready.system}.jsonl" if self.options.history_dir is not None else None
        return SessionHistory(path, night_of(ready.run_id, ready.provenance["git_commit"],
                                             results_json=self.options.results_json, report=self.options.report,
                                             environ=os.environ), PackageSets(packages_of))

    def history_rows(self) -> list[dict]:
        """The system's history lines, this session's included; none where it keeps no history."""
        return self.history.rows() if self.prepared is not None else []

    def measure_accuracy(self, cell: AccuracyCell,
                         on_progress: Callable[[str], None] | None = None) -> "AccuracyResult":
        """Train the accuracy task once under the cell's framework; judge its final accuracy."""
        ready = self.prepare()
        run = run_cell(cell, None, ready.launcher, workdir=self.options.workdir, limits=ready.limits,
                       options=RankOptions(device=self.options.device,
                                           accuracy=dataclasses.asdict(ACCURACY_SETTINGS)),
                       on_progress=on_progress)
        result = AccuracyResult(cell=cell, run=run, config_hash=ACCURACY_SETTINGS.config_hash(cell))
        if run.ok:
            result.outcome = min(run.records, key=lambda r: r["rank"])
            result.verdict = judge_accuracy(result.outcome["final_val_accuracy"], ready.baselines.entry(cell.id),
                                            ready.baselines.reference(cell.id, "accuracy"),
                                            config_hash=result.config_hash)
        self.accuracy_results.append(result)
        self._keep(result)
        return result

    # -- after the cells -------------------------------------------------------------------------
    def results_document(self) -> dict:
        """The session's results file: what it measured, and where it ran (unknown before :meth:`prepare`)."""
        ready = self.prepared
        reference = ready and ready.reference
        return {
            "system": ready and ready.system, "launcher": self.launcher_name, "run_id": ready and ready.run_id,
            "cores_per_rank": ready and ready.cores_per_rank,
            "huge_pages": ready.huge_pages.to_json() if ready and ready.huge_pages else None,
            "workload": dataclasses.asdict(ready.workload) if ready else None,
            "tunables": dataclasses.asdict(ready.baselines.tunables) if ready else None,
            "provenance": ready and ready.provenance, "environment": ready and ready.environment,
            "launch_environment": self.launch_environment,
            "cells": [result.to_json() for result in self.results],
            "accuracy_cells": [result.to_json() for result in self.accuracy_results],
            "against": {"reference": reference.environment.to_json(), "current": ready.current_environment.to_json(),
                        "difference": reference.difference} if reference else None,
            "paired_cells": [result.to_json() for result in self.paired_results],
            "unmeasured_for_time": self.unmeasured_for_time,
        }

    def write_results(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, self.results_document())

    def update_baselines(self) -> list[str]:
        """Write the completed cells into the baseline file. A cell measured several times
        (``--cell-repeats``) is stored as the mean of its repeats with a band derived from their spread
        (:mod:`harness.judging.recording`). Each entry carries what rebuilds its environment for
        ``--confirm``: the launch environment, and the package sets of torch's environment and of the
        one its ranks ran in, kept beside the file (those newly written: :attr:`package_sets_written`)."""
        ready = self.prepare()
        recorded = {**ready.provenance, "launch_environment": rank_settings(os.environ, self.launch_environment)}
        ran_in = {result.cell.id: packages_of(result.run.records[0]["python"]) for result in self.results
                  if result.ok and result.run.records and result.run.records[0].get("python")}
        entries, kept = baseline_entries(self.results, config=dataclasses.asdict(ready.workload),
                                         provenance=recorded, band_floor=self.options.band_floor,
                                         accept_regressions=self.options.accept_regressions,
                                         widest=self.options.widest_baseline, use_yardstick=self.options.yardstick,
                                         rank_environments={cell: environment_id(packages)
                                                            for cell, packages in ran_in.items() if packages})
        self.baselines_kept.extend(kept)
        entries += [accuracy_entry(result, config=dataclasses.asdict(ACCURACY_SETTINGS), provenance=recorded)
                    for result in self.accuracy_results if result.outcome]
        if not entries:
            return []
        written = []
        try:  # before the baselines that name them
            for packages in [ready.packages, *(packages for packages in ran_in.values() if packages)]:
                if not environments.path_of(self.options.baselines_dir, environment_id(packages)).is_file():
                    written.append(environments.keep(self.options.baselines_dir, packages))
        except OSError as error:
            raise BaselineError(f"cannot keep the environment's package set: {error.strerror}: {error.filename}") from None
        changes = ready.baselines.update(entries)
        hardware = {result.cell.id: (result.fingerprint or {}).get("hardware") for result in self.results}
        verdicts = {result.cell.id: result.verdict for result in self.results}
        verdicts.update((result.cell.id, result.verdict_kind) for result in self.accuracy_results)
        cells = [entry["cell"] for entry in entries]
        self.history.accept(cells, accepted_regressions=self.options.accept_regressions, verdicts=verdicts,
                            bands={cell: band_of(ready.baselines.reference(cell, "throughput", hardware.get(cell)))
                                   for cell in cells}, environ=os.environ)
        self.package_sets_written.extend(environments.path_of(self.options.baselines_dir, identity)
                                         for identity in dict.fromkeys(written))
        return changes
