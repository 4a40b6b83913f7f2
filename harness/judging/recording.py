"""How a cell's measurements become its baseline entry: the recording policy of ``--update-baselines``.

Pure functions of data: a cell's judged measurements (one per ``--cell-repeats``) in, the baseline entry
or the reason it is not recorded out. Writing the file is :mod:`harness.store.baselines`' job.

- A cell judged ``fail`` is not recorded unless the user accepts the regression, and a cell whose
  interval is too wide to place a band is not recorded at all (:func:`why_not_recorded`).
- Several measurements give the reference as their mean and the band as the prediction interval
  of one more measurement (:func:`harness.judging.stats.tolerance_from_repeats`), both as measured: the
  launches of one recording share a machine, and normalising them by the yardstick would add its
  own launch-to-launch noise to theirs (docs/verdicts.md, "Machine yardstick").
- The machine yardstick is stored as the measurements' mean with its launch-to-launch noise, so
  that a later run normalises only a move of the machine's speed beyond it
  (:func:`harness.judging.yardstick.beyond_noise`).
- An entry carries what rebuilds the environment it was measured in, for ``--confirm``
  (:mod:`harness.judging.confirmation`): in ``provenance`` the commit, the version of the code
  (``code``), the full package set of torch's environment (``environment``) and of the one the
  cell's ranks ran in (``rank_environment``: another runtime's own), the ranks' launch environment
  (``launch_environment``) and launcher; the stack facts are the fingerprint's. The package sets
  themselves are kept beside the baseline file (:mod:`harness.store.environments`).
"""
from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Mapping, Protocol, Sequence

from harness.judging.metrics import CELL_METRICS
from harness.judging.stats import tolerance_from_repeats
from harness.judging.yardstick import Yardstick, mean_of

if TYPE_CHECKING:
    from harness.config.cells import AccuracyCell
    from harness.judging.breakdown import CellBreakdown
    from harness.judging.stats import Estimate
    from harness.judging.verdicts import Verdict
    from harness.rank.cell import Cell


class Launch(Protocol):
    """What an entry says of the launch its figures come from (a :class:`harness.launch.runner.CellRun`)."""

    @property
    def launcher(self) -> str: ...


class Measurement(Protocol):
    """What the recording policy reads of one judged measurement of a cell: the fields it needs, not
    the session's class that holds them (:class:`harness.session.results.CellResult`, a layer above)."""

    @property
    def cell(self) -> Cell: ...
    @property
    def run(self) -> Launch: ...
    @property
    def ok(self) -> bool: ...
    @property
    def verdicts(self) -> Sequence[Verdict]: ...
    @property
    def config_hash(self) -> str: ...
    @property
    def fingerprint(self) -> dict | None: ...
    @property
    def breakdown(self) -> CellBreakdown | None: ...
    @property
    def yardstick(self) -> Yardstick | None: ...
    @property
    def cpu_wait_share(self) -> float | None: ...
    @property
    def throughput(self) -> Estimate | None: ...
    @property
    def efficiency(self) -> Estimate | None: ...
    @property
    def work(self) -> dict | None: ...
    @property
    def efficiency_source(self) -> str | None: ...


class AccuracyMeasurement(Protocol):
    """What :func:`accuracy_entry` reads of an accuracy cell's run
    (:class:`harness.session.results.AccuracyResult`)."""

    @property
    def cell(self) -> AccuracyCell: ...
    @property
    def run(self) -> Launch: ...
    @property
    def config_hash(self) -> str: ...
    @property
    def outcome(self) -> dict | None: ...


def why_not_recorded(results: Sequence[Measurement], *, accept_regressions: bool, widest: float) -> str | None:
    """Why these measurements of one cell must not replace its baseline, or ``None``."""
    regressed = [r for r in results if any(v.failed for v in r.verdicts)]
    if regressed and not accept_regressions:
        failed = "; ".join(v.message for v in regressed[0].verdicts if v.failed)
        return f"judged fail against its baseline ({failed}); --accept-regressions records it anyway"
    too_wide = too_uncertain_to_record(results, widest)
    if too_wide:
        return f"{too_wide}; measure it again on a quiet node or with a larger --measure-budget"
    return None


def too_uncertain_to_record(results: Sequence[Measurement], widest: float) -> str | None:
    """Why these measurements of a cell cannot be its baseline (a 95% interval wider than
    ``+-widest``, relative), or ``None``."""
    for result in results:
        for metric in CELL_METRICS:
            estimate = getattr(result, metric)
            if estimate is not None and estimate.half_width_rel > widest:
                waited = (f", its ranks waiting for a CPU for {result.cpu_wait_share:.0%} of the step time"
                          if result.cpu_wait_share else "")
                spread = "has no interval (too few steps)" if estimate.too_few_samples else \
                    f"+-{estimate.half_width_rel:.1%} is too uncertain"
                return f"{metric} {estimate.value:.4g} {spread} for a baseline (widest +-{widest:.1%}){waited}"
    return None


def baseline_entries(results: Sequence[Measurement], *, config: Mapping, provenance: Mapping, band_floor: float,
                     accept_regressions: bool, widest: float, use_yardstick: bool = True,
                     rank_environments: Mapping[str, str] | None = None) -> tuple[list[dict], list[str]]:
    """The entries to write for a session's ``results`` (repeats of a cell grouped into one), and a
    line for each cell not recorded, saying why. A cell with a failed launch keeps its old entry.
    ``rank_environments``: by cell id, the package set its ranks ran in (its id)."""
    by_cell: dict = {}
    for result in results:
        by_cell.setdefault(result.cell, []).append(result)
    entries, kept = [], []
    for measured in by_cell.values():
        if not all(r.ok for r in measured):
            continue
        why_not = why_not_recorded(measured, accept_regressions=accept_regressions, widest=widest)
        if why_not:
            kept.append(f"{measured[0].cell.id}: {why_not}")
            continue
        entries.append(baseline_entry(measured, config=config, provenance=provenance, band_floor=band_floor,
                                      use_yardstick=use_yardstick,
                                      rank_environment=(rank_environments or {}).get(measured[0].cell.id)))
    return entries, kept


def baseline_entry(results: Sequence[Measurement], *, config: Mapping, provenance: Mapping, band_floor: float,
                   use_yardstick: bool = True, rank_environment: str | None = None) -> dict:
    """The baseline entry of one cell from its measurements (all of the same cell, all ok);
    ``rank_environment``: the id of the package set its ranks ran in, where it is known."""
    last = results[-1]
    ran_in = {"rank_environment": rank_environment} if rank_environment else {}
    entry = {"cell": last.cell.id, "metrics": {}, "bands": {}, "config_hash": last.config_hash,
             "config": dict(config), "fingerprint": last.fingerprint,
             "breakdown": last.breakdown.slowest.to_json() if last.breakdown else None,
             "provenance": {**provenance, **ran_in, "launcher": last.run.launcher, "ranks": last.cell.ranks}}
    if last.work:  # counted: every measurement of the cell did the same work, or says where it did not
        entry["work"] = last.work
    machine = baseline_yardstick([r.yardstick for r in results]) if use_yardstick else None
    if machine:
        entry["yardstick"] = machine.to_json()
    if all(r.cpu_wait_share is not None for r in results):
        entry["cpu_wait_share"] = round(statistics.fmean(r.cpu_wait_share for r in results), 4)
    for metric in CELL_METRICS:
        values = [getattr(r, metric).value for r in results if getattr(r, metric) is not None
                  and (metric == "throughput" or r.efficiency_source == "measured")]
        if not values:
            continue
        entry["metrics"][metric] = statistics.fmean(values)
        if len(values) > 1:
            lower, upper = tolerance_from_repeats(values, floor_rel=band_floor)
            entry["bands"][metric] = {"lower": round(lower, 4), "upper": round(upper, 4),
                                      "repeats": [round(v, 4) for v in values]}
    return entry


def accuracy_entry(result: AccuracyMeasurement, *, config: Mapping, provenance: Mapping) -> dict:
    """The baseline entry of an accuracy cell: its final validation accuracy."""
    return {"cell": result.cell.id, "metrics": {"accuracy": result.outcome["final_val_accuracy"]},
            "config_hash": result.config_hash, "config": dict(config),
            "provenance": {**provenance, "launcher": result.run.launcher, "ranks": result.cell.ranks}}


def baseline_yardstick(yardsticks: Sequence[Yardstick | None]) -> Yardstick | None:
    """The machine speed a baseline holds: the mean of its measurements' yardsticks, with how far
    one more launch's may stray from it (known from two measurements on), or ``None`` unless every
    measurement timed one."""
    if not yardsticks or any(y is None for y in yardsticks):
        return None
    noise = None
    if len(yardsticks) > 1:
        noise = tolerance_from_repeats([y.seconds for y in yardsticks], floor_rel=0.0)[1]
    return mean_of(yardsticks, noise=noise)
