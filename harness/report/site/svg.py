"""Plots as inline SVG, drawn by pure functions: a series over the nights and a sparkline.

A page that holds its plots as SVG text needs no script and loads nothing: each point is an
element with a ``<title>`` (the browser's tooltip: night, commit, value and interval) inside a link
to that night's report, and a test can count the points in the page's DOM. ``trend`` draws one
metric's nights (a failed night as a cross on the axis, at its place), the baseline band each night
was judged by, and vertical marks (change points, accepted levels, what changed between nights).
"""
from __future__ import annotations

import dataclasses
import html
import math
from typing import Sequence

MARGIN = {"left": 64, "right": 12, "top": 18, "bottom": 30}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Point:
    """One night of a series."""

    x: int
    """The night's place in the cell's nights, from 0."""
    value: float | None
    """``None``: the night failed, drawn as a cross on the axis."""
    low: float | None = None
    high: float | None = None
    title: str
    href: str | None = None
    kind: str = "pass"
    """The night's verdict, its CSS class (``v-<kind>``)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Band:
    """The band a run of nights ``first``..``last`` was judged by."""

    first: int
    last: int
    low: float
    high: float | None
    """``None``: the band has no upper edge, drawn to the plot's top."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Mark:
    """A vertical line before night ``x``: a change point, an accepted level, or what changed."""

    x: float
    kind: str
    """Its CSS class: ``change``, ``accepted``, ``commit``, ``package``, ``work`` or ``machine``."""
    title: str
    label: str = ""
    """Written at the top of the line; commit marks are ticks without one."""


def trend(points: Sequence[Point], *, nights: int, unit: str, bands: Sequence[Band] = (),
          marks: Sequence[Mark] = (), dates: tuple[str, str] = ("", ""), width: int = 900,
          height: int = 220) -> str:
    """The series as an ``<svg>`` element, ``nights`` places wide."""
    plot_width = width - MARGIN["left"] - MARGIN["right"]
    plot_height = height - MARGIN["top"] - MARGIN["bottom"]
    step = plot_width / max(nights, 1)
    bottom = MARGIN["top"] + plot_height
    ends = [v for p in points for v in (p.value, p.low, p.high) if v is not None and math.isfinite(v)]
    ends += [v for band in bands for v in (band.low, band.high) if v is not None]
    low, high = _padded(ends)

    def x_of(place: float) -> float:
        return MARGIN["left"] + (place + 0.5) * step

    def y_of(value: float) -> float:
        return MARGIN["top"] + (high - value) / (high - low) * plot_height

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="trend" viewBox="0 0 {width} {height}" '
             f'width="{width}" height="{height}" role="img" aria-label="{_e(unit)} over {nights} nights">']
    for band in bands:
        top = high if band.high is None else band.high
        upper = "" if band.high is None else f"{band.high:.4g}"
        parts.append(f'<rect class="band" x="{x_of(band.first) - step / 2:.1f}" y="{y_of(top):.1f}" '
                     f'width="{(band.last - band.first + 1) * step:.1f}" '
                     f'height="{max(y_of(band.low) - y_of(top), 0.5):.1f}"><title>baseline band '
                     f'{band.low:.4g} - {upper or "(no upper edge)"} {_e(unit)}</title></rect>')
    for tick in _ticks(low, high):
        y = y_of(tick)
        parts.append(f'<line class="grid" x1="{MARGIN["left"]}" x2="{width - MARGIN["right"]}" y1="{y:.1f}" '
                     f'y2="{y:.1f}"/><text class="tick" x="{MARGIN["left"] - 4}" y="{y + 3:.1f}" '
                     f'text-anchor="end">{tick:.4g}</text>')
    parts.append(f'<text class="unit" x="4" y="{MARGIN["top"] - 6}">{_e(unit)}</text>')
    labelled: dict[float, int] = {}  # labels already written at each place: the next goes below them
    for mark in marks:
        x = x_of(mark.x)
        top = bottom - 6 if mark.kind == "commit" else MARGIN["top"]
        label = ""
        if mark.label:
            row = labelled[mark.x] = labelled.get(mark.x, -1) + 1
            label = f'<text x="{x + 2:.1f}" y="{MARGIN["top"] - 6 + 11 * row}">{_e(mark.label)}</text>'
        parts.append(f'<g class="mark {_e(mark.kind)}"><title>{_e(mark.title)}</title>'
                     f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{bottom}"/>{label}</g>')
    measured = [p for p in points if p.value is not None]
    if len(measured) > 1:
        path = " ".join(f"{x_of(p.x):.1f},{y_of(p.value):.1f}" for p in measured)
        parts.append(f'<polyline class="line" points="{path}"/>')
    for point in points:
        parts.append(_point(point, x_of(point.x), y_of, bottom))
    parts.append(f'<text class="tick" x="{MARGIN["left"]}" y="{height - 8}">{_e(dates[0])}</text>'
                 f'<text class="tick" x="{width - MARGIN["right"]}" y="{height - 8}" text-anchor="end">'
                 f'{_e(dates[1])}</text></svg>')
    return "".join(parts)


def sparkline(values: Sequence[float | None], *, width: int = 140, height: int = 26) -> str:
    """A small trend of ``values`` (``None``: a failed night, a red dot on the axis)."""
    low, high = _padded([v for v in values if v is not None])
    step = width / max(len(values), 1)

    def y_of(value: float) -> float:
        return 2 + (high - value) / (high - low) * (height - 4)

    line = " ".join(f"{(i + 0.5) * step:.1f},{y_of(v):.1f}" for i, v in enumerate(values) if v is not None)
    failed = "".join(f'<circle class="failed" cx="{(i + 0.5) * step:.1f}" cy="{height - 2}" r="1.5"/>'
                     for i, v in enumerate(values) if v is None)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="spark" viewBox="0 0 {width} {height}" width="{width}" '
            f'height="{height}" aria-hidden="true"><polyline class="line" points="{line}"/>{failed}</svg>')


def _point(point: Point, x: float, y_of, bottom: float) -> str:
    title = f"<title>{_e(point.title)}</title>"
    if point.value is None:
        shape = (f'<path class="night failed" d="M{x - 4:.1f},{bottom - 8:.1f}l8,8m0,-8l-8,8">{title}</path>')
    else:
        y = y_of(point.value)
        whisker = ""
        if point.low is not None and point.high is not None and math.isfinite(point.low) \
                and math.isfinite(point.high) and point.low < point.high:
            whisker = f'<line class="interval" x1="{x:.1f}" x2="{x:.1f}" y1="{y_of(point.high):.1f}" y2="{y_of(point.low):.1f}"/>'
        shape = f'{whisker}<circle class="night v-{_e(point.kind)}" cx="{x:.1f}" cy="{y:.1f}" r="3.5">{title}</circle>'
    return f'<a href="{_e(point.href)}">{shape}</a>' if point.href else shape


def _padded(values: Sequence[float]) -> tuple[float, float]:
    """The axis's ends: the values' range with a margin (a flat or empty series gets one too)."""
    if not values:
        return 0.0, 1.0
    low, high = min(values), max(values)
    pad = (high - low) * 0.08 or abs(high) * 0.05 or 1.0
    return low - pad, high + pad


def _ticks(low: float, high: float, count: int = 4) -> list[float]:
    """Round values between ``low`` and ``high``, about ``count`` of them."""
    rough = (high - low) / count
    magnitude = 10 ** math.floor(math.log10(rough))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= rough)
    first = math.ceil(low / step) * step
    return [first + i * step for i in range(int((high - first) / step) + 1)]


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)
