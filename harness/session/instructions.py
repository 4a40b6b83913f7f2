"""An A/B's host instructions (``--count-instructions``): one launch a side with its ranks under
valgrind's callgrind (:mod:`harness.rank.instructions`), before the pairs, compared by
:mod:`harness.judging.instructions`. The launches' times say nothing and are not pairs; what they
cost is kept beside the counts, and each launch in the A/B's launch log (:func:`log_entry`)."""
from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path
from typing import Callable

from harness.judging.instructions import cell_instructions, compare_instructions, threads_function_counts
from harness.launch.runner import CellRun, RunLimits
from harness.rank.workload import Workload

SIDES = ("reference", "current")

SILENCE_S = 1200.0
"""Seconds a rank under callgrind may go without progress: a step runs 20-30 times slower than
natively with oneDNN's AVX kernels (and hundreds of times with its AVX2 ones)."""

TIMEOUT_S = 3600.0

KINDS_NAMED_APART = ("communication", "loader")
"""Thread kinds whose functions are compared on their own where the kind moved: the rank thread's
dominate the functions of every thread together."""


def instruction_workload(workload: Workload) -> Workload:
    """The workload of an instruction launch: one warm-up step and a one-step window before the
    counted steps; its times are not read."""
    return workload.replace(warmup_steps=1, steps=1)


def instruction_limits(limits: RunLimits) -> RunLimits:
    return dataclasses.replace(limits, heartbeat_s=max(limits.heartbeat_s, SILENCE_S),
                               timeout_s=max(limits.timeout_s, TIMEOUT_S))


def count_instructions(launch: Callable[[str], CellRun], refused: Callable[[str], str | None],
                       on_progress: Callable[[str], None] | None = None, cell_id: str = "") -> dict:
    """Launch each side once under callgrind (``launch``), unless ``refused`` says why a side
    cannot (an older reference's worker); the A/B's ``instructions``: each side's counts and its
    launch, what moved, or the error that left them uncounted."""
    sides: dict[str, dict] = {}
    launches: dict[str, dict] = {}
    for side in SIDES:
        if reason := refused(side):
            return {"error": f"the {side} side cannot count instructions: {reason}", "launches": launches}
        run = launch(side)
        launches[side] = log_entry(run, side)
        counted = cell_instructions(run.records) if run.ok else None
        if counted is None:
            why = launches[side].get("error") or "no rank counted any"
            return {"error": f"the {side} side's launch under callgrind counted no instructions: {why}",
                    "launches": launches}
        sides[side] = {**counted, "output_dir": str(run.log_path.parent)}
    try:
        functions = tuple(threads_function_counts(_dumps(sides[side], sides[side]["files"]["0"])) for side in SIDES)
        kind_functions = {kind: tuple(threads_function_counts(_dumps(sides[side], sides[side]["kind_files"]["0"]
                                                                     .get(kind, ()))) for side in SIDES)
                          for kind in KINDS_NAMED_APART if all("kind_files" in sides[side] for side in SIDES)}
    except (OSError, subprocess.CalledProcessError, KeyError):
        functions, kind_functions = None, None  # the counts stand without the functions that moved
    change = compare_instructions(sides["reference"], sides["current"], functions, kind_functions=kind_functions)
    section = {"sides": sides, "launches": launches, "change": change.to_json(), "reading": change.text(),
               "moved": change.moved_lines()}
    if on_progress:
        on_progress(f"{cell_id}: {instruction_lines(section)[0]}")
    return section


def _dumps(side: dict, names) -> list[Path]:
    return [Path(side["output_dir"]) / name for name in names]


def log_entry(run: CellRun, side: str) -> dict:
    """What the A/B's launch log keeps of a launch under callgrind: its side, status, wall time, log
    and, where it failed, its error's first line; no timed figures (``under``: its times say nothing)."""
    entry = {"side": side, "under": "callgrind", "status": run.status, "wall_s": round(run.wall_s, 1),
             "log": str(run.log_path)}
    if not run.ok:
        entry["error"] = (run.error or run.status).strip().splitlines()[0]
    return entry


def instruction_lines(section: dict | None) -> list[str]:
    """What an A/B's ``instructions`` says, a line each: the counts compared with what the launches
    cost, then the functions that moved most."""
    if not section:
        return []
    if section.get("error"):
        return [f"instructions not counted: {section['error']}"]
    launches = section["launches"]
    return [f"{section['reading']} (one launch a side under callgrind: {launches['reference']['wall_s']:.0f} s "
            f"and {launches['current']['wall_s']:.0f} s)"] + [f"moved most: {line}" for line in section["moved"]]
