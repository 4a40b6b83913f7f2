"""A session that ends inside its time: a cell is started only where it can finish before the
session's end (:mod:`harness.machine.time_left`), by its own past duration; the cells it cannot
finish are left unmeasured for time, named as such, and the session's exit status says the matrix
was cut (:data:`CUT_FOR_TIME_EXIT_STATUS`).

A cell's duration is its wall seconds over all its launches: the ``duration_s`` of its latest line in
the system's history, else its ``wall_s`` in the newest earlier results file of the system beside
this session's (``results/<session>/results.json``, ``results/nightly/<night>/results.json``); what
this session measured replaces them. A cell none of them knows is expected to take the median of
the cells they know; where they know none, every cell is started (the batch system's SIGTERM still
ends the session cleanly, keeping what it measured). A cell is started where its duration times
:data:`SAFETY_FACTOR` fits in the time left less the reserve the session keeps for its end (the
summary, the report, the nightly's history check: ``--deadline-reserve``).

Pure functions of the durations and the clock, but for :func:`past_durations`, which reads them, and
:func:`session_deadline`, which asks Slurm."""
from __future__ import annotations

import dataclasses
import datetime
import json
import statistics
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from harness.machine.time_left import Run, run_command, session_end
from harness.store.history import read as read_history

CUT_FOR_TIME_EXIT_STATUS = 6
"""The session's exit status where cells were left unmeasured for time and nothing else failed:
beyond pytest's own (0-5). A failure (1) or an interrupt (2) takes precedence."""
SAFETY_FACTOR = 1.25
"""A cell may take this much longer than it took last time: a chosen margin for launches that run
slower on a busier node. It does not cover a cell launched again for precision where last time one
launch sufficed (up to ``--measure-budget`` more): the reserve and the batch system's SIGTERM do."""
RESULTS_FILES_READ = 10
"""The most earlier results files read for durations the history does not hold, newest first."""


@dataclasses.dataclass(frozen=True, slots=True)
class Expected:
    """How long a cell is expected to take, and what says so."""
    seconds: float
    basis: str


def expected(cell_id: str, durations: Mapping[str, float]) -> Expected | None:
    """The cell's own duration, else the median of the known ones; None where none is known."""
    if cell_id in durations:
        return Expected(durations[cell_id], f"it took {durations[cell_id]:.0f} s last time")
    if not durations:
        return None
    median = statistics.median(durations.values())
    return Expected(median, f"its duration unknown, the median of {len(durations)} known cell(s): {median:.0f} s")


def reason_to_leave(cell_id: str, durations: Mapping[str, float], left_s: float, reserve_s: float) -> str | None:
    """Why the cell is not started with ``left_s`` seconds left before the session's end, of which
    ``reserve_s`` are kept for its end work; None where it can finish (or nothing says how long it takes)."""
    guess = expected(cell_id, durations)
    if guess is None:
        return None
    need_s, available_s = guess.seconds * SAFETY_FACTOR, left_s - reserve_s
    if need_s <= available_s:
        return None
    return (f"left unmeasured for time: needs ~{need_s:.0f} s, {max(available_s, 0):.0f} s left "
            f"({guess.basis}, +{SAFETY_FACTOR - 1:.0%}; {reserve_s:.0f} s kept for the session's end)")


def history_durations(rows: Iterable[Mapping]) -> dict[str, float]:
    """Each cell's ``duration_s`` in its latest history line that has one."""
    return {row["cell"]: float(row["duration_s"]) for row in rows if row.get("duration_s") is not None}


def results_durations(documents: Iterable[Mapping], system: str) -> dict[str, float]:
    """Each cell's wall seconds in the first of ``documents`` (results files, newest first) of
    ``system`` that holds it."""
    durations: dict[str, float] = {}
    for document in documents:
        if document.get("system") != system:
            continue
        for cell in [*document.get("cells", []), *document.get("accuracy_cells", [])]:
            if cell.get("wall_s") is not None:
                durations.setdefault(cell["cell"], float(cell["wall_s"]))
    return durations


def earlier_results(results_json: Path | None) -> list[Path]:
    """The results files of earlier sessions beside this one's (its folder's siblings), newest first."""
    if results_json is None:
        return []
    own = results_json.resolve()
    found = {path.resolve() for path in results_json.parent.parent.glob("*/results.json")} - {own}
    return sorted(found, key=lambda path: path.stat().st_mtime, reverse=True)


def past_durations(history: Path | None, results_json: Path | None, system: str,
                   cell_ids: Sequence[str]) -> dict[str, float]:
    """The durations earlier sessions measured: the history's (:func:`history_durations`), and for
    cells of ``cell_ids`` it does not hold, the earlier results files' (:func:`results_durations`,
    at most :data:`RESULTS_FILES_READ` of them, read only until every cell is known)."""
    durations = history_durations(read_history(history)[0]) if history else {}
    for path in earlier_results(results_json)[:RESULTS_FILES_READ]:
        if all(cell_id in durations for cell_id in cell_ids):
            break
        try:
            document = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # a file another session is writing, or not ours
        durations = {**results_durations([document], system), **durations}
    return durations


def measured_durations(results: Iterable, accuracy_results: Iterable) -> dict[str, float]:
    """This session's cells' wall seconds over their launches (``CellResult``, ``AccuracyResult``)."""
    return {**{result.cell.id: sum(run.wall_s for run in result.runs) for result in results},
            **{result.cell.id: result.run.wall_s for result in accuracy_results}}


@dataclasses.dataclass(frozen=True, slots=True)
class Deadline:
    """The end a session's cells must keep inside, and what its cells took before."""
    ends_at: float
    """Unix time."""
    source: str
    """Where the end comes from, in words (``the time limit of the Slurm job 42``, ``--deadline``)."""
    reserve_s: float
    past: Mapping[str, float]
    """Each cell's duration in earlier sessions (:func:`past_durations`)."""

    def reason_to_leave(self, cell_id: str, measured: Mapping[str, float], now: float) -> str | None:
        """Why the cell is left unmeasured at ``now``, given what this session measured (its own
        durations count for the median of unknown cells): :func:`reason_to_leave`."""
        return reason_to_leave(cell_id, {**self.past, **measured}, self.ends_at - now, self.reserve_s)

    def words(self, now: float) -> str:
        """The deadline in one line, for the session's start."""
        return (f"dlscale: {self.ends_at - now:.0f} s left ({self.source}, ends {_clock(self.ends_at)}): a cell "
                f"starts only where it can finish with {self.reserve_s:.0f} s kept for the session's end; "
                f"past durations known for {len(self.past)} cell(s)")

    def cut_line(self, unmeasured: Sequence[str]) -> str:
        """The summary's line naming the cells left unmeasured for time."""
        return (f"dlscale: the matrix was cut for time ({self.source}, ends {_clock(self.ends_at)}): "
                f"{len(unmeasured)} cell(s) left unmeasured: {', '.join(unmeasured)}; exit status "
                f"{CUT_FOR_TIME_EXIT_STATUS} unless a cell failed")


def session_deadline(option: str | None, reserve_s: float, env: Mapping[str, str], now: float, *,
                     history: Path | None, results_json: Path | None, system: str, cell_ids: Sequence[str],
                     run: Run = run_command) -> Deadline | None:
    """The session's deadline (:func:`harness.machine.time_left.session_end`) with the past durations
    of its cells; None where it has none. Raises ``ValueError`` for a deadline of no known form."""
    ends_at, source = session_end(option, env, now, run)
    if ends_at is None:
        return None
    return Deadline(ends_at=ends_at, source=source, reserve_s=reserve_s,
                    past=past_durations(history, results_json, system, cell_ids))


def _clock(when: float) -> str:
    return datetime.datetime.fromtimestamp(when, datetime.timezone.utc).strftime("%H:%M:%S UTC")
