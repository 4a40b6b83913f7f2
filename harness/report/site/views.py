"""What the site's pages say about each cell: its nights, its level shifts, which are accepted, and
its open regression with the commit range, ``--confirm``'s verdict and the bisect that would search it.

Whether a cell's latest level is an open regression is :meth:`CellHistory.regressed`'s call (the
change-point analysis, :mod:`harness.judging.changepoints`, aware of acceptances): the site only
shows it.
"""
from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence

from harness.judging import changepoints
from harness.judging.changepoints import NIGHT, Acceptance, CellHistory, Change, kind_of
from harness.report.site.nights import Night, cell_nights, differences
from harness.report.site.sessions import Session


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Regression:
    """A cell's open drop: its latest level, more than the threshold below the level it is compared
    with (the one last accepted, else the one before it)."""

    cell: str
    before: float
    """The level the latest one is compared with."""
    after: float
    """The latest level."""
    accepted: Acceptance | None
    """The acceptance that set :attr:`before`, if one did."""
    good: Night
    """The last measured night at :attr:`before`."""
    bad: Night
    """The first night of the latest level."""
    confirmation: Mapping | None
    """``--confirm``'s verdict on a night of the latest level (``{"cause", "message", ...}``), where one ran."""

    @property
    def relative(self) -> float:
        return self.after / self.before - 1

    @property
    def commit_range(self) -> str:
        return f"{self.good.short_commit}..{self.bad.short_commit}"

    @property
    def bisect(self) -> str:
        """The ``dlscale-bisect`` command that would search the range, or what to search instead."""
        if self.good.git_commit and self.bad.git_commit and self.good.git_commit != self.bad.git_commit:
            return f"dlscale-bisect {self.cell} --good {self.good.git_commit} --bad {self.bad.git_commit}"
        if self.good.package_set != self.bad.package_set:
            return (f"dlscale-bisect {self.cell} --good pkg:NAME==VERSION (for each package that differs between "
                    f"package sets {self.good.package_set} and {self.bad.package_set})")
        return f"no commit or package set changed between {self.good.date[:10]} and {self.bad.date[:10]}: the system?"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CellView:
    cell: str
    nights: list[Night]
    history: CellHistory | None
    """The throughput's change points; ``None`` where no night has a throughput."""
    regression: Regression | None

    @property
    def latest(self) -> Night:
        return self.nights[-1]

    def place(self, run_id: str) -> int:
        """The night's place in :attr:`nights`, from 0."""
        return next(i for i, night in enumerate(self.nights) if night.run_id == run_id)

    @property
    def accepted(self) -> list[Acceptance]:
        """The levels the team accepted (acceptance lines), in file order."""
        return getattr(self.history, "accepted", [])

    def changes(self) -> list[tuple[Change, int, Acceptance | None]]:
        """Each level shift with its night's place and the acceptance that followed it, if any."""
        shifts = self.history.changes if self.history else []
        found = []
        for number, change in enumerate(shifts):
            until = shifts[number + 1].at.index if number + 1 < len(shifts) else None
            accepted = next((a for a in self.accepted if a.after >= change.at.index
                             and (until is None or a.after < until)), None)
            found.append((change, self.place(change.at.run_id), accepted))
        return found

    def moved(self) -> list[tuple[int, list[str]]]:
        """Each night's place with what changed since the night before (commit, package set, work, machine)."""
        return [(place, changed) for place in range(1, len(self.nights))
                if (changed := differences(self.nights[place - 1], self.nights[place]))]

    def acceptance_place(self, acceptance: Acceptance) -> float:
        """Where an acceptance stands among the nights: after the last measured night before it."""
        measured = [place for place, night in enumerate(self.nights) if not night.failed]
        return (measured[acceptance.after - 1] if acceptance.after else -1) + 0.5


def cell_views(rows: Sequence[Mapping], sessions: Mapping[str, Session], *, threshold: float,
               min_nights: int) -> list[CellView]:
    """Every cell of the history, open regressions first, then by name."""
    histories = {history.cell: history for history in changepoints.report(rows, min_nights=min_nights)}
    views = []
    for cell, nights in cell_nights(rows).items():
        history = histories.get(cell)
        regressed = history is not None and history.regressed(threshold)
        views.append(CellView(cell=cell, nights=nights, history=history,
                              regression=_regression(cell, nights, history, sessions) if regressed else None))
    return sorted(views, key=lambda view: (view.regression is None, view.cell))


def runs(rows: Sequence[Mapping]) -> list[tuple[str, str]]:
    """Every measured run of the history, ``(run_id, date of its first line)``, in file order."""
    found: dict[str, str] = {}
    for row in rows:
        if kind_of(row) == NIGHT:
            found.setdefault(row["run_id"], row["date"])
    return list(found.items())


def _regression(cell: str, nights: list[Night], history: CellHistory,
                sessions: Mapping[str, Session]) -> Regression:
    before, accepted = history.compared_with()
    left = next(c for c in history.changes if c.at.index > accepted.after) if accepted else history.changes[-1]
    place = {night.run_id: i for i, night in enumerate(nights)}
    good = next(night for night in reversed(nights[:place[left.at.run_id]]) if not night.failed)
    latest = place[history.changes[-1].at.run_id]
    confirmation = next((found for night in nights[latest:] if night.run_id in sessions
                         and (found := (sessions[night.run_id].cell(cell) or {}).get("confirmation"))), None)
    return Regression(cell=cell, before=before, after=history.latest_level, accepted=accepted, good=good,
                      bad=nights[latest], confirmation=confirmation)
