"""A system's nightly history: ``history/<system>.jsonl``, one JSON line per cell per run. Format:
``history/README.md``. This is the file (its lines made, appended and read); where a cell's figures
shifted is :mod:`harness.judging.changepoints`, and the report that prints it is
:mod:`harness.report.history` (``python -m harness.report.history history/<system>.jsonl``).

The file is only ever appended to, one ``write`` per line, each batch flushed and fsynced: an
interrupted run loses at most the line being written, and :func:`append` ends such a torn line
before writing, so it never spoils the next one. :func:`read` reports a line it cannot use (its
number and why) and skips it; every other line is kept. The suite appends to no file holding a bad
line other than such a torn one (:attr:`Problem.torn`): something else writes there.
"""
from __future__ import annotations

import dataclasses
import datetime
import getpass
import json
import os
import socket
from pathlib import Path
from typing import Any, Iterable, Mapping

from harness.common.filelock import locked
from harness.common.interrupts import INTERRUPTS
from harness.common.jsonio import finite_number
from harness.judging.changepoints import ACCEPTED, NIGHT, kind_of
from harness.judging.metrics import CELL_METRICS
from harness.judging.stats import Estimate

SCHEMA_VERSION = 2
READABLE_SCHEMAS = (1, 2)
REQUIRED = {"cell": str, "run_id": str, "date": str, "verdict": str}
KINDS = {NIGHT: {}, ACCEPTED: {"how": str, "reason": str}}
"""Each kind of line with the fields it needs beyond :data:`REQUIRED`."""
ACCEPTED_HOW = ("re-recorded", "declared")
"""How a change was accepted: its baseline re-recorded (``--update-baselines``), or declared
without re-recording (``dlscale-history --accept``)."""
ROW_START = b'{"schema": '
"""How every line :func:`append` writes begins (``schema`` is :func:`make_row`'s first key)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Problem:
    """A line of a history file that :func:`read` skipped."""

    line: int
    why: str
    torn: bool = False
    """The beginning of a line :func:`append` wrote, cut short by an interrupted run: expected damage.
    Any other bad line was written by something else."""

    def __str__(self) -> str:
        return f"line {self.line}: {self.why}"


def make_row(cell_id: str, *, run_id: str, verdict: str, throughput: Estimate | None = None,
             efficiency: Estimate | None = None, fingerprint: str | None = None, git_commit: str | None = None,
             date: str | None = None, **extra: Any) -> dict:
    """One history line for one cell of one run; ``date`` defaults to now (UTC, ISO 8601).

    ``verdict`` is the cell's overall verdict ("pass", "fail", "error", ...); ``fingerprint`` is
    :func:`harness.judging.fingerprint.fingerprint_hash` of the run's fingerprint. ``extra`` keys (e.g.
    ``launcher``, ``ranks``) are stored as given.
    """
    return {"schema": SCHEMA_VERSION, "kind": NIGHT, "cell": cell_id, "run_id": run_id, "date": date or now(),
            "git_commit": git_commit, "throughput": throughput.to_json() if throughput else None,
            "efficiency": efficiency.to_json() if efficiency else None, "verdict": verdict,
            "fingerprint": fingerprint, **extra}


def make_acceptance(cell_id: str, *, run_id: str, how: str, by: str, reason: str, git_commit: str | None = None,
                    baseline: Mapping | None = None, date: str | None = None) -> dict:
    """A line saying the team accepted the cell's level as it stands: from this point the history's
    check compares later levels with it (:mod:`harness.judging.changepoints`). ``how``: one of
    :data:`ACCEPTED_HOW`; ``baseline``: the band the cell is judged by from then on, where known."""
    if how not in ACCEPTED_HOW:
        raise ValueError(f"how must be one of {', '.join(ACCEPTED_HOW)}, not {how!r}")
    return {"schema": SCHEMA_VERSION, "kind": ACCEPTED, "cell": cell_id, "run_id": run_id, "date": date or now(),
            "verdict": ACCEPTED, "how": how, "by": by, "reason": reason, "git_commit": git_commit,
            "baseline": dict(baseline) if baseline else None}


def accepted_by(environ: Mapping[str, str]) -> str:
    """Who accepts a change: the CI's user where a CI runs it, else ``user@host``."""
    for name in ("GITLAB_USER_LOGIN", "GITHUB_ACTOR"):
        if environ.get(name):
            return environ[name]
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


def now() -> str:
    """The time a line is written: UTC, ISO 8601 to the second."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def append(path: Path | str, rows: Iterable[Mapping]) -> None:
    """Append ``rows`` to the file, one line each, then flush and fsync.

    A torn last line (a run killed while writing it) is first ended with a newline, so that it
    stays one corrupt line that :func:`read` skips and the new rows stay whole. Several sessions
    may append to one file at once: each batch is written under the file's lock
    (:mod:`harness.common.filelock`), so lines never interleave and the torn-line check sees a quiet file.
    """
    path = Path(path)
    lines = [json.dumps(dict(row), sort_keys=False, allow_nan=False) + "\n" for row in rows]
    if not lines:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with locked(path), INTERRUPTS.writing():
        created = not path.exists()
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            if not created and _ends_torn(fd):
                _write_all(fd, b"\n")
            for line in lines:
                _write_all(fd, line.encode())  # one write per line: an interrupt lands between lines
            os.fsync(fd)
        finally:
            os.close(fd)
        if created:
            _fsync_directory(path.parent)


def read(path: Path | str) -> tuple[list[dict], list[Problem]]:
    """Every usable row in file order, and a :class:`Problem` for each line skipped.

    A missing file is an empty history. Blank lines are ignored without a problem.
    """
    path = Path(path)
    if not path.exists():
        return [], []
    rows, problems = [], []
    with open(path, "rb") as stream:
        for number, raw in enumerate(stream, start=1):
            if not raw.strip():
                continue
            try:
                row = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as error:
                problems.append(Problem(number, f"not UTF-8 ({error.reason} at byte {error.start})"))
                continue
            except json.JSONDecodeError as error:
                torn = _cut_short(raw)
                how = " (a line cut short: a run was interrupted while writing it)" if torn else ""
                problems.append(Problem(number, f"not valid JSON: {error.msg} at column {error.colno}{how}", torn))
                continue
            why = _invalid(row)
            if why:
                problems.append(Problem(number, why))
                continue
            rows.append(row)
    return rows, problems


# --- helpers -------------------------------------------------------------------------------------


def _invalid(row: Any) -> str | None:
    if not isinstance(row, dict):
        return f"not a JSON object but {type(row).__name__}"
    for field, kind in REQUIRED.items():
        if not isinstance(row.get(field), kind):
            return f"missing or non-{kind.__name__} field {field!r}"
    if row.get("schema") not in READABLE_SCHEMAS:
        return (f"schema {row.get('schema')!r}: not a schema this dlscale reads "
                f"({', '.join(map(str, READABLE_SCHEMAS))}; a newer dlscale wrote it?)")
    if kind_of(row) not in KINDS:
        return f"unknown kind {row.get('kind')!r} (known: {', '.join(KINDS)})"
    for field, kind in KINDS[kind_of(row)].items():
        if not isinstance(row.get(field), kind):
            return f"missing or non-{kind.__name__} field {field!r}"
    for metric in CELL_METRICS:
        figure = row.get(metric)
        if figure is None:
            continue
        value = figure.get("value") if isinstance(figure, dict) else None
        if not (finite_number(value) and value > 0):
            return f"{metric} must be null or an object with a positive \"value\", found {figure!r}"
    return None


def _cut_short(raw: bytes) -> bool:
    """Whether a line that is not JSON begins like every line :func:`make_row` makes: one an
    interrupted append left (that append's successor ended it with a newline)."""
    line = raw.rstrip(b"\n")
    return line.startswith(ROW_START) or ROW_START.startswith(line)


def _ends_torn(fd: int) -> bool:
    size = os.fstat(fd).st_size
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _fsync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)

