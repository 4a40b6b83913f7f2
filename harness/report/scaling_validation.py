"""The scaling model (:mod:`harness.report.scaling_model`) against the study's own figures: fed what
the study states for one node of 4 GPUs, the published speeds of its network and the published
cost of decoding on an A100 (:mod:`harness.report.study_inputs`), it predicts E_G on 8 ... 1,024
GPUs, beside every E_G the study's text gives (``published-aach2023.json``).

    python -m harness.report.scaling_validation                  the study
    python -m harness.report.scaling_validation --results R.json [--intra C.json]
                                                                 this machine's cells (scaling_check)

Two figures the text does not give are fitted, each to one published point:

- **the wait for the slowest rank**: what fixed-duration delays cost a rank per step on average
  (:mod:`harness.report.stragglers`; the text gives no per-step spread), to ResNet50 with DALI
  decoding on the CPU at 1,024 GPUs (E_G 0.76). Its two stated values at 1,024 GPUs fix only the
  wait there, not how long each delay lasts: the prediction takes the rare-delay limit (each delay
  long, at most one rank delayed in a step), and the band reaches the shortest delay that causes
  the same wait at 1,024 GPUs.
- **the file system**: the images per second the shared file system serves the native loader (the
  text gives no speed for it), to Horovod with the native loader at 128 GPUs (E_G 0.5); the loader
  prefetches, so the step is the larger of the rest of the step and the serving time.

The tally (:mod:`harness.report.scaling_tally`) marks every other stated value in-sample (it chose
the form, restates a fitted value or follows from one) or independent, judges bounds on the band
and sets two null models beside the full one (the fitted terms alone; the file system alone), each
fitted to the same points. Out of sample, other studies are predicted from their own hardware and
workload with nothing refitted (:mod:`harness.report.scaling_other_studies`); their errors and the
study's independent ones are the only ones set against the goal (median |error| <= 0.05 E_G, none
over 0.10).

Leave-one-out: each fitted point is predicted by the parameter fitted (least squares) to every
other stated value it bears on instead (in-sample values among them); one with no other such
value says so.
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
from harness.report.scaling_model import (STUDY_GPUS, TERMS, Prediction, added_seconds, corners, lost_efficiency,
                                          predict, step_s)
from harness.report.scaling_other_studies import OutOfSample, not_predicted_rows, out_of_sample_rows, predict_all
from harness.report.scaling_other_studies import load as load_other_studies
from harness.report.scaling_tally import IN_SAMPLE, INDEPENDENT, Row, Tally, judge_bound, role_of
from harness.report.stragglers import RankDelay, delays_with_wait
from harness.report.study_inputs import (GPU_DECODE, GPUS_PER_NODE, HDR_PER_GPU, NETWORK, NO_COMMUNICATION, NVLINK,
                                         TERM_SOURCES, study_cell)
from harness.report.tables import format_table

PUBLISHED = Path(__file__).resolve().with_name("published-aach2023.json")
DELAY_POINT = {"model": "resnet50", "loader": "dali-cpu", "frameworks": ["ddp", "horovod"], "gpus": 1024}
FILE_SYSTEM_POINT = {"model": "resnet50", "loader": "native", "frameworks": ["horovod"], "gpus": 128}
SHARE_GPUS = (4, 64, 1024)
SHARE_CELLS = (("resnet50", "dali-cpu"), ("resnet50", "dali-gpu"), ("resnet152", "dali-cpu"))
GROWING_TERMS = ("exposed communication", "wait for the slowest rank", "GPU decoding", "file system")
"""The terms of a step that can grow with G (the others every G pays alike)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class TermSet:
    """Which of the terms that grow with G a model holds (compute and the file system it always has)."""

    name: str
    wait: bool = True
    decoding: bool = True
    communication: bool = True


FULL = TermSet(name="full")
NULL_MODELS = (TermSet(name="null: fitted terms only", decoding=False, communication=False),
               TermSet(name="null: file system only", wait=False, decoding=False, communication=False))
"""The null models shown beside the full one: the fewest terms that reproduce the fitted points
(the wait and the file system, both fitted; no published communication, no published decoding),
and the file system alone (it reproduces only the native loader's point)."""


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
    terms: TermSet = FULL

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


def evaluated_at(point: Mapping) -> list[tuple[str, int]]:
    """The (loader, GPUs) a statement speaks of: a range at each of the study's GPU counts in it;
    "dali" (CPU or GPU decoding) as the published file's ``judged_with`` says (the quote's reading)."""
    loaders = point.get("judged_with") or [point["loader"]]
    if point.get("gpus"):
        return [(loader, point["gpus"]) for loader in loaders]
    low, high = point["gpus_range"]
    return [(loader, gpus) for loader in loaders for gpus in STUDY_GPUS if low <= gpus <= high]


def predicted(point: Mapping, fitted: Fitted, at: tuple[str, int] | None = None) -> Prediction:
    """The model's E_G for one of the study's statements (at one of its (loader, GPUs), by default
    its loader at its largest GPU count)."""
    loader, gpus = at or (point["loader"], _gpus(point))
    terms = fitted.terms
    delay, others = fitted.delays if terms.wait else (RankDelay(), ())
    native = loader == "native"
    if native and fitted.images_per_s is None:
        raise ValueError("the file system was not fitted")
    cell = study_cell(point["model"], _framework(point), loader, delay, others, decoding=terms.decoding)
    network = NETWORK if terms.communication else NO_COMMUNICATION
    return predict(cell, network, [gpus], fs_bandwidth=fitted.images_per_s if native else None,
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


def fit(published: Mapping, *, leave_out: Mapping | None = None, terms: TermSet = FULL) -> Fitted:
    """The two figures, each fitted to its one published point; with ``leave_out``, instead to
    every other stated value it bears on (the delay: the DALI points; the file system: the native
    loader's), that point left out. A model without the wait (``terms``) fits only the file system."""
    values = stated_values(published)
    if leave_out is None:
        delay_points = [p for p in values if _matches(p, DELAY_POINT)]
        file_system_points = [p for p in values if _matches(p, FILE_SYSTEM_POINT)]
    else:
        delay_points = [p for p in values if p["loader"] != "native" and p is not leave_out]
        file_system_points = [p for p in values if p["loader"] == "native" and p is not leave_out]
    delay_gpus = max((_gpus(p) for p in delay_points), default=DELAY_POINT["gpus"])
    draft = Fitted(delay_mean_s=None, delay_gpus=delay_gpus, images_per_s=None, terms=terms)
    if delay_points and terms.wait:
        draft = dataclasses.replace(draft, delay_mean_s=_least_squares(
            lambda mean: [predicted(p, dataclasses.replace(draft, delay_mean_s=mean)).efficiency - p["value"]
                          for p in delay_points], 1e-9, 1e-2))
    if file_system_points:
        draft = dataclasses.replace(draft, images_per_s=_least_squares(
            lambda rate: [predicted(p, dataclasses.replace(draft, images_per_s=rate)).efficiency - p["value"]
                          for p in file_system_points], 1e3, 1e8))
    return draft


def _reading(point: Mapping, fitted: Fitted) -> tuple[float, tuple[float, float], list[tuple[float, float]], str | None]:
    """(most likely E_G at the statement's worst point, its band, every point's band, a bound's verdict)."""
    predictions = [predicted(point, fitted, at) for at in evaluated_at(point)]
    bands = [p.efficiency_range for p in predictions]
    if point["relation"] == "=":
        return predictions[0].efficiency, bands[0], bands, None
    worst = (min if point["relation"] == ">" else max)(predictions, key=lambda p: p.efficiency)
    return worst.efficiency, worst.efficiency_range, bands, judge_bound(point["relation"], point["value"], bands)


def validate(published: Mapping, fitted: Fitted, nulls: Sequence[Fitted] | None = None) -> Tally:
    """The tally: every statement the model speaks to, with its role, the full model's reading and
    each null model's (each fitted to the same points as the full model)."""
    if nulls is None:
        nulls = [fit(published, terms=terms) for terms in NULL_MODELS]
    rows = []
    for point in modelled_points(published):
        role, why = role_of(point, (DELAY_POINT, FILE_SYSTEM_POINT))
        efficiency, band, _, outcome = _reading(point, fitted)
        readings = {null.terms.name: _reading(point, null) for null in nulls}
        rows.append(Row(point=point, role=role, why=why, efficiency=efficiency, band=band, outcome=outcome,
                        nulls={name: (r[0], r[1]) for name, r in readings.items()},
                        null_outcomes={name: r[3] for name, r in readings.items() if r[3] is not None}))
    return Tally(rows=tuple(rows))


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
    """Each fitted point predicted by the parameters fitted to the other stated values (in-sample
    ones among them: a leave-one-out error is not an independent test)."""
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


def _band(band: tuple[float, float]) -> str:
    return f"[{band[0]:.2f}, {band[1]:.2f}]"


def validation_rows(tally: Tally) -> list[list[str]]:
    """The tally table: each statement's role, the full model beside each null model."""
    names = [terms.name for terms in NULL_MODELS]
    rows = [["model", "loader", "framework(s)", "GPUs", "published E_G", "role", "full model [band]",
             "error / bound on the band", *names, "why (role)"]]
    for row in tally.rows:
        point = row.point
        gpus = point.get("gpus") or f"{point['gpus_range'][0]}-{point['gpus_range'][1]}"
        outcome = row.outcome if row.outcome is not None else f"{row.error:+.2f}"

        def null(name: str) -> str:
            efficiency, band = row.nulls[name]
            verdict = row.null_outcomes.get(name)
            return f"{efficiency:.2f} {_band(band)} " + (verdict if verdict else f"{row.null_error(name):+.2f}")
        rows.append([point["model"], point["loader"], ", ".join(point.get("frameworks") or ["-"]), str(gpus),
                     f"{point['relation']} {point['value']}", row.role, f"{row.efficiency:.2f} {_band(row.band)}",
                     outcome, *(null(name) for name in names), row.why])
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


GOAL_MEDIAN, GOAL_WORST = 0.05, 0.10
"""The independent errors' goal (E_G units): their median |error| and the largest one."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Summary:
    tally: Tally
    out_of_sample: tuple[OutOfSample, ...]
    left_out_errors: list[float]
    """|error| of each fitted point its leave-one-out refit could predict (a refit to in-sample
    values among others: not an independent test)."""

    @property
    def independent_errors(self) -> list[float]:
        """|error| of every value nothing was fitted to or chosen by: the study's independent values
        and the other studies'."""
        return self.tally.errors(INDEPENDENT) + [abs(item.error) for item in self.out_of_sample]

    @property
    def median_error(self) -> float:
        return statistics.median(self.independent_errors)

    @property
    def goal_met(self) -> bool:
        errors = self.independent_errors
        return bool(errors) and self.median_error <= GOAL_MEDIAN and max(errors) <= GOAL_WORST

    def __str__(self) -> str:
        errors = self.independent_errors
        return (f"{self.tally}. Independent errors (this study's {len(self.tally.errors(INDEPENDENT))} and "
                f"{len(self.out_of_sample)} other studies'): median |error| {self.median_error:.3f}, worst "
                f"{max(errors):.3f} (E_G units; the goal: median <= {GOAL_MEDIAN}, none over {GOAL_WORST}: "
                f"{'met' if self.goal_met else 'not met'}); in-sample |error| "
                + (", ".join(f"{e:.3f}" for e in self.tally.errors(IN_SAMPLE)) or "none")
                + "; leave-one-out |error| " + (", ".join(f"{e:.3f}" for e in self.left_out_errors) or "none"))


def summarise(tally: Tally, left_out: Sequence[LeftOut], out_of_sample: Sequence[OutOfSample] = ()) -> Summary:
    return Summary(tally=tally, out_of_sample=tuple(out_of_sample),
                   left_out_errors=[abs(item.error) for item in left_out if item.error is not None])


def predict_other_studies(fitted: Fitted) -> list[OutOfSample]:
    """The other studies, each from its own inputs, with this study's fitted wait carried over."""
    return predict_all(load_other_studies(), fitted.delays[0])


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
    tally = validate(published, fitted)
    left_out = leave_one_out(published)
    others = predict_other_studies(fitted)
    print(__doc__.split("\n\n")[0].replace("\n", " "))
    print(f"within a node: {NVLINK.describe()}\nbetween nodes: {HDR_PER_GPU.describe()}")
    print(f"GPU decoding (dali-gpu): {GPU_DECODE.describe()}")
    print(fitted_line(fitted))
    print("\nEach term of the step and its source\n" + format_table(term_rows()))
    print("\nThe tally: every E_G the study states, its role, the full model beside the null models (bounds "
          "judged on each model's band)\n" + format_table(validation_rows(tally)))
    print("\nLeave-one-out: each fitted point from a fit to the others\n" + format_table(leave_one_out_rows(left_out)))
    print("\nOut of sample: other studies, each from its own hardware and workload, nothing refitted\n"
          + format_table(out_of_sample_rows(others)))
    print("\nNot predicted (inputs not found)\n" + format_table(not_predicted_rows(load_other_studies())))
    print("\nWhere the efficiency goes (DDP; most likely assumptions)\n"
          + format_table(share_rows(fitted)))
    print("\n" + str(summarise(tally, left_out, others)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
