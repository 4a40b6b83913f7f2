"""Launching for the session: one launch of a cell in an environment with the session's rank
options (a stored-path launch, an A/B's side, a bisect's point), under callgrind, a duet's two
halves at once, and the launcher that gives a reference its variables. The stored path, the A/Bs,
``--confirm`` and the bisect launch through this part and nothing else."""
from __future__ import annotations

import dataclasses
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Mapping

from harness.launch.launchers import Launcher
from harness.launch.runner import CellRun, RunLimits, Together, run_cell, run_cells_together, worker_options
from harness.machine import references
from harness.rank.cell import Cell
from harness.rank.faults import Fault
from harness.rank.spec import RankOptions
from harness.rank.workload import Workload
from harness.session import duet, preflight
from harness.session.instructions import count_instructions, instruction_limits, instruction_workload
from harness.session.paired import TogetherFn
from harness.session.preparation import Preparation, Prepared

Progress = Callable[[str], None] | None
Sides = Mapping[str, tuple[Launcher, references.Environment]]
"""An A/B's sides by name: the launcher and environment each is launched with."""


class Launching:
    """How the session's launches are made, from what its preparation found."""

    def __init__(self, preparation: Preparation):
        self.preparation = preparation
        self.options = preparation.options

    def prepare(self) -> Prepared:
        """What the session's preparation found: the launcher, workload and limits the launches use,
        and the current environment a reference or a bisect's point is built over."""
        return self.preparation.prepare()

    def launch_cell(self, cell: Cell, on_progress: Progress = None) -> CellRun:
        """One launch of ``cell`` as the stored path measures it: the whole node's rank options."""
        ready = self.preparation.prepare()
        return run_cell(cell, ready.workload, ready.launcher, workdir=self.options.workdir, limits=ready.limits,
                        options=self.rank_options(), on_progress=on_progress)

    def launch_accuracy(self, cell, accuracy: dict, on_progress: Progress = None) -> CellRun:
        """The one launch of an accuracy cell, training its task with the ``accuracy`` settings."""
        ready = self.preparation.prepare()
        return run_cell(cell, None, ready.launcher, workdir=self.options.workdir, limits=ready.limits,
                        options=RankOptions(device=self.options.device, accuracy=accuracy), on_progress=on_progress)

    def launcher_of(self, reference: references.Environment) -> Launcher:
        """The session's launcher where the reference's ranks get the current launch environment,
        else one that gives them the reference's."""
        ready = self.preparation.prepare()
        if reference.launch_environment == ready.current_environment.launch_environment and not reference.unset:
            return ready.launcher
        return preflight.usable_launcher(self.preparation.launcher_name, dict(reference.launch_environment),
                                         self.options.partition, reference.unset)

    def cannot_duet(self, cell: Cell, reference: references.Environment) -> str | None:
        """Why ``cell`` cannot be measured in duet pairs against ``reference``, or None."""
        ready = self.preparation.prepare()
        lacking = duet.worker_lacks(worker_options(reference.source))
        if lacking:
            return (f"the {reference.label}'s harness predates duet launches (its ranks do not know "
                    f"{', '.join(lacking)}): measure it without --duet")
        return duet.does_not_fit(ready.duet, cell, cell.ranks, ready.duet_cores_per_rank)

    def duet_launches(self, cell: Cell, sides: Sides, on_progress: Progress,
                      current_runs: list[CellRun] | None) -> TogetherFn:
        """A duet pair's launches: both sides at once, each on the half of the node it is given with
        the half's cores per rank, their first ranks meeting at a gate of their own before the timed
        windows."""
        ready = self.preparation.prepare()

        def together(halves: Mapping[str, int]) -> dict[str, CellRun]:
            self.options.workdir.mkdir(parents=True, exist_ok=True)
            gate = Path(tempfile.mkdtemp(prefix="duet-gate-", dir=self.options.workdir))
            try:
                launches = [Together(cell=cell, workload=ready.workload, workdir=self.options.workdir / side,
                                     launcher=sides[side][0].with_variables(ready.duet.environment(half)),
                                     options=dataclasses.replace(self.pair_rank_options(),
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
                  launcher: Launcher | None = None, on_progress: Progress = None,
                  options: RankOptions | None = None, workload: Workload | None = None,
                  limits: RunLimits | None = None) -> CellRun:
        """One launch of ``cell`` in ``environment`` (an A/B's side, a bisect's point), its files under
        the workdir's ``place``, with the pairs' rank options (:meth:`pair_rank_options`), the
        session's workload and limits unless given others."""
        ready = self.preparation.prepare()
        return run_cell(cell, workload or ready.workload, launcher or ready.launcher,
                        workdir=self.options.workdir / place, limits=limits or ready.limits,
                        options=options or self.pair_rank_options(),
                        on_progress=on_progress, source=environment.source, python=environment.python)

    def launch_counting_instructions(self, cell: Cell, environment: references.Environment, place: str, *,
                                     launcher: Launcher | None = None, on_progress: Progress = None) -> CellRun:
        """One launch of ``cell`` in ``environment`` with its ranks under callgrind, counting the host
        instructions of steps after a one-step window (harness.session.instructions)."""
        ready = self.preparation.prepare()
        return self.launch_in(cell, environment, place, launcher=launcher, on_progress=on_progress,
                              options=self.instruction_rank_options(), workload=instruction_workload(ready.workload),
                              limits=instruction_limits(ready.limits))

    def instruction_rank_options(self) -> RankOptions:
        return dataclasses.replace(self.pair_rank_options(), count_instructions=True, count_work=False)

    def instructions_of(self, cell: Cell, sides: Sides, on_progress: Progress) -> dict:
        """The A/B's host instructions: one launch a side under callgrind (harness.session.instructions)."""
        def launch(side: str) -> CellRun:
            launcher, environment = sides[side]
            return self.launch_counting_instructions(cell, environment, f"{side}-instructions", launcher=launcher,
                                                     on_progress=on_progress)

        def refused(side: str) -> str | None:
            return (preflight.worker_cannot_pair(sides[side][1], self.instruction_rank_options())
                    if side == "reference" else None)

        return count_instructions(launch, refused, getattr(on_progress, "always", on_progress), cell.id)

    def pair_rank_options(self) -> RankOptions:
        """How an A/B's or a bisect's launches run: without the yardstick (the ratios of launches side
        by side cancel the node's speed, which it would time) and without the compute probe (its
        figure reads neither)."""
        return dataclasses.replace(self.rank_options(), yardstick=False, compute_probe=False)

    def rank_options(self) -> RankOptions:
        ready = self.preparation.prepare()
        return RankOptions(device=self.options.device, cores_per_rank=ready.cores_per_rank or None,
                           count_work=self.options.count_work,
                           fault=Fault(**self.options.fault) if self.options.fault else None)
