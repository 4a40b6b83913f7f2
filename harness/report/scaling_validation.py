"""The scaling model (:mod:`harness.report.scaling_model`) against the study's own figures: fed what
the study states for one node of 4 GPUs, the published speeds of its network and the published
cost of decoding on an A100 (:mod:`harness.report.study_inputs`), it predicts E_G on 8 ... 1,024
GPUs, beside every E_G the study's text gives (``published-aach2023.json``).

    python -m harness.report.scaling_validation                  the study
    python -m harness.report.scaling_validation --results R.json [--intra C.json]
                                                                 this machine's cells (scaling_check)

Two figures the text does not give are fitted, each to one published point; every other point
is a prediction:

- **the wait for the slowest rank**: what fixed-duration delays cost a rank per step on average
  (:mod:`harness.report.stragglers`; the text gives no per-step spread), to ResNet50 with DALI
  decoding on the CPU at 1,024 GPUs (E_G 0.76). Its two stated values at 1,024 GPUs fix only the
  wait there, not how long each delay lasts: the prediction takes the rare-delay limit (each delay
  long, at most one rank delayed in a step), and the band reaches the shortest delay that causes
  the same wait at 1,024 GPUs.
- **the file system**: the images per second the shared GPFS serves the native loader (the text
  gives no speed for it), to Horovod with the native loader at 128 GPUs (E_G 0.5).

Leave-one-out: each fitted point is predicted by the parameter fitted (least squares) to every
other stated value it bears on instead; one with no other such value says so.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Callable, Mapping, Sequence

from harness.rank.frameworks import FRAMEWORKS
from harness.report.projection import STUDY_RUNTIMES
from harness.report.scaling_model import (TERMS, Prediction, added_seconds, corners, lost_efficiency, predict,
                                          step_s)
from harness.report.stragglers import RankDelay, delays_with_wait
from harness.report.study_inputs import (GPU_DECODE, GPUS_PER_NODE, HDR_PER_GPU, NETWORK, NVLINK, TERM_SOURCES,
                                         study_cell)
from harness.report.tables import format_table

PUBLISHED = Path(__file__).resolve().with_name("published-aach2023.json")
DELAY_POINT = {"model": "resnet50", "loader": "dali-cpu", "frameworks": ["ddp", "horovod"], "gpus": 1024}
FILE_SYSTEM_POINT = {"model": "resnet50", "loader": "native", "frameworks": ["horovod"], "gpus": 128}
SHARE_GPUS = (4, 64, 1024)
SHARE_CELLS = (("resnet50", "dali-cpu"), ("resnet50", "dali-gpu"), ("resnet152", "dali-cpu"))
GROWING_TERMS = ("exposed communication", "wait for the slowest rank", "GPU decoding", "file system")
"""The terms of a step that can grow with G (the others every G pays alike)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Fitted:
    """The two figures the study's text does not give; None where no stated value was left to fit it to."""

    delay_mean_s: float | None
    """What fixed-duration delays cost a rank per step on average (the rare-delay limit)."""
    delay_gpus: int
    """The GPU count of the points the delay was fitted at: the band's shortest delay causes the same
    wait there."""
    images_per_s: float | None
    """What the shared file system serves all GPUs of a native-loader run."""

    @property
    def delays(self) -> tuple[RankDelay, tuple[RankDelay, ...]]:
        """(the prediction's delay, the others the band spans)."""
        rarest = RankDelay(mean_s=self.delay_mean_s or 0.0)
        if not self.delay_mean_s:
            return rarest, ()
        wait = self.delay_mean_s * (self.delay_gpus - GPUS_PER_NODE)
        shortest, _ = delays_with_wait(wait, ranks=self.delay_gpus, reference_ranks=GPUS_PER_NODE)
        return rarest, (shortest,)


def _matches(point: Mapping, where: Mapping) -> bool:
    return all(point.get(key) == value for key, value in where.items())


def _gpus(point: Mapping) -> int:
    return point.get("gpus") or point["gpus_range"][1]


def _framework(point: Mapping) -> str:
    return (point.get("frameworks") or ["ddp"])[0]


def modelled_points(published: Mapping) -> list[Mapping]:
    """The study's E_G statements the model can speak to: a model with a one-node runtime, no
    conflicting statement, a framework whose gradients go in ring all-reduces."""
    return [point for point in published["efficiency"]
            if point["model"] in {r.model for r in STUDY_RUNTIMES} and not point.get("conflicts")
            and FRAMEWORKS.entry(_framework(point)).fused_all_reduce_bytes is not None]


def predicted(point: Mapping, fitted: Fitted) -> Prediction:
    """The model's E_G for one of the study's statements."""
    delay, others = fitted.delays
    native = point["loader"] == "native"
    if native and fitted.images_per_s is None:
        raise ValueError("the file system was not fitted")
    cell = study_cell(point["model"], _framework(point), point["loader"], delay, others)
    return predict(cell, NETWORK, [_gpus(point)], fs_bandwidth=fitted.images_per_s if native else None,
                   image_bytes=1.0)[0]


def _least_squares(errors: Callable[[float], list[float]], low: float, high: float) -> float:
    """The parameter in [low, high] whose errors have the least sum of squares: a geometric grid,
    then a golden-section search around its best point."""
    def cost(value: float) -> float:
        return sum(e * e for e in errors(value))
    grid = [low * (high / low) ** (i / 200) for i in range(201)]
    best = min(range(len(grid)), key=lambda i: cost(grid[i]))
    a, b = math.log(grid[max(0, best - 1)]), math.log(grid[min(len(grid) - 1, best + 1)])
    ratio = (math.sqrt(5) - 1) / 2
    for _ in range(80):
        c, d = b - ratio * (b - a), a + ratio * (b - a)
        if cost(math.exp(c)) < cost(math.exp(d)):
            b = d
        else:
            a = c
    return math.exp((a + b) / 2)


def stated_values(published: Mapping) -> list[Mapping]:
    return [point for point in modelled_points(published) if point["relation"] == "="]


def fit(published: Mapping, *, leave_out: Mapping | None = None) -> Fitted:
    """The two figures, each fitted to its one published point; with ``leave_out``, instead to
    every other stated value it bears on (the delay: the DALI points; the file system: the native
    loader's), that point left out."""
    values = stated_values(published)
    if leave_out is None:
        delay_points = [p for p in values if _matches(p, DELAY_POINT)]
        file_system_points = [p for p in values if _matches(p, FILE_SYSTEM_POINT)]
    else:
        delay_points = [p for p in values if p["loader"] != "native" and p is not leave_out]
        file_system_points = [p for p in values if p["loader"] == "native" and p is not leave_out]
    delay_gpus = max((_gpus(p) for p in delay_points), default=DELAY_POINT["gpus"])
    draft = Fitted(delay_mean_s=None, delay_gpus=delay_gpus, images_per_s=None)
    if delay_points:
        draft = dataclasses.replace(draft, delay_mean_s=_least_squares(
            lambda mean: [predicted(p, dataclasses.replace(draft, delay_mean_s=mean)).efficiency - p["value"]
                          for p in delay_points], 1e-9, 1e-2))
    if file_system_points:
        draft = dataclasses.replace(draft, images_per_s=_least_squares(
            lambda rate: [predicted(p, dataclasses.replace(draft, images_per_s=rate)).efficiency - p["value"]
                          for p in file_system_points], 1e3, 1e8))
    return draft


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Check:
    point: Mapping
    framework: str
    efficiency: float
    band: tuple[float, float]
    fitted: bool

    @property
    def error(self) -> float | None:
        """Predicted minus published E_G, for a point the text states as a value."""
        return self.efficiency - self.point["value"] if self.point["relation"] == "=" else None

    @property
    def holds(self) -> bool | None:
        """Whether the prediction satisfies a bound the text states (``<``, ``>``)."""
        relation, value = self.point["relation"], self.point["value"]
        return {"<": self.efficiency < value, ">": self.efficiency > value}.get(relation)


def validate(published: Mapping, fitted: Fitted) -> list[Check]:
    checks = []
    for point in modelled_points(published):
        prediction = predicted(point, fitted)
        checks.append(Check(point=point, framework=_framework(point), efficiency=prediction.efficiency,
                            band=prediction.efficiency_range,
                            fitted=_matches(point, DELAY_POINT) or _matches(point, FILE_SYSTEM_POINT)))
    return checks


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class LeftOut:
    point: Mapping
    fitted: Fitted
    efficiency: float | None
    """None: no other stated value bears on the parameter this point was fitted to."""

    @property
    def error(self) -> float | None:
        return None if self.efficiency is None else self.efficiency - self.point["value"]


def leave_one_out(published: Mapping) -> list[LeftOut]:
    """Each fitted point predicted by the parameters fitted to the other stated values."""
    out = []
    for point in (p for p in stated_values(published) if _matches(p, DELAY_POINT) or _matches(p, FILE_SYSTEM_POINT)):
        fitted = fit(published, leave_out=point)
        native = point["loader"] == "native"
        missing = fitted.images_per_s is None if native else fitted.delay_mean_s is None
        out.append(LeftOut(point=point, fitted=fitted,
                           efficiency=None if missing else predicted(point, fitted).efficiency))
    return out


def _point_label(point: Mapping) -> str:
    gpus = point.get("gpus") or "{}-{}".format(*point["gpus_range"])
    return f"{point['model']} {point['loader']} {'/'.join(point.get('frameworks') or ['-'])} at {gpus}"


def validation_rows(checks: Sequence[Check]) -> list[list[str]]:
    rows = [["model", "loader", "framework(s)", "GPUs", "published E_G", "predicted E_G", "band", "error / holds",
             "where"]]
    for check in checks:
        point = check.point
        gpus = point.get("gpus") or f"{point['gpus_range'][0]}-{point['gpus_range'][1]}"
        outcome = ("fitted" if check.fitted else f"{check.error:+.2f}" if check.error is not None
                   else "holds" if check.holds else "does not hold")
        rows.append([point["model"], point["loader"], ", ".join(point.get("frameworks") or ["-"]), str(gpus),
                     f"{point['relation']} {point['value']}", f"{check.efficiency:.2f}",
                     f"[{check.band[0]:.2f}, {check.band[1]:.2f}]", outcome, point.get("where", "")])
    return rows


def leave_one_out_rows(left_out: Sequence[LeftOut]) -> list[list[str]]:
    rows = [["left out", "published E_G", "refitted to the others", "predicted E_G", "error"]]
    for item in left_out:
        native = item.point["loader"] == "native"
        refit = ("nothing: no other stated value of the native loader" if item.efficiency is None and native else
                 "nothing: no other stated value" if item.efficiency is None else
                 f"file system {item.fitted.images_per_s:,.0f} images/s" if native else
                 f"delay {item.fitted.delay_mean_s * 1e6:.1f} us a rank-step")
        rows.append([_point_label(item.point), f"{item.point['value']}", refit,
                     "-" if item.efficiency is None else f"{item.efficiency:.2f}",
                     "-" if item.error is None else f"{item.error:+.2f}"])
    return rows


def share_rows(fitted: Fitted) -> list[list[str]]:
    """Where the efficiency goes: for each of :data:`SHARE_CELLS` at :data:`SHARE_GPUS`, the
    seconds each term that grows with G adds to a step beyond one node's, and its part of 1 - E_G
    (E_G units, and its share of the loss); the terms every G pays alike (compute) lose nothing."""
    delay, others = fitted.delays
    rows = [["model", "loader", "GPUs", "E_G", "step s", *(f"{term}: +s; part of 1 - E_G" for term in GROWING_TERMS)]]
    for model, loader in SHARE_CELLS:
        cell = study_cell(model, "ddp", loader, delay, others)
        for gpus in SHARE_GPUS:
            seconds = added_seconds(cell, NETWORK, gpus)
            parts = lost_efficiency(cell, NETWORK, gpus)
            lost = sum(parts.values())
            rows.append([model, loader, str(gpus), f"{1 - lost:.3f}",
                         f"{step_s(cell, NETWORK, gpus, corners(cell, NETWORK)[0]):.4f}",
                         *(f"{seconds[t]:.4f}; " + (f"{parts[t]:.3f} ({parts[t] / lost:.0%})" if lost > 1e-9
                                                     else "- (reference)") for t in GROWING_TERMS)])
    return rows


def term_rows() -> list[list[str]]:
    return [["term", "source"], *([term, TERM_SOURCES[term]] for term in TERMS)]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Summary:
    predicted_errors: list[float]
    """|error| of each stated value no parameter was fitted to."""
    left_out_errors: list[float]
    """|error| of each fitted point its leave-one-out refit could predict."""
    bounds_held: int
    bounds: int

    @property
    def median_error(self) -> float:
        return statistics.median(self.predicted_errors + self.left_out_errors)

    def __str__(self) -> str:
        def spread(errors: list[float]) -> str:
            return f"median {statistics.median(errors):.3f}, worst {max(errors):.3f}" if errors else "none"
        return (f"{len(self.predicted_errors)} stated value(s) not fitted: |error| {spread(self.predicted_errors)}; "
                f"leave-one-out, {len(self.left_out_errors)} fitted point(s) predicted: |error| "
                f"{spread(self.left_out_errors)}; all {len(self.predicted_errors) + len(self.left_out_errors)}: "
                f"median |error| {self.median_error:.3f} (E_G units); {self.bounds_held} of {self.bounds} stated "
                f"bound(s) hold")


def summarise(checks: Sequence[Check], left_out: Sequence[LeftOut]) -> Summary:
    bounds = [c.holds for c in checks if c.holds is not None]
    return Summary(predicted_errors=[abs(c.error) for c in checks if c.error is not None and not c.fitted],
                   left_out_errors=[abs(item.error) for item in left_out if item.error is not None],
                   bounds_held=sum(bounds), bounds=len(bounds))


def fitted_line(fitted: Fitted) -> str:
    delay, (shortest, *_) = fitted.delays
    wait = fitted.delay_mean_s * (fitted.delay_gpus - GPUS_PER_NODE)
    return (f"fitted: the wait for the slowest rank, {fitted.delay_mean_s * 1e6:.1f} us a rank loses per step to "
            f"fixed-duration delays, a wait of {wait * 1e3:.1f} ms "
            f"at {fitted.delay_gpus} GPUs (to {_point_label(DELAY_POINT)} GPUs = 0.76; the band reaches the shortest "
            f"delay with the same wait there: {shortest.describe()}); the shared file system serves "
            f"{fitted.images_per_s:,.0f} images/s (to {_point_label(FILE_SYSTEM_POINT)} GPUs = 0.5)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.report.scaling_validation",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path,
                        help="a dlscale results.json: predict each cell from the same cell at fewer ranks instead")
    parser.add_argument("--intra", type=Path, help="with --results: all-reduce timings of this machine "
                        "(dlscale collectives JSON, nccl-tests or OSU output); without, communication counts as hidden")
    parser.add_argument("--ranks", type=int, help="ranks of an OSU timings file (it does not say)")
    args = parser.parse_args(argv)
    if args.results:
        from harness.report.scaling_check import main as check_main
        return check_main(args.results, args.intra, args.ranks)
    published = json.loads(PUBLISHED.read_text())
    fitted = fit(published)
    checks = validate(published, fitted)
    left_out = leave_one_out(published)
    print(__doc__.split("\n\n")[0].replace("\n", " "))
    print(f"within a node: {NVLINK.describe()}\nbetween nodes: {HDR_PER_GPU.describe()}")
    print(f"GPU decoding (dali-gpu): {GPU_DECODE.describe()}")
    print(fitted_line(fitted))
    print("\nEach term of the step and its source\n" + format_table(term_rows()))
    print("\nAgainst every E_G the study states\n" + format_table(validation_rows(checks)))
    print("\nLeave-one-out: each fitted point from a fit to the others\n" + format_table(leave_one_out_rows(left_out)))
    print("\nWhere the efficiency goes (DDP; most likely assumptions)\n"
          + format_table(share_rows(fitted)))
    print("\n" + str(summarise(checks, left_out)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
