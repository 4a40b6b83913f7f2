"""A bisect's points and their launches: each point's environment built once, every launch charged
to the bisect's budget and counted in its state. The bisect takes the launching part of a session
(:class:`Launching`: :class:`harness.session.launching.Launching` is one), not the session."""
from __future__ import annotations

import random
import re
import time
from pathlib import Path
from typing import Callable, Protocol

from harness.launch.runner import CellRun
from harness.machine import references
from harness.rank.cell import Cell
from harness.tasks.bisect_points import Point
from harness.tasks.bisect_settings import BudgetSpent, Settings
from harness.tasks.bisect_state import BisectState, StateFile


class Launching(Protocol):
    """What a bisect launches through: the current environment its points are built over, one launch
    of a cell in an environment, and one with its ranks under callgrind."""

    def prepare(self): ...

    def launch_in(self, cell: Cell, environment: references.Environment, place: str) -> CellRun: ...

    def launch_counting_instructions(self, cell: Cell, environment: references.Environment,
                                     place: str) -> CellRun: ...


class BisectRun:
    """What every part of one bisect shares: its cell and points, its settings, its state and the
    file it is written to, its budget, the launches of its points, and where it says what it does."""

    def __init__(self, launching: Launching, cell: Cell, repo: Path, points: list[Point], settings: Settings,
                 state: BisectState, state_file: StateFile, *, seed: int | None, say: Callable[[str], None]):
        self.launching, self.cell, self.repo, self.points, self.settings = launching, cell, repo, points, settings
        self.state, self.state_file, self.say = state, state_file, say
        self.keys = [point.key for point in points]
        self.last = len(points) - 1
        self.rng = random.Random(seed)
        self.environments: dict[int, references.Environment] = {}
        self.started = time.monotonic()
        self._spent_before = state.spent_s

    def label(self, index: int) -> str:
        return self.points[index].label

    def save(self) -> None:
        self.state.spent_s = round(self.spent_s(), 1)
        self.state_file.save(self.state)

    def spent_s(self) -> float:
        return self._spent_before + time.monotonic() - self.started

    def charge(self, launches: int) -> None:
        """Stop before ``launches`` more would pass the budget."""
        spent_s = self.spent_s()
        if self.state.launches + launches > self.settings.max_launches or spent_s > self.settings.max_seconds:
            raise BudgetSpent(f"the budget is spent ({self.state.launches} launches of "
                              f"{self.settings.max_launches}, {spent_s:.0f} s of {self.settings.max_seconds:.0f})")

    def environment(self, index: int) -> references.Environment:
        if index not in self.environments:
            current = self.launching.prepare().current_environment
            self.environments[index] = references.build(self.points[index].parts, current, repo=self.repo)
        return self.environments[index]

    def launch(self, index: int, *, charge: bool = True, under_callgrind: bool = False) -> CellRun:
        """One launch of the point (``under_callgrind``: its ranks counting their host instructions);
        ``charge=False`` where the round or pair it belongs to was charged."""
        if charge:
            self.charge(1)
        place = ("bisect-instructions-" if under_callgrind else "bisect-") + re.sub(r"[^\w.=-]", "_",
                                                                                   self.keys[index][:40])
        launch_in = self.launching.launch_counting_instructions if under_callgrind else self.launching.launch_in
        run = launch_in(self.cell, self.environment(index), place)
        self.state.launches += 1
        return run
