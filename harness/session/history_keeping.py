"""What a session writes to the nightly history (:mod:`harness.store.history`): each judged cell's
night with what a change of level is read by (the band it was judged by, its counted work, the
package set its ranks ran in, the machine), where that night's results and report lie and which
job measured it; and, for each cell whose baseline it re-recorded, the line that accepts the
cell's level as it now stands (:class:`SessionHistory`, the session's part that keeps them)."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable, Mapping, Protocol, Sequence

from harness.judging.verdicts import Reference
from harness.machine.provenance import environment_id
from harness.store.history import accepted_by, append, make_acceptance, read


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Night:
    """What every line a session writes shares."""

    run_id: str
    git_commit: str | None
    session_dir: str | None = None
    """The session's results folder (``results.json`` and the cells' files)."""
    report: str | None = None
    """The session's HTML report (its ``index.html``)."""
    slurm_job_id: str | None = None
    ci_job_url: str | None = None

    def fields(self) -> dict:
        return dataclasses.asdict(self)


def night_of(run_id: str, git_commit: str | None, *, results_json: Path | None, report: Path | None,
             environ: Mapping[str, str]) -> Night:
    """The session's :class:`Night`, from its output paths and the job's environment."""
    return Night(run_id=run_id, git_commit=git_commit,
                 session_dir=str(results_json.resolve().parent) if results_json else None,
                 report=str((report / "index.html").resolve()) if report else None,
                 slurm_job_id=environ.get("SLURM_JOB_ID"), ci_job_url=ci_job_url(environ))


def ci_job_url(environ: Mapping[str, str]) -> str | None:
    """The CI job that ran the session, where its environment names it: GitLab's ``CI_JOB_URL``,
    or GitHub Actions' run (``GITHUB_SERVER_URL``/``GITHUB_REPOSITORY``/actions/runs/``GITHUB_RUN_ID``)."""
    if environ.get("CI_JOB_URL"):
        return environ["CI_JOB_URL"]
    parts = [environ.get(name) for name in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID")]
    if all(parts):
        return f"{parts[0]}/{parts[1]}/actions/runs/{parts[2]}"
    return None


class PackageSets:
    """The package set id of each runtime's environment, asked once per interpreter."""

    def __init__(self, packages_of: Callable[[str], Mapping[str, str] | None]):
        self._packages_of = packages_of
        self._known: dict[str, str | None] = {}

    def of(self, python: str | None) -> str | None:
        if not python:
            return None
        if python not in self._known:
            packages = self._packages_of(python)
            self._known[python] = environment_id(dict(packages)) if packages else None
        return self._known[python]


def band_of(reference: Reference | None) -> dict | None:
    """A baseline reference as a history line keeps it: its value and the edges a measurement is
    judged against, in the metric's unit (``high`` null where the band has no upper edge)."""
    if reference is None:
        return None
    return {"value": round(reference.value, 6), "low": round(reference.value * (1 + reference.lower), 6),
            "high": round(reference.value * (1 + reference.upper), 6) if reference.upper is not None else None,
            "defaulted": reference.defaulted}


def acceptance_rows(cells: Sequence[str], night: Night, *, by: str, accepted_regressions: bool,
                    verdicts: Mapping[str, str], bands: Mapping[str, Mapping | None]) -> list[dict]:
    """One acceptance line per cell whose baseline was re-recorded, with the throughput band it is
    judged by from then on (``bands``) and, in its reason, the session's verdict (``verdicts``)."""
    flag = " --accept-regressions" if accepted_regressions else ""
    return [make_acceptance(cell, run_id=night.run_id, how="re-recorded", by=by, git_commit=night.git_commit,
                            reason=f"--update-baselines{flag}: the baseline re-recorded at this session's figures "
                                   f"(its verdict: {verdicts.get(cell, 'not judged')})",
                            baseline={"throughput": bands[cell]} if bands.get(cell) else None)
            for cell in cells]


class Judged(Protocol):
    """What the history reads of a judged cell (:class:`harness.session.results.CellResult` or
    :class:`harness.session.results.AccuracyResult`)."""

    def history_row(self, *, run_id: str, git_commit: str | None, **night: object) -> dict: ...

    @property
    def run(self): ...


class SessionHistory:
    """The session's lines in its system's history file: a night per judged cell as soon as it is
    judged, and the acceptance of each cell whose baseline it re-recorded. ``path`` None: the
    session keeps no history (``--no-history``)."""

    def __init__(self, path: Path | None, night: Night, package_sets: PackageSets):
        self.path = path
        self.night = night
        self.package_sets = package_sets
        self.accepted: list[str] = []
        """The cells whose levels the session accepted (:meth:`accept`)."""

    def keep(self, result: Judged) -> None:
        if self.path is None:
            return
        records = result.run.records
        ranks_python = records[0].get("python") if records else None
        append(self.path, [result.history_row(**self.night.fields(), package_set=self.package_sets.of(ranks_python))])

    def accept(self, cells: Sequence[str], *, accepted_regressions: bool, verdicts: Mapping[str, str],
               bands: Mapping[str, Mapping | None], environ: Mapping[str, str]) -> None:
        """The acceptance lines of ``cells``, re-recorded (:func:`acceptance_rows`)."""
        if self.path is None or not cells:
            return
        append(self.path, acceptance_rows(cells, self.night, by=accepted_by(environ), bands=bands,
                                          accepted_regressions=accepted_regressions, verdicts=verdicts))
        self.accepted.extend(cells)

    def rows(self) -> list[dict]:
        """The system's history lines, this session's included."""
        return read(self.path)[0] if self.path is not None else []
