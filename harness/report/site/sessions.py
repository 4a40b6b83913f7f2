"""Which results folder holds which night: each session's ``results.json`` and its HTML report.

A night's report is the one its history line names (``report``, else ``session_dir``'s
``report/index.html``), else that of the results folder whose ``results.json`` has the night's
``run_id``, found under the ``--results`` folders (``results/nightly/<date>-<job>/``). What cannot be
found is said, not skipped: a folder that is gone, a results file that does not parse, a night with
no report.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Iterable, Mapping

RESULTS_FILE = "results.json"
REPORT = Path("report") / "index.html"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Session:
    """One session's results folder."""

    run_id: str
    folder: Path
    document: Mapping
    """Its ``results.json``."""

    @property
    def report(self) -> Path | None:
        path = self.folder / REPORT
        return path if path.is_file() else None

    def cell(self, cell_id: str) -> Mapping | None:
        """The cell's entry in the results file, where the session measured it."""
        return next((cell for cell in self.document.get("cells") or [] if cell.get("cell") == cell_id), None)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ReportLink:
    """Where a night's report is, or why there is none."""

    path: Path | None
    why: str = ""


def find_sessions(folders: Iterable[Path], named: Iterable[str] = ()) -> tuple[dict[str, Session], list[str]]:
    """Every session under ``folders`` and in the ``named`` session folders (the lines'
    ``session_dir``) by run id, and a sentence for each ``--results`` folder or results file that
    could not be used. A named folder that is gone is said where its night's report is missing."""
    sessions: dict[str, Session] = {}
    problems = []
    found = [Path(folder) for folder in dict.fromkeys(named) if Path(folder, RESULTS_FILE).is_file()]
    for folder in folders:
        folder = Path(folder)
        if not folder.is_dir():
            problems.append(f"results folder {folder} is gone")
            continue
        found += [path.parent for path in sorted(folder.rglob(RESULTS_FILE))]
    for folder in found:
        session = read_session(folder)
        if isinstance(session, str):
            problems.append(session)
        elif session.run_id:
            sessions.setdefault(session.run_id, session)
    return sessions, problems


def read_session(folder: Path) -> Session | str:
    """The session in ``folder``, or why it cannot be read."""
    path = folder / RESULTS_FILE
    try:
        document = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        return f"{path}: cannot be read ({error})"
    if not isinstance(document, Mapping):
        return f"{path}: not a results file (not a JSON object)"
    return Session(run_id=str(document.get("run_id") or ""), folder=folder, document=document)


def report_of(run_id: str, report: str | None, session_dir: str | None,
              sessions: Mapping[str, Session]) -> ReportLink:
    """A night's report, or why it has none."""
    named = [Path(report)] if report else []
    if session_dir:
        named.append(Path(session_dir) / REPORT)
    for path in named:
        if path.is_file():
            return ReportLink(path=path)
    found = sessions.get(run_id)
    if found and found.report:
        return ReportLink(path=found.report)
    if named:
        return ReportLink(path=None, why=f"no report: {', '.join(map(str, named))} is gone")
    if found:
        return ReportLink(path=None, why=f"no report in {found.folder}")
    return ReportLink(path=None, why=f"no report: no results folder holds run {run_id}")
