"""Preparing a session: the matrix's queries (its cells, which of them this node can run) and the
checks and findings before the first cell (:meth:`Preparation.prepare`: the launcher, the data, the
baselines, huge pages, the reference environment of ``--against``, the duet's halves), fixed for the
session (:class:`Prepared`). Every other part of the session reads what it found."""
from __future__ import annotations

import dataclasses
import functools
import os
import uuid
from pathlib import Path

from harness import HARNESS_SOURCE
from harness.config.cells import PROFILES, AccuracyCell, Profile, accuracy_cells
from harness.config.options import SuiteError, SuiteOptions, check_settings
from harness.launch.launchers import LAUNCHERS, Launcher, default_launcher_name
from harness.launch.runner import RunLimits
from harness.machine import references
from harness.machine.allocation import launch_environment
from harness.machine.environment import capture as capture_environment
from harness.machine.huge_pages import HugePages
from harness.machine.provenance import installed_packages, provenance
from harness.machine.system import detect_system, rank_capacity
from harness.rank.cell import Cell
from harness.rank.packages import tracked_packages
from harness.rank.workload import Workload
from harness.session import duet, preflight
from harness.session.rounds import PairSettings
from harness.store.baselines import BaselineFile


@dataclasses.dataclass(frozen=True)
class Reference:
    """The ``--against`` side: its environment, a launcher that gives its ranks its variables, and
    how it differs from the current environment."""
    environment: references.Environment
    launcher: Launcher
    difference: dict


@dataclasses.dataclass(frozen=True)
class Prepared:
    """What :meth:`Preparation.prepare` checked and found before the first cell: fixed for the session."""
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



class Preparation:
    """The session's settings, its matrix, the variables its ranks get, and what :meth:`prepare`
    found (:attr:`prepared`)."""

    def __init__(self, options: SuiteOptions):
        self.options = options
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

    def reference_cell(self, cell: Cell) -> Cell:
        """The cell whose throughput ``cell``'s E_G is relative to."""
        return preflight.reference_cell(cell, self.matrix.ranks, self.ps_servers)

    @functools.cached_property
    def pair_settings(self) -> PairSettings:
        """How the session's A/Bs measure and judge their pairs."""
        o = self.options
        tunables = self.prepare().baselines.tunables
        return PairSettings(first=o.pairs, most=o.max_pairs, budget_s=o.pairs_budget, rule=o.spending,
                            min_effect=o.min_effect or tunables.min_effect, notable=tunables.notable_wait)
