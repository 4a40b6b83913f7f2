"""The network a scaling model assumes, fitted from all-reduce timings: a latency and a bandwidth
per level (within a node, between nodes), each with the interval its fit allows.

A ring all-reduce of ``M`` bytes over ``G`` ranks takes

    t(M) = 2(G-1) alpha + 2(G-1)/G * M / B

(``alpha`` per hop, ``B`` the bus bandwidth nccl-tests reports), so timings at several message
sizes fit a line whose intercept gives ``alpha`` and whose slope gives ``B``. Three sources are read:

- dlscale's own collective benchmark (``bench_tests/benchmarks/test_collectives.py``, a JSON file
  of ``kind: "collectives"``);
- nccl-tests' ``all_reduce_perf`` output (its out-of-place ``time`` column, in microseconds; the
  rank count from its ``#  Rank`` lines);
- OSU's ``osu_allreduce`` output (``size`` and ``Avg Latency(us)``; say the rank count, it does not).
"""
from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path
from typing import Mapping, Sequence

from harness.report.collectives import bus_factor

CONFIDENCE = 0.95


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Link:
    latency_s: float
    """Seconds per hop of a ring step (alpha)."""
    bandwidth: float
    """Bus bandwidth, bytes per second: what each rank's link carries in a ring all-reduce."""
    latency_range: tuple[float, float]
    bandwidth_range: tuple[float, float]
    source: str

    @classmethod
    def stated(cls, latency_s: float, bandwidth: float, source: str, *, spread: float = 0.0) -> "Link":
        """A link as a site or a datasheet states it; ``spread`` widens both ranges by that share."""
        return cls(latency_s=latency_s, bandwidth=bandwidth, source=source,
                   latency_range=(latency_s * (1 - spread), latency_s * (1 + spread)),
                   bandwidth_range=(bandwidth * (1 - spread), bandwidth * (1 + spread)))

    def scaled(self, factor: float) -> "Link":
        """The same link ``factor`` times as fast (a what-if)."""
        low, high = self.bandwidth_range
        return dataclasses.replace(self, bandwidth=self.bandwidth * factor,
                                   bandwidth_range=(low * factor, high * factor),
                                   source=f"{self.source}, bandwidth x{factor:g}")

    def describe(self) -> str:
        return (f"{self.bandwidth / 1e9:.3g} GB/s [{self.bandwidth_range[0] / 1e9:.3g}, "
                f"{self.bandwidth_range[1] / 1e9:.3g}], latency {self.latency_s * 1e6:.3g} us "
                f"[{self.latency_range[0] * 1e6:.3g}, {self.latency_range[1] * 1e6:.3g}] ({self.source})")


def fit_link(points: Sequence[tuple[float, float]], ranks: int, source: str) -> Link:
    """The link that ring all-reduces of ``(bytes, seconds)`` over ``ranks`` ranks imply, with
    95% intervals from the least-squares fit (a negative intercept is a latency of 0)."""
    if ranks < 2:
        raise ValueError(f"{source}: all-reduce timings over {ranks} rank(s) say nothing about a link")
    if len({size for size, _ in points}) < 3:
        raise ValueError(f"{source}: a link needs timings at 3 or more message sizes, got {len(points)}")
    from scipy import stats  # here, not at import: the pytest plugin loads this module in every session

    fit = stats.linregress([float(size) for size, _ in points], [float(time) for _, time in points])
    t = stats.t.ppf((1 + CONFIDENCE) / 2, len(points) - 2)
    hops, bus = 2 * (ranks - 1), bus_factor(ranks)

    def bandwidth(slope: float) -> float:
        return bus / slope if slope > 0 else math.inf

    if fit.slope <= 0:
        raise ValueError(f"{source}: time does not grow with message size; no bandwidth can be fitted")
    slope_low, slope_high = fit.slope - t * fit.stderr, fit.slope + t * fit.stderr
    intercept_low = fit.intercept - t * fit.intercept_stderr
    intercept_high = fit.intercept + t * fit.intercept_stderr
    return Link(latency_s=max(0.0, fit.intercept) / hops, bandwidth=bandwidth(fit.slope), source=source,
                latency_range=(max(0.0, intercept_low) / hops, max(0.0, intercept_high) / hops),
                bandwidth_range=(bandwidth(slope_high), bandwidth(slope_low)))


def read_link(path: Path | str, ranks: int | None = None) -> Link:
    """The link fitted from a timings file of any of the three formats (detected)."""
    path = Path(path)
    text = path.read_text()
    if text.lstrip().startswith("{"):
        data = json.loads(text)
        if data.get("kind") != "collectives":
            raise ValueError(f"{path}: a JSON file here must be dlscale's collectives results (kind 'collectives')")
        return collectives_link(data, ranks, name=path.name)
    if "OSU" in text and "Allreduce" in text:
        if ranks is None:
            raise ValueError(f"{path}: OSU output does not say how many ranks ran; give the count")
        return fit_link(_timings(text, 1), ranks, f"{path.name}: osu_allreduce")
    if "all_reduce_perf" in text or re.search(r"^#\s+size\s+count", text, re.MULTILINE):
        found = len(re.findall(r"^#\s+Rank\s+\d+", text, re.MULTILINE))
        return fit_link(_timings(text, 5), ranks or found, f"{path.name}: nccl-tests all_reduce_perf")
    raise ValueError(f"{path}: not dlscale collectives JSON, nccl-tests all_reduce_perf or osu_allreduce output")


def collectives_link(data: Mapping, ranks: int | None = None, *, name: str = "collectives") -> Link:
    """The link dlscale's collective benchmark results (``kind: "collectives"``) imply."""
    points = [(row["bytes"], row["time_s"]) for row in data["results"]]
    return fit_link(points, ranks or int(data["ranks"]), f"{name}: dlscale collectives, {data.get('backend', '?')}")


def _timings(text: str, time_column: int) -> list[tuple[float, float]]:
    """(bytes, seconds) from a tool's table rows: the size first, the time in microseconds in
    ``time_column`` (nccl-tests: size count type redop root time ...; OSU: size latency)."""
    points = []
    for line in text.splitlines():
        columns = line.split()
        if len(columns) > time_column and not line.lstrip().startswith("#") and columns[0].isdigit():
            points.append((float(columns[0]), float(columns[time_column]) * 1e-6))
    return points
