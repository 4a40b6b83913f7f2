"""The stored-baseline path's launches: a cell launched again, its launches pooled and judged anew
each time, until its interval is within the precision and its verdict settled, or until one more
launch would pass its budget (:func:`harness.judging.verdicts.measured_enough`).

Each launch is a look at the same cell, so a cell launched until it is decided has more than one
chance to fail. The band a measurement of ``k`` launches is judged against narrows with ``k``
(:meth:`harness.judging.verdicts.Reference.for_launches`), each at the band's own level; what the
looks together cost an unchanged cell is simulated through :func:`measure_until_settled` itself
(bench_tests/benchmarks/test_stored_false_fails.py, docs/verdicts.md "Launched until settled")."""
from __future__ import annotations

import time
from typing import Callable

from harness.common.interrupts import INTERRUPTS
from harness.judging.verdicts import measured_enough
from harness.launch.runner import CellRun
from harness.session.results import CellResult


def measure_until_settled(result: CellResult, launch: Callable[[], CellRun], judge: Callable[[CellResult], None], *,
                          precision: float, budget_s: float, clock: Callable[[], float] = time.monotonic,
                          on_progress: Callable[[str], None] | None = None) -> CellResult:
    """Launch ``result``'s cell (``launch``) and judge every launch so far pooled (``judge`` fills
    in ``result``'s figures and verdicts) until it is measured enough or a launch fails; each
    judged launch is kept whole, an interrupt waiting until it is."""
    started = clock()
    while True:
        run = launch()
        with INTERRUPTS.protect(raise_pending=False):
            result.runs.append(run)
            if run.ok:
                judge(result)
        if not run.ok or measured_enough(result.throughput, result.verdict, precision=precision,
                                         spent_s=clock() - started, next_launch_s=run.wall_s, budget_s=budget_s):
            return result
        if on_progress:
            on_progress(f"{result.cell.id}: measuring again (interval +-{result.throughput.half_width_rel:.1%}, "
                        f"verdict {result.verdict})")
