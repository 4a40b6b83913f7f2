"""Power self-test: how often this machine's verdicts cry wolf, and how big a slowdown they catch.

    python -m harness.selftest [--launcher torchrun] [--repeats 10] [--sizes 0.05,0.1,0.2]

Runs one small cell through a real launcher ``--baseline-runs`` times to record a baseline the way
``--update-baselines --repeat N`` does (the mean throughput, with the band
:func:`stats.tolerance_from_repeats` derives from the runs' spread), then ``--repeats`` unchanged
reruns and ``--repeats`` reruns with each injected slowdown (the ``slow`` fault of
:mod:`harness.faults`: every step of every rank takes that fraction longer). The reruns are
interleaved in a shuffled order, so that a change in the machine's load during the test falls on
every size alike. Each rerun is judged as the suite judges one launch of a cell: warm-up dropped
(:func:`stats.detect_warmup`), :func:`stats.throughput_interval`, :func:`stats.verdict` against the
baseline's band. The judgement sees only the measured step times; it is never told whether a
fault was injected.

Every rerun is judged twice, from the same launch: against the baseline normalised by the machine
yardstick (:mod:`harness.yardstick`: the suite's own judgement of a CPU cell), and raw, as measured.
Side by side they show how much of the machine's drift the yardstick takes out. With
``--neighbour-runs``, some unchanged reruns have another job competing for the cores during their
timed window, which the yardstick cannot see and the ranks' wait for a CPU
(:mod:`harness.contention`) can: a fail measured then counts as inconclusive, as in the suite.

As the suite does, a rerun the suite's judgement finds inconclusive is launched again (with no
neighbour: the burst is over) while ``--measure-budget`` allows, and its launches are pooled,
leaving out those whose ranks waited notably for a CPU. With the suite's default budget (45 s), a
20-30 s launch gets no second one.

A slowdown of ``s`` (steps ``1 + s`` times as long) lowers throughput by ``s / (1 + s)``: 20%
slower steps are 16.7% fewer images per second.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

from .cells import Cell, Workload
from .contention import NOTABLE_SHARE, contended, distrust, wait_share
from .launchers import LAUNCHERS
from .metrics import pool_uncontended, step_samples, trim_warmup
from .runner import CellRun, RunLimits, run_cell
from .stats import Estimate, Verdict, throughput_interval, tolerance_from_repeats, verdict
from .suite import DEFAULT_MEASURE_BUDGET_S, format_table
from .yardstick import Yardstick, from_records, mean_of, normalise_estimate, speed_ratio

SELFTEST_CELL = Cell(framework="ddp", loader="synthetic", model="resnet50", ranks=1)
SELFTEST_WORKLOAD = Workload(image_size=32, batch_size=8, warmup_steps=3, steps=30, num_workers=1, num_classes=10)
"""The suite's own tiny test workload with enough timed steps for an interval."""
DEFAULT_SIZES = (0.05, 0.1, 0.2)
RELIABLE = 0.9
"""Detection rate at which a slowdown counts as caught reliably."""
OUTCOMES = ("fail", "inconclusive", "pass", "faster", "error")
DEFAULT_NEIGHBOUR = (8.0, 8.0)
JUDGINGS = ("yardstick", "raw")
"""Normalised to the baseline's machine speed (the suite's judgement of a CPU cell), or as measured."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SelftestConfig:
    launcher: str = "torchrun"
    repeats: int = 10
    """Judged reruns per slowdown size, and unchanged."""
    baseline_runs: int = 10
    """Unchanged runs the baseline (mean and band) is made of."""
    sizes: tuple[float, ...] = DEFAULT_SIZES
    """Injected slowdowns, as fractions of each step's duration."""
    cell: Cell = SELFTEST_CELL
    workload: Workload = SELFTEST_WORKLOAD
    band_floor: float = 0.05
    """Narrowest band the baseline may have (the suite's ``--repeat`` default)."""
    device: str = "cpu"
    threads_per_rank: int | None = 1
    """CPU threads per rank; ``None``: the worker's default (the node's cores shared among its ranks).
    One by default: on a shared node, a step whose threads must all be scheduled together suffers
    from other load far more than a one-thread step (on a loaded 2-core machine: 1-3 s per step
    with 2 threads, 0.23 s with 1)."""
    workdir: Path = Path("results") / "selftest"
    seed: int = 0
    """Seed of the order the reruns are interleaved in."""
    limits: RunLimits = RunLimits(timeout_s=300.0, heartbeat_s=120.0)
    neighbour_runs: int = 0
    """Unchanged reruns during which a neighbour's job keeps every core busy for a while."""
    neighbour: tuple[float, float] = DEFAULT_NEIGHBOUR
    """When the neighbour's job starts, in seconds after rank 0 begins its timed steps, and for how
    long it runs: by default a burst in the second half of the default cell's window, which the
    yardstick timed before and after the window cannot see. A burst at the window's start would
    be dropped with the warm-up (:func:`stats.detect_warmup` cuts a slow leading stretch, up to half
    the steps) and so test nothing."""
    measure_budget: float = DEFAULT_MEASURE_BUDGET_S
    """Seconds one rerun may take in all, as the suite's ``--measure-budget``: an inconclusive rerun
    is launched again while its launches so far plus one more fit."""

    def __post_init__(self) -> None:
        if self.repeats < 1:
            raise ValueError(f"repeats must be at least 1, got {self.repeats}")
        if self.baseline_runs < 2:
            raise ValueError(f"a baseline band needs at least 2 runs, got {self.baseline_runs}")
        if self.neighbour_runs < 0 or len(self.neighbour) != 2 or min(self.neighbour) < 0:
            raise ValueError(f"neighbour runs must be >= 0 and the neighbour (start, duration) seconds >= 0, got "
                             f"{self.neighbour_runs} and {list(self.neighbour)}")
        if self.measure_budget < 0:
            raise ValueError(f"the measuring budget must be >= 0 seconds, got {self.measure_budget}")
        if any(not size > 0 for size in self.sizes):
            raise ValueError(f"slowdown sizes must be positive fractions (0.1 for 10%), got {list(self.sizes)}")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Measurement:
    slowdown: float
    """Injected slowdown (0: unchanged)."""
    neighbour: bool = False
    """Whether a neighbour's job competed for the cores during the launch."""
    status: str
    """The launch's status: "ok", "failed", "timeout" or "hung"."""
    throughput: Estimate | None
    yardstick: Yardstick | None = None
    cpu_wait_share: float | None = None
    """Share of the timed steps the rank's threads waited for a CPU (:mod:`harness.contention`)."""
    warmup_dropped: int = 0
    launches: int = 1
    """Launches pooled into this measurement: more than one when a rerun was measured again."""
    contended_launches: int = 0
    """Launches left out of the pool because their ranks waited notably for a CPU."""
    wall_s: float = 0.0
    error: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Judged:
    measurement: Measurement
    verdicts: dict[str, Verdict]
    """By judging (:data:`JUDGINGS`); empty when the launch failed."""
    speed: float | None = None
    """The machine's speed at this rerun relative to the baseline's, by the yardstick."""

    def outcome(self, judging: str) -> str:
        found = self.verdicts.get(judging)
        return found.kind if found else "error"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SizeRow:
    slowdown: float
    counts: dict[str, int]
    neighbour: bool = False

    @property
    def runs(self) -> int:
        return sum(self.counts.values())

    @property
    def fail_rate(self) -> float:
        """Fails over the runs that completed: the detection rate, or for 0 the false-alarm rate."""
        judged = self.runs - self.counts["error"]
        return self.counts["fail"] / judged if judged else float("nan")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Reference:
    """What a baseline recorded from the self-test's baseline runs holds, for one judging."""

    value: float
    band: tuple[float, float]
    runs: tuple[float, ...]
    """The baseline runs' throughputs as this judging sees them."""


@dataclasses.dataclass(kw_only=True)
class SelftestReport:
    config: SelftestConfig
    baseline: list[Measurement]
    references: dict[str, Reference]
    """By judging; "yardstick" only when every baseline run timed the yardstick."""
    baseline_wait: float | None = None
    """The baseline runs' mean share of the timed steps spent waiting for a CPU."""
    judged: list[Judged]
    wall_s: float
    load: tuple[float, float] | None = None
    """The machine's 1-minute load average when the self-test started and ended."""

    @property
    def judging(self) -> str:
        """The suite's own judgement: normalised by the yardstick where there is one."""
        return next(j for j in JUDGINGS if j in self.references)

    def rows(self, judging: str | None = None) -> list[SizeRow]:
        judging = judging or self.judging
        rows = []
        for size, neighbour in conditions(self.config):
            outcomes = [j.outcome(judging) for j in self.judged
                        if (j.measurement.slowdown, j.measurement.neighbour) == (size, neighbour)]
            rows.append(SizeRow(slowdown=size, neighbour=neighbour,
                                counts={kind: outcomes.count(kind) for kind in OUTCOMES}))
        return rows

    def minimum_detected(self, rate: float = RELIABLE, judging: str | None = None) -> float | None:
        """Smallest injected slowdown failed in at least ``rate`` of its runs (and every larger one)."""
        found = None
        for row in sorted((r for r in self.rows(judging) if not r.neighbour), key=lambda r: -r.slowdown):
            if row.slowdown == 0 or not row.fail_rate >= rate:
                break
            found = row.slowdown
        return found

    def false_alarms(self, judging: str | None = None) -> int:
        return self.rows(judging)[0].counts["fail"]


# --- judging one run ------------------------------------------------------------------------------


def measure(records: list[dict], seed: int = 0) -> tuple[Estimate, int]:
    """Throughput interval of one launch as the suite computes it, and the warm-up steps dropped."""
    kept, dropped = trim_warmup(records)
    return throughput_interval(*step_samples(kept), seed=seed), dropped


def pooled_measurement(runs: Sequence[CellRun], slowdown: float, neighbour: bool = False,
                       baseline_wait: float | None = None) -> Measurement:
    """One rerun's launches measured as the suite measures a cell's: each without its warm-up, the
    contended ones left out unless all were, the rest pooled into one interval."""
    wall_s = sum(run.wall_s for run in runs)
    failed = next((run for run in runs if not run.ok), None)
    if failed:
        return Measurement(slowdown=slowdown, neighbour=neighbour, status=failed.status, throughput=None,
                           launches=len(runs), wall_s=wall_s, error=failed.error)
    trimmed = [trim_warmup(run.records) for run in runs]
    records, left_out = pool_uncontended([kept for kept, _ in trimmed], baseline_wait)
    return Measurement(slowdown=slowdown, neighbour=neighbour, status="ok",
                       throughput=throughput_interval(*step_samples(records)), yardstick=from_records(records),
                       cpu_wait_share=wait_share(records), warmup_dropped=sum(dropped for _, dropped in trimmed),
                       launches=len(runs), contended_launches=left_out, wall_s=wall_s)


def judge(measurement: Measurement, references: dict[str, Reference], machine: Yardstick | None = None,
          baseline_wait: float | None = None) -> Judged:
    """Judge one rerun under every judging ``references`` holds, as the suite judges a cell:
    ``machine`` is the baseline's yardstick, ``baseline_wait`` its runs' mean share of the timed
    steps spent waiting for a CPU (a fail measured while waiting notably longer is not trusted)."""
    if measurement.throughput is None:
        return Judged(measurement=measurement, verdicts={})
    speed = speed_ratio(measurement.yardstick, machine)
    verdicts = {}
    for judging, reference in references.items():
        if judging == "yardstick" and speed is None:
            continue
        measured = (normalise_estimate(measurement.throughput, speed, measurement.yardstick.drift)
                    if judging == "yardstick" else measurement.throughput)
        verdicts[judging] = distrust(verdict(measured, reference.value, *reference.band),
                                     measurement.cpu_wait_share, baseline_wait)
    return Judged(measurement=measurement, verdicts=verdicts, speed=speed)


def baseline_reference(values: Sequence[float], floor_rel: float) -> Reference:
    """The reference (mean) and band a baseline recorded from these runs would hold."""
    return Reference(value=statistics.fmean(values), band=tolerance_from_repeats(values, floor_rel=floor_rel),
                     runs=tuple(values))


def baseline_references(baseline: Sequence[Measurement], floor_rel: float) -> tuple[dict[str, Reference],
                                                                                   Yardstick | None]:
    """The references of both judgings, and the baseline's yardstick (``None`` if a run lacks one).

    Normalised, each baseline run's throughput is brought to the runs' mean yardstick, as
    ``--update-baselines --repeat N`` stores it, so the band holds only what the yardstick leaves."""
    raw = [m.throughput.value for m in baseline]
    references = {"raw": baseline_reference(raw, floor_rel)}
    if not all(m.yardstick for m in baseline):
        return references, None
    machine = mean_of([m.yardstick for m in baseline])
    normalised = [normalise_estimate(m.throughput, speed_ratio(m.yardstick, machine)).value for m in baseline]
    return {"yardstick": baseline_reference(normalised, floor_rel), **references}, machine


# --- running --------------------------------------------------------------------------------------


def conditions(config: SelftestConfig) -> list[tuple[float, bool]]:
    """(slowdown, neighbour) of each kind of rerun, in report order."""
    return [(0.0, False), *([(0.0, True)] if config.neighbour_runs else []), *((s, False) for s in config.sizes)]


NEIGHBOUR_JOB = """
import json, sys, time
import numpy as np
progress, started = sys.argv[1], time.time()
while True:  # until rank 0 reports a timed step of this launch
    try:
        seen = json.loads(open(progress).read())
        if seen["phase"] == "timed" and seen["time"] >= started:
            break
    except (OSError, ValueError, KeyError):
        pass
    time.sleep(0.1)
matrix = np.ones((256, 256), dtype=np.float32)
source = np.ones(16 * 2**20, dtype=np.float32)
target = np.empty_like(source)
time.sleep(float(sys.argv[2]))
end = time.monotonic() + float(sys.argv[3])
while time.monotonic() < end:
    for _ in range(4):
        matrix @ matrix
    np.multiply(source, 1.0001, out=target)
"""
"""A neighbour's training-like work: compute and memory traffic, on one thread."""


@contextlib.contextmanager
def neighbour_job(progress: Path, start_s: float, duration_s: float):
    """Another job on this machine, in a session of its own as another user's job would be: one busy
    process per core for ``duration_s``, from ``start_s`` after the ``progress`` file (a rank's
    heartbeat, :class:`harness.worker.ProgressFile`) first shows a timed step."""
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    processes = [subprocess.Popen([sys.executable, "-c", NEIGHBOUR_JOB, str(progress), str(start_s), str(duration_s)],
                                  env=environment, start_new_session=True)
                 for _ in range(os.cpu_count() or 1)]
    try:
        yield
    finally:
        for process in processes:
            process.kill()
            process.wait()


def launch(config: SelftestConfig, slowdown: float, launcher=None, neighbour: bool = False) -> CellRun:
    """One real launch of the self-test cell, slowed by ``slowdown`` (0: unchanged), with a
    neighbour's job competing for the cores if ``neighbour``."""
    launcher = launcher or LAUNCHERS.create(config.launcher)
    extra: dict = {"device": config.device}
    if config.threads_per_rank:
        extra["threads_per_rank"] = config.threads_per_rank
    if slowdown:
        extra["fault"] = {"kind": "slow", "fraction": slowdown}
    progress = config.workdir / config.cell.id / "progress-rank0.json"  # where run_cell's rank 0 reports
    with neighbour_job(progress, *config.neighbour) if neighbour else contextlib.nullcontext():
        return run_cell(config.cell, config.workload, launcher, workdir=config.workdir, limits=config.limits,
                        spec_extra=extra)


def judged_rerun(launch_once: Callable[[bool], CellRun], judge_measurement: Callable[[Measurement], Judged],
                 judging: str, budget_s: float, slowdown: float, neighbour: bool = False,
                 baseline_wait: float | None = None) -> Judged:
    """Launch one rerun (``launch_once(with_neighbour)``), and launch it again, with no neighbour,
    while ``judging`` finds it inconclusive and ``budget_s`` allows one more launch, as the suite
    measures a cell; judged on the pooled launches."""
    runs: list[CellRun] = []
    while True:
        runs.append(launch_once(neighbour and not runs))
        judged = judge_measurement(pooled_measurement(runs, slowdown, neighbour, baseline_wait))
        if (not runs[-1].ok or judged.outcome(judging) != "inconclusive"
                or judged.measurement.wall_s + runs[-1].wall_s > budget_s):
            return judged


def run_selftest(config: SelftestConfig, on_progress: Callable[[str], None] | None = None) -> SelftestReport:
    """Record the baseline, then the interleaved reruns, judging each; raises if the baseline fails."""
    launcher = LAUNCHERS.create(config.launcher)
    reason = launcher.unavailable_reason()
    if reason:
        raise RuntimeError(f"launcher {config.launcher} is not usable: {reason}")
    say = on_progress or (lambda line: None)
    started = time.monotonic()
    load_before = os.getloadavg()[0]
    baseline = []
    for index in range(config.baseline_runs):
        measurement = pooled_measurement([launch(config, 0.0, launcher)], 0.0)
        if measurement.throughput is None:
            raise RuntimeError(f"baseline run {index + 1} {measurement.status}:\n{measurement.error}")
        baseline.append(measurement)
        say(f"baseline {index + 1}/{config.baseline_runs}: {_interval(measurement.throughput)} img/s "
            f"({measurement.wall_s:.0f} s)")
    references, machine = baseline_references(baseline, config.band_floor)
    waits = [m.cpu_wait_share for m in baseline]
    baseline_wait = statistics.fmean(waits) if None not in waits else None
    for judging, reference in references.items():
        say(f"baseline ({judging}) {reference.value:.2f} img/s, band {reference.band[0]:+.1%} / {reference.band[1]:+.1%}")

    order = [(size, False) for size in (0.0, *config.sizes) for _ in range(config.repeats)]
    order += [(0.0, True)] * config.neighbour_runs
    random.Random(config.seed).shuffle(order)
    suite_judging = next(j for j in JUDGINGS if j in references)
    judged = []
    for index, (size, neighbour) in enumerate(order):
        result = judged_rerun(lambda with_neighbour: launch(config, size, launcher, with_neighbour),
                              lambda measurement: judge(measurement, references, machine, baseline_wait),
                              suite_judging, config.measure_budget, size, neighbour, baseline_wait)
        judged.append(result)
        estimate = result.measurement.throughput
        outcomes = ", ".join(f"{judging} {result.outcome(judging)}" for judging in references)
        conditions_seen = (f", machine {result.speed - 1:+.1%} ({result.measurement.yardstick.drift:.0%} apart before "
                           "and after)") if result.speed else ""
        if result.measurement.cpu_wait_share is not None:
            conditions_seen += f", cpu wait {result.measurement.cpu_wait_share:.1%}"
        if result.measurement.launches > 1:
            conditions_seen += f", {launches_text(result.measurement)}"
        say(f"rerun {index + 1}/{len(order)} slowdown {size:.0%}{' with a neighbour' if neighbour else ''}: "
            f"{_interval(estimate) if estimate else result.measurement.status}{conditions_seen} -> {outcomes}")
    return SelftestReport(config=config, baseline=baseline, references=references, baseline_wait=baseline_wait,
                          judged=judged, wall_s=time.monotonic() - started, load=(load_before, os.getloadavg()[0]))


# --- report ---------------------------------------------------------------------------------------


def judged_value(judged: Judged, judging: str) -> float | None:
    """The throughput the rerun was judged on: normalised to the baseline's machine, or raw."""
    estimate = judged.measurement.throughput
    if estimate is None or judging not in judged.verdicts:
        return None
    return normalise_estimate(estimate, judged.speed).value if judging == "yardstick" else estimate.value


def report_rows(report: SelftestReport, judging: str | None = None) -> list[list[str]]:
    judging = judging or report.judging
    reference = report.references[judging].value
    table = [["slowdown", "expected img/s", "judged (median)", "runs", "fail", "inconclusive", "pass", "faster",
              "error", "detection rate"]]
    for row in report.rows(judging):
        expected = reference / (1 + row.slowdown)
        change = "baseline" if row.slowdown == 0 else f"{-row.slowdown / (1 + row.slowdown):+.1%}"
        values = [value for j in report.judged
                  if (j.measurement.slowdown, j.measurement.neighbour) == (row.slowdown, row.neighbour)
                  and (value := judged_value(j, judging)) is not None]
        measured = f"{statistics.median(values):.2f} ({statistics.median(values) / reference - 1:+.1%})" if values else "-"
        rate = "-" if row.runs == row.counts["error"] else f"{row.fail_rate:.0%}"
        if row.slowdown == 0:
            rate += " (false alarms)"
        table.append([f"{row.slowdown:.0%}" + (" + neighbour" if row.neighbour else ""),
                      f"{expected:.2f} ({change})", measured, str(row.runs),
                      *(str(row.counts[k]) for k in OUTCOMES), rate])
    return table


TITLES = {"yardstick": "judged against the baseline normalised by the machine yardstick (the suite's judgement)",
          "raw": "judged raw, as measured (machine drift included)"}


def launches_text(measurement: Measurement) -> str:
    left_out = f", {measurement.contended_launches} contended left out" if measurement.contended_launches else ""
    return f"{measurement.launches} launches pooled{left_out}"


def format_report(report: SelftestReport) -> str:
    c = report.config
    widths = [j.measurement.throughput.half_width_rel for j in report.judged if j.measurement.throughput]
    lines = [
        f"cell {c.cell.id} via {c.launcher}, {c.workload.image_size} px, batch {c.workload.batch_size}, "
        f"{c.workload.steps} timed steps ({c.workload.warmup_steps} warm-up), device {c.device}",
        f"reruns: median 95% interval +-{statistics.median(widths):.1%}" if widths else "reruns: none completed",
    ]
    speeds = sorted(j.speed for j in report.judged if j.speed)
    waits = [j.measurement.cpu_wait_share for j in report.judged if j.measurement.cpu_wait_share is not None]
    if waits and report.baseline_wait is not None:
        busy = [j for j in report.judged if contended(j.measurement.cpu_wait_share, report.baseline_wait)]
        lines.append(f"waiting for a CPU: baseline runs {report.baseline_wait:.1%} of the step time, reruns up to "
                     f"{max(waits):.1%}; {len(busy)} rerun(s) waited more than {NOTABLE_SHARE:.0%} above the baseline "
                     f"(other work on the node), and a fail among them counts as inconclusive")
    again = [j.measurement for j in report.judged if j.measurement.launches > 1]
    lines.append(f"measured again (inconclusive, within {c.measure_budget:.0f} s per rerun): {len(again)} of "
                 f"{len(report.judged)} reruns"
                 + (f", {sum(m.launches for m in again)} launches in all, {sum(m.contended_launches for m in again)} "
                    "of them contended and left out" if again else ""))
    if speeds:
        lines.append(f"machine speed by the yardstick, reruns against the baseline runs: median "
                     f"{statistics.median(speeds) - 1:+.1%}, from {speeds[0] - 1:+.1%} to {speeds[-1] - 1:+.1%}")
        drifts = sorted(j.measurement.yardstick.drift for j in report.judged if j.speed)
        lines.append(f"machine speed before and after a rerun's window, apart by: median {statistics.median(drifts):.1%}, "
                     f"up to {drifts[-1]:.1%} (the normalised interval is widened by it)")
    for judging in report.references:
        reference = report.references[judging]
        runs = reference.runs
        minimum = report.minimum_detected(judging=judging)
        lines += [
            "",
            f"{judging}: {TITLES[judging]}",
            f"baseline: {len(runs)} runs, mean {reference.value:.2f} img/s (runs {min(runs):.2f} to {max(runs):.2f}, "
            f"cv {statistics.stdev(runs) / reference.value:.1%}); band {reference.band[0]:+.1%} / "
            f"{reference.band[1]:+.1%} (floor {c.band_floor:.0%})",
            format_table(report_rows(report, judging)),
            f"minimum slowdown detected reliably (>= {RELIABLE:.0%} of runs): "
            + (f"{minimum:.0%}" if minimum is not None else f"none of {', '.join(f'{s:.0%}' for s in c.sizes)}"),
            f"false alarms: {report.false_alarms(judging)} of {report.rows(judging)[0].runs} unchanged reruns",
        ]
        with_neighbour = [row for row in report.rows(judging) if row.neighbour]
        if with_neighbour:
            row = with_neighbour[0]
            lines.append(f"with a neighbour's job on the cores: {row.counts['fail']} fail, {row.counts['inconclusive']} "
                         f"inconclusive, {row.counts['pass']} pass of {row.runs} unchanged reruns")
    lines.append(f"self-test took {report.wall_s / 60:.1f} min")
    if report.load:
        lines.append(f"load average {report.load[0]:.1f} at the start, {report.load[1]:.1f} at the end, on "
                     f"{os.cpu_count()} CPUs (a load above the CPU count means other work competed for them)")
    return "\n".join(lines)


def _interval(estimate: Estimate) -> str:
    if estimate.too_few_samples:
        return f"{estimate.value:.2f} [no CI]"
    return f"{estimate.value:.2f} [{estimate.low:.2f}, {estimate.high:.2f}]"


def _sizes(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"--sizes takes fractions such as 0.05,0.1,0.2; got {text!r}") from None


def _seconds_pair(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--neighbour takes START,DURATION in seconds, e.g. 8,8; got {text!r}") from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.selftest", description=__doc__.split("\n\n")[0])
    parser.add_argument("--launcher", default="torchrun", help=f"one of {', '.join(LAUNCHERS.names())}")
    parser.add_argument("--repeats", type=int, default=10, help="judged reruns per slowdown size (default 10)")
    parser.add_argument("--baseline-runs", type=int, help="runs the baseline is made of (default: --repeats)")
    parser.add_argument("--sizes", type=_sizes, default=DEFAULT_SIZES, help="slowdowns (default 0.05,0.1,0.2)")
    parser.add_argument("--ranks", type=int, default=SELFTEST_CELL.ranks)
    parser.add_argument("--framework", default=SELFTEST_CELL.framework)
    parser.add_argument("--steps", type=int, default=SELFTEST_WORKLOAD.steps, help="timed steps per run")
    parser.add_argument("--warmup-steps", type=int, default=SELFTEST_WORKLOAD.warmup_steps)
    parser.add_argument("--image-size", type=int, default=SELFTEST_WORKLOAD.image_size)
    parser.add_argument("--batch-size", type=int, default=SELFTEST_WORKLOAD.batch_size)
    parser.add_argument("--threads", type=int, default=1,
                        help="CPU threads per rank; 0: the worker's default, the cores shared among the ranks "
                             "(default 1)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto (default cpu)")
    parser.add_argument("--band-floor", type=float, default=0.05)
    parser.add_argument("--workdir", type=Path, default=Path("results") / "selftest")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--neighbour-runs", type=int, default=0,
                        help="extra unchanged reruns with a neighbour's job busy on every core for a while (default 0)")
    parser.add_argument("--measure-budget", type=float, default=DEFAULT_MEASURE_BUDGET_S,
                        help="seconds one rerun may take in all: an inconclusive rerun is launched again while "
                             f"this allows, as the suite's --measure-budget (default {DEFAULT_MEASURE_BUDGET_S:.0f})")
    parser.add_argument("--neighbour", type=_seconds_pair, default=DEFAULT_NEIGHBOUR,
                        help="when the neighbour's job starts, seconds after rank 0's first timed step, and how "
                             "long it runs (default 8,8)")
    args = parser.parse_args(argv)
    try:
        LAUNCHERS.check(args.launcher)
        config = SelftestConfig(
            launcher=args.launcher, repeats=args.repeats, baseline_runs=args.baseline_runs or args.repeats,
            sizes=args.sizes, cell=dataclasses.replace(SELFTEST_CELL, ranks=args.ranks, framework=args.framework),
            workload=SELFTEST_WORKLOAD.replace(steps=args.steps, warmup_steps=args.warmup_steps,
                                               image_size=args.image_size, batch_size=args.batch_size),
            band_floor=args.band_floor, device=args.device, threads_per_rank=args.threads or None,
            workdir=args.workdir, seed=args.seed, neighbour_runs=args.neighbour_runs, neighbour=args.neighbour,
            measure_budget=args.measure_budget)
    except ValueError as error:
        parser.error(str(error))
    report = run_selftest(config, on_progress=lambda line: print(f"  [selftest] {line}", flush=True))
    print(format_report(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
