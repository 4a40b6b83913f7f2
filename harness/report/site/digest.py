"""The morning digest, ``summary.md``: what the latest night changed, with links into the site.

New failures, new level shifts (found with the latest night and not without it), acceptances since
the night before, ``--confirm``'s verdicts, package sets, work and machines that changed, and the
cells the night left unmeasured for want of time (``unmeasured_for_time`` in its results file).
Markdown, for a CI job's summary (``$GITHUB_STEP_SUMMARY``) or a mail.
"""
from __future__ import annotations

from typing import Mapping, Sequence

from harness.judging.changepoints import analyse
from harness.judging.kinds import ERROR, VerdictKind
from harness.report.site.build import page_of
from harness.report.site.sessions import Session
from harness.report.site.views import CellView, runs

BAD = (VerdictKind.FAIL, ERROR)


def digest(rows: Sequence[Mapping], views: Sequence[CellView], sessions: Mapping[str, Session], *, site: str,
           min_nights: int) -> str:
    """The digest of the history's latest run; ``site``: the site's address as the reader reaches it."""
    all_runs = runs(rows)
    if not all_runs:
        return "# dlscale nightly\n\nThe history holds no night yet.\n"
    latest, date = all_runs[-1]
    since = all_runs[-2][1] if len(all_runs) > 1 else ""
    tonight = [view for view in views if view.latest.run_id == latest]
    session = sessions.get(latest)
    open_count = sum(view.regression is not None for view in views)

    def link(view: CellView) -> str:
        return f"[{view.cell}]({site}{page_of(view.cell)})"

    sections = {
        "New failures": [f"{link(v)}: {v.latest.verdict}" + _before(v) for v in tonight if _newly_bad(v)],
        "New level shifts": [f"{link(v)}: {change.relative:+.1%} from {change.at.date[:10]} "
                             f"({change.before:.4g} -> {change.after:.4g} img/s)"
                             + (", open regression" if v.regression else "")
                             for v in tonight for change in _new_shifts(v, min_nights)],
        "Accepted changes": [f"{link(v)}: {a.how} by {a.by} on {a.date[:10]}: {a.reason}"
                             for v in views for a in v.accepted if a.date > since],
        "--confirm": [f"{link(v)}: **{found['cause']}**: {found['message']}" for v in tonight
                      if session and (found := (session.cell(v.cell) or {}).get("confirmation"))],
        "Package, work and machine changes": [f"{link(v)}: {'; '.join(moved)}" for v in tonight
                                              if (moved := _moved(v))],
        "Cells left unmeasured": [f"{cell}: not measured for want of time" for cell in
                                  (session.document.get("unmeasured_for_time") or [] if session else [])],
    }
    lines = [f"# dlscale nightly: run {latest} ({date[:16].replace('T', ' ')})", "",
             f"{len(tonight)} cells measured; {open_count} open regression{'s' * (open_count != 1)}: "
             f"[the site]({site}index.html), [open regressions]({site}regressions.html).", ""]
    if session is None:
        lines += [f"No results folder was found for run {latest}: its --confirm verdicts and unmeasured cells "
                  "are not known.", ""]
    for title, items in sections.items():
        lines += [f"## {title}", "", *(f"- {item}" for item in items or ["none"]), ""]
    return "\n".join(lines)


def _newly_bad(view: CellView) -> bool:
    before = view.nights[-2].verdict if len(view.nights) > 1 else None
    return view.latest.verdict in BAD and before not in BAD


def _before(view: CellView) -> str:
    return f" (was {view.nights[-2].verdict} on {view.nights[-2].date[:10]})" if len(view.nights) > 1 else ""


def _new_shifts(view: CellView, min_nights: int):
    """The level shifts found with the latest night that the nights before it did not show."""
    if view.history is None or not view.history.changes or view.latest.failed:
        return []
    before = analyse(view.history.nights[:-1], view.cell, min_nights).changes
    return [change for change in view.history.changes
            if all(abs(old.at.index - change.at.index) >= min_nights for old in before)]


def _moved(view: CellView) -> list[str]:
    """What the latest night was measured with that the night before was not, commits aside."""
    moved = view.moved()
    if not moved or moved[-1][0] != len(view.nights) - 1:
        return []
    return [what for what in moved[-1][1] if not what.startswith("commit")]
