"""What launching a cell until it is settled costs an unchanged cell: its false-fail rate, simulated
through the stored path's own code.

Each simulated session records a baseline as ``--update-baselines --cell-repeats N`` does (N launches,
each judged, :func:`harness.judging.recording.baseline_entries`, written by
:class:`harness.store.baselines.BaselineFile`), then measures the unchanged cell as the nightly does:
:func:`harness.session.stored.measure_until_settled` with the session's own judge
(:func:`harness.session.evaluation.evaluate`), launching again while the verdict is inconclusive
until the budget would pass. A launch's speed varies from launch to launch (normal, ``cv``), its
steps within it (normal, 2%); each launch takes ``launch_s`` of a simulated clock. The band is a 99%
prediction interval of one more launch: an unchanged cell measured once falls below it at most
0.5% of the time, the rate the path states (docs/verdicts.md "Launched until settled").

The plain run simulates 400 sessions a setting; ``DLSCALE_STORED_SESSIONS`` asks for more.
Run: ``pytest -m full -s bench_tests/benchmarks/test_stored_false_fails.py``."""
from __future__ import annotations

import dataclasses
import functools
import os
from pathlib import Path

import numpy as np
import pytest

from harness.config.cells import config_hash
from harness.config.options import SuiteOptions
from harness.judging.kinds import VerdictKind
from harness.judging.recording import baseline_entries
from harness.launch.runner import CellRun
from harness.rank.cell import Cell
from harness.rank.workload import Workload
from harness.session.evaluation import evaluate
from harness.session.results import CellResult
from harness.session.stored import measure_until_settled
from harness.store.baselines import BaselineFile

pytestmark = pytest.mark.full

CELL = Cell(framework="ddp", loader="synthetic", model="resnet50", ranks=1)
WORKLOAD = dataclasses.asdict(Workload())
STEPS, BATCH, STEP_CV = 40, 32, 0.02
STATED = 0.005
"""The one-launch false-fail rate the band states: below a 99% two-sided prediction interval."""


class Simulated:
    """Launches of an unchanged cell on a simulated clock."""

    def __init__(self, rng: np.random.Generator, *, cv: float, launch_s: float, images_per_s: float = 100.0):
        self.rng, self.cv, self.launch_s, self.images_per_s = rng, cv, launch_s, images_per_s
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def launch(self) -> CellRun:
        self.now += self.launch_s
        speed = self.images_per_s * max(0.2, 1 + self.cv * self.rng.standard_normal())
        steps = BATCH / speed * np.maximum(0.2, 1 + STEP_CV * self.rng.standard_normal(STEPS))
        record = {"rank": 0, "step_times": steps.tolist(), "images": BATCH * STEPS, "window_s": float(steps.sum()),
                  "losses": [1.0] * STEPS, "data_wait": [0.0] * STEPS, "host": "simulated", "device": "cpu"}
        return CellRun(cell=CELL, launcher="torchrun", command=[], status="ok", records=[record], error=None,
                       wall_s=self.launch_s, log_path=Path("log"), token="t", orphans_killed=[])


def judge_with(baselines: BaselineFile):
    return functools.partial(evaluate, config=WORKLOAD, baselines=baselines, reference_cell=CELL, earlier=[],
                             use_yardstick=False)


def new_result() -> CellResult:
    return CellResult(cell=CELL, runs=[], config_hash=config_hash(WORKLOAD, CELL))


def recorded(simulated: Simulated, repeats: int, path: Path, band_floor: float) -> BaselineFile:
    """A baseline recorded from ``repeats`` launches, as ``--update-baselines --cell-repeats`` records it."""
    empty = BaselineFile.load(path, "simulated")
    results = []
    for _ in range(repeats):
        result = new_result()
        result.runs.append(simulated.launch())
        judge_with(empty)(result)
        results.append(result)
    entries, kept = baseline_entries(results, config=WORKLOAD, provenance={}, band_floor=band_floor,
                                     accept_regressions=True, widest=1.0, use_yardstick=False)
    assert entries and not kept, kept
    empty.update(entries)
    return BaselineFile.load(path, "simulated")


def session(seed: int, *, cv: float, repeats: int, launch_s: float, budget_s: float, band_floor: float,
            path: Path) -> tuple[CellResult, CellResult]:
    """One session's unchanged cell launched until settled, and its first launch judged alone."""
    simulated = Simulated(np.random.default_rng(seed), cv=cv, launch_s=launch_s)
    judge = judge_with(recorded(simulated, repeats, path, band_floor))
    settled = measure_until_settled(new_result(), simulated.launch, judge, precision=0.02, budget_s=budget_s,
                                    clock=simulated.clock)
    first = new_result()
    first.runs.append(settled.runs[0])
    judge(first)
    return settled, first


def false_fail_rate(sessions: int, tmp_path: Path, **setting) -> tuple[float, float, float]:
    """The share of sessions whose unchanged cell ended ``fail``, the share its first launch alone
    failed, and the mean launches a session took."""
    fails = first_fails = launches = 0
    for seed in range(sessions):
        path = tmp_path / f"baseline-{seed}.json"
        settled, first = session(seed, path=path, **setting)
        path.unlink()
        fails += settled.verdict == VerdictKind.FAIL
        first_fails += first.verdict == VerdictKind.FAIL
        launches += len(settled.runs)
    return fails / sessions, first_fails / sessions, launches / sessions


DEFAULTS = {option.name: option.default for option in dataclasses.fields(SuiteOptions)}
BUDGET_S = DEFAULTS["measure_budget"]
SETTINGS = [dict(cv=0.04, repeats=3, launch_s=20.0, budget_s=BUDGET_S, band_floor=0.0),
            dict(cv=0.04, repeats=5, launch_s=10.0, budget_s=BUDGET_S, band_floor=0.0),
            dict(cv=0.04, repeats=5, launch_s=10.0, budget_s=BUDGET_S, band_floor=DEFAULTS["band_floor"])]
"""Bands without a floor (the prediction interval itself, where the optional stopping shows most)
and with the session's default floor; launches as long as a CPU cell's here or half of it."""


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: f"repeat{s['repeats']}-launch{s['launch_s']:.0f}s"
                                                             f"-floor{s['band_floor']:.0%}")
def test_an_unchanged_cell_launched_until_settled_fails_at_most_the_stated_rate(setting, tmp_path):
    sessions = int(os.environ.get("DLSCALE_STORED_SESSIONS", "400"))
    rate, first_rate, launches = false_fail_rate(sessions, tmp_path, **setting)
    bound = STATED + 3 * (STATED * (1 - STATED) / sessions) ** 0.5
    print(f"\n{setting}: {sessions} sessions, false fails {rate:.2%} (stated {STATED:.1%}, "
          f"bound {bound:.2%}); the first launch alone {first_rate:.2%}; {launches:.2f} launches a session")
    assert rate <= bound
