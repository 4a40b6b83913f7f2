"""The site's pages, rendered from the cells' views with the Jinja2 templates in ``templates/``.

:func:`build` returns every page as text by its file name (``index.html``, ``cell-<cell>.html``,
``regressions.html``, ``regressions.atom``, ``compare.html``); :func:`write` puts them in a folder.
Every link is relative, so the folder works opened from disk and from any static host; a night's
report is linked where it is, relative to the site, and a night without one says why.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import urllib.parse
from pathlib import Path
from typing import Mapping, Sequence

import jinja2
from markupsafe import Markup

from harness.report import compare as compare_results
from harness.report.site import svg
from harness.report.site.nights import Night
from harness.report.site.sessions import ReportLink, Session, report_of
from harness.report.site.views import CellView, runs

TEMPLATES = Path(__file__).with_name("templates")
METRICS = {"throughput": "img/s", "efficiency": "E_G", "flops": "FLOPs per counted step"}
"""What a cell page plots, each with its unit."""
MARK_LABELS = {"package set": "package", "work": "work", "machine": "machine"}
"""The marks drawn where a night was measured with something else (CSS class by what changed)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Inputs:
    """What a site is built from, besides the history's lines."""

    sessions: Mapping[str, Session]
    problems: Sequence[str]
    """Lines of the history skipped and results folders that could not be used, each named."""
    out: Path
    """The site's folder: reports are linked relative to it."""
    compare: tuple[str, str] | None = None
    """The two runs the compare page shows (default: the latest two)."""
    base_url: str = ""
    """Prefixed to the feed's links, for readers that need absolute ones."""


def page_of(cell: str) -> str:
    return f"cell-{urllib.parse.quote(cell, safe='')}.html"


def build(rows: Sequence[Mapping], views: Sequence[CellView], inputs: Inputs) -> dict[str, str]:
    """Every page of the site by its file name."""
    reports = _reports(rows, inputs)
    all_runs = runs(rows)
    context = {"views": views, "regressions": [view.regression for view in views if view.regression],
               "page_of": page_of, "latest": all_runs[-1] if all_runs else None,
               "problems": inputs.problems, "missing_reports": {run: link.why for run, link in reports.items()
                                                                if link.path is None}}
    pages = {"index.html": _render("index.html", context, sparks={view.cell: _spark(view) for view in views}),
             "regressions.html": _render("regressions.html", context),
             "regressions.atom": _render("regressions.atom", context, base_url=inputs.base_url),
             "compare.html": _render("compare.html", context, **_comparison(views, all_runs, inputs))}
    for view in views:
        pages[page_of(view.cell)] = _render("cell.html", context, view=view, plots=_plots(view, reports, inputs.out),
                                            reports={run: _href(link, inputs.out) for run, link in reports.items()})
    return pages


def write(pages: Mapping[str, str], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, text in pages.items():
        (out / name).write_text(text)


@functools.cache
def _environment() -> jinja2.Environment:
    environment = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                                     undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    environment.filters["when"] = lambda date: str(date)[:16].replace("T", " ")
    environment.filters["figure"] = lambda estimate: estimate.text(3, "g") if estimate else "-"
    return environment


def _render(template: str, context: Mapping, **extra) -> str:
    return _environment().get_template(template).render(**context, **extra)


def _reports(rows: Sequence[Mapping], inputs: Inputs) -> dict[str, ReportLink]:
    """Each run's report, found from its first line."""
    found: dict[str, ReportLink] = {}
    for row in rows:
        if row["run_id"] not in found:
            found[row["run_id"]] = report_of(row["run_id"], row.get("report"), row.get("session_dir"),
                                             inputs.sessions)
    return found


def _href(link: ReportLink, out: Path) -> str | None:
    if link.path is None:
        return None
    return urllib.parse.quote(Path(os.path.relpath(link.path.resolve(), out.resolve())).as_posix())


def _spark(view: CellView) -> Markup:
    return Markup(svg.sparkline([None if night.failed else night.throughput.value for night in view.nights]))


def _plots(view: CellView, reports: Mapping[str, ReportLink], out: Path) -> list[tuple[str, Markup]]:
    """The cell's plots: each metric some night has, over all its nights, with the marks."""
    marks = _marks(view)
    dates = (view.nights[0].date[:10], view.nights[-1].date[:10])
    plots = []
    for metric, unit in METRICS.items():
        if metric != "throughput" and not any(night.figure(metric) for night in view.nights):
            continue
        points = [_point(place, night, metric, unit, reports[night.run_id], out)
                  for place, night in enumerate(view.nights) if metric == "throughput" or night.failed
                  or night.figure(metric)]
        plots.append((metric, Markup(svg.trend(points, nights=len(view.nights), unit=unit, bands=_bands(view, metric),
                                               marks=marks, dates=dates))))
    return plots


def _point(place: int, night: Night, metric: str, unit: str, report: ReportLink, out: Path) -> svg.Point:
    figure = None if night.failed else night.figure(metric)
    said = f"{figure.text(4, 'g')} {unit}" if figure else f"failed ({night.verdict})"
    title = (f"{night.date[:16].replace('T', ' ')}, run {night.run_id}, commit {night.short_commit}: {said}, "
             f"{night.verdict}" + (f"; {report.why}" if report.path is None else ""))
    return svg.Point(x=place, value=figure.value if figure else None, low=figure.low if figure else None,
                     high=figure.high if figure else None, title=title, href=_href(report, out), kind=night.verdict)


def _bands(view: CellView, metric: str) -> list[svg.Band]:
    """The baseline band night by night, nights judged by the same band drawn as one."""
    bands: list[svg.Band] = []
    for place, night in enumerate(view.nights):
        band = night.baselines.get(metric)
        if band is None:
            continue
        if bands and bands[-1].last == place - 1 and (bands[-1].low, bands[-1].high) == (band.low, band.high):
            bands[-1] = dataclasses.replace(bands[-1], last=place)
        else:
            bands.append(svg.Band(first=place, last=place, low=band.low, high=band.high))
    return bands


def _marks(view: CellView) -> list[svg.Mark]:
    marks = []
    for place, changed in view.moved():
        for what in changed:
            kind = next((css for label, css in MARK_LABELS.items() if what.startswith(label)), "commit")
            marks.append(svg.Mark(x=place - 0.5, kind=kind, title=what, label="" if kind == "commit" else kind))
    for change, place, accepted in view.changes():
        marks.append(svg.Mark(x=place - 0.5, kind="change", label=f"{change.relative:+.1%}",
                              title=f"level shift from {change.at.date[:10]}: {change.before:.4g} -> "
                                    f"{change.after:.4g} ({change.relative:+.1%})"
                                    + (f", accepted {accepted.date[:10]}" if accepted else "")))
    for acceptance in view.accepted:
        marks.append(svg.Mark(x=view.acceptance_place(acceptance), kind="accepted", label="accepted",
                              title=f"accepted {acceptance.date[:10]} ({acceptance.how}) by {acceptance.by}: "
                                    f"{acceptance.reason}"))
    return marks


def _comparison(views: Sequence[CellView], all_runs: Sequence[tuple[str, str]], inputs: Inputs) -> dict:
    """The compare page's two runs and its rows: each cell's figures in both, with the work."""
    if inputs.compare:
        old, new = inputs.compare
    elif len(all_runs) >= 2:
        (old, _), (new, _) = all_runs[-2:]
    else:
        return {"old": None, "new": None, "rows": []}
    judged = {}
    if old in inputs.sessions and new in inputs.sessions:
        judged = {c.cell: c for c in compare_results.compare(inputs.sessions[old].document,
                                                             inputs.sessions[new].document)}
    rows = []
    for view in views:
        nights = {night.run_id: night for night in view.nights}
        before, after = nights.get(old), nights.get(new)
        if before is None and after is None:
            continue
        ratio = (after.throughput.value / before.throughput.value
                 if before and after and before.throughput and after.throughput else None)
        same_work = (before.work_digest == after.work_digest
                     if before and after and before.work_digest and after.work_digest else None)
        rows.append({"cell": view.cell, "before": before, "after": after, "ratio": ratio, "same_work": same_work,
                     "judged": judged.get(view.cell)})
    dates = dict(all_runs)
    return {"old": (old, dates.get(old, "?")), "new": (new, dates.get(new, "?")), "rows": rows}
