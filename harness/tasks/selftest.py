"""The suite's self-test: how often its verdicts cry wolf on this machine, and whether they catch a
real regression, measured through the suite's own code path.

    python -m harness.tasks.selftest [--repeats 10] [--baseline-runs 10] [--regressions compute,slow:0.15]

One cell of the default matrix (``ddp-synthetic-resnet50-g1``) is measured by the suite itself: a
:class:`harness.session.suite.Suite` with the options ``ci/suite`` runs with (workload profile, cores per
rank, launcher, precision, measuring budget and relaunch rule, contention guard, yardstick, the
judging of :mod:`harness.judging.verdicts`). Nothing here measures or judges on its own.

1. The baseline is recorded as ``--update-baselines --cell-repeats N`` records it, into a private
   baseline file (``<workdir>/baselines``).
2. The cell is then measured again, in a shuffled order: ``--repeats`` times unchanged, as often
   with each injected regression, and ``--neighbour-runs`` times unchanged while another job takes
   the cores for a while.
3. The suite's verdict of each is counted: false alarms among the unchanged, detections among the
   regressions. It exits 1, naming each, when a rate misses (:meth:`SelftestReport.shortfalls`).

The regressions, none of which the machine yardstick can see:

- ``compute``: ATen, torch's own kernel library, runs its kernels without vector instructions
  (``ATEN_CPU_CAPABILITY=default`` in every rank's environment, as ``--launch-env`` sets it), as a
  torch built or dispatched for an older CPU does: real compute taking longer, while oneDNN's
  convolutions keep their path. The yardstick is numpy and never calls ATen. In the default cell
  on this project's AVX-512 machine it costs 17-22% of the throughput (a bare ResNet50 step at
  32 px: +20%); capping oneDNN to AVX2 as well costs 22-26%, capping both to AVX2 only 5-8%.
- ``slow:F``: every step of every rank sleeps ``F`` times its own duration (the ``slow`` fault of
  :mod:`harness.rank.faults`): it lowers throughput by ``F / (1 + F)`` and takes no CPU at all.
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
from typing import Callable, Mapping, Sequence

from harness.config.cells import parse_cell_id
from harness.machine.node import cpu_identity
from harness.judging.kinds import ERROR, VerdictKind
from harness.judging.stats import Estimate
from harness.judging.verdicts import Reference
from harness.rank.cell import Cell
from harness.report.tables import format_table
from harness.session.results import CellResult
from harness.session.suite import Suite, SuiteOptions

SELFTEST_CELL = Cell(framework="ddp", loader="synthetic", model="resnet50", ranks=1)
RELIABLE = 0.9
"""Detection rate at which a regression counts as caught reliably."""
MOSTLY_PASS = 0.8
"""Share of unchanged reruns that must be judged ``pass`` (or ``faster``): verdicts that never fail
because they never decide (all inconclusive, all errors) are no better than ones that cry wolf."""
OUTCOMES = (VerdictKind.FAIL, VerdictKind.INCONCLUSIVE, VerdictKind.PASS, VerdictKind.FASTER, "other")
"""``other``: no verdict on the band (error, machine-differs, stale, no-baseline)."""
DEFAULT_NEIGHBOUR = (8.0, 8.0)
SYSTEM = "selftest"
VECTOR_ISA = ("avx2", "avx512f")
"""ISA flags with a vectorised ATen kernel path above its ``default`` one."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Regression:
    """A regression injected into every launch of a rerun; the unchanged rerun injects nothing."""

    name: str
    launch_env: tuple[str, ...] = ()
    """``NAME=VALUE`` settings every rank gets (the suite's ``--launch-env``)."""
    slow_fraction: float = 0.0
    """Extra time per step (the ``slow`` fault); 0: none."""

    @property
    def fault(self) -> dict | None:
        return {"kind": "slow", "fraction": self.slow_fraction} if self.slow_fraction else None

    @property
    def expected_change(self) -> float | None:
        """The throughput change the regression makes by construction, where it is known."""
        return -self.slow_fraction / (1 + self.slow_fraction) if self.slow_fraction else None


UNCHANGED = Regression(name="unchanged")


def compute_regression(isa_flags: str) -> Regression:
    """torch's ATen kernels without the vector instructions the machine (``isa_flags``, as
    :func:`harness.machine.node.cpu_identity` reads them) has."""
    flags = set() if isa_flags.startswith("none of") else set(isa_flags.split())
    if flags & set(VECTOR_ISA):
        return Regression(name="compute: ATen kernels without vector instructions",
                          launch_env=("ATEN_CPU_CAPABILITY=default",))
    raise ValueError(f"this CPU has neither AVX-512 nor AVX2 ({isa_flags or 'no ISA flags read'}): there is no "
                     "slower kernel path to send torch down; use slow:F regressions")


def parse_regression(text: str, isa_flags: str) -> Regression:
    """``compute`` or ``slow:F`` (``F`` a positive fraction: 0.15 for steps 15% longer)."""
    kind, _, value = text.strip().partition(":")
    if kind == "compute" and not value:
        return compute_regression(isa_flags)
    if kind == "slow":
        try:
            fraction = float(value)
        except ValueError:
            fraction = 0.0
        if fraction > 0:
            return Regression(name=f"slow: steps {fraction:.0%} longer", slow_fraction=fraction)
    raise ValueError(f"unknown regression {text!r}: give compute or slow:F (F a positive fraction, e.g. slow:0.15)")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SelftestConfig:
    cell: Cell = SELFTEST_CELL
    repeats: int = 10
    """Reruns of each kind: unchanged, and with each regression."""
    baseline_runs: int = 10
    """Measurements the baseline is recorded from (``--update-baselines --cell-repeats``)."""
    regressions: tuple[Regression, ...] = ()
    """Injected regressions; none given: the ``compute`` regression of this machine."""
    neighbour_runs: int = 0
    """Unchanged reruns during which a neighbour's job keeps every core busy for a while."""
    neighbour: tuple[float, float] = DEFAULT_NEIGHBOUR
    """When the neighbour's job starts, in seconds after rank 0 begins its timed steps, and for how
    long it runs: a burst inside the default cell's window, which the yardstick, timed before and
    after the window, cannot see. A burst at the window's start would be dropped with the warm-up."""
    workdir: Path = Path("results") / "selftest"
    seed: int = 0
    """Seed of the order the reruns are interleaved in."""
    suite_options: Mapping[str, object] = dataclasses.field(default_factory=dict)
    """:class:`SuiteOptions` the self-test changes from the suite's defaults: none by default, so that
    it measures what ``ci/suite`` measures (its own tests make the cell smaller)."""

    def __post_init__(self) -> None:
        if self.repeats < 1:
            raise ValueError(f"repeats must be at least 1, got {self.repeats}")
        if self.baseline_runs < 2:
            raise ValueError(f"a baseline band needs at least 2 runs, got {self.baseline_runs}")
        if self.neighbour_runs < 0 or len(self.neighbour) != 2 or min(self.neighbour) < 0:
            raise ValueError(f"neighbour runs must be >= 0 and the neighbour (start, duration) seconds >= 0, got "
                             f"{self.neighbour_runs} and {list(self.neighbour)}")

    def regressions_or_default(self) -> tuple[Regression, ...]:
        return self.regressions or (compute_regression(cpu_identity().get("isa", "")),)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Rerun:
    """One rerun as the suite judged it."""

    regression: Regression
    neighbour: bool
    verdict: str
    message: str
    throughput: Estimate | None
    machine_speed: float | None
    launches: int
    contended_launches: int
    cpu_wait_share: float | None
    outside_share: float | None
    wall_s: float

    @classmethod
    def of(cls, result: CellResult, regression: Regression, neighbour: bool) -> "Rerun":
        return cls(regression=regression, neighbour=neighbour, verdict=result.verdict,
                   message="; ".join(v.message for v in result.verdicts) or (result.run.error or result.run.status),
                   throughput=result.throughput, machine_speed=result.machine_speed, launches=len(result.runs),
                   contended_launches=result.contended_runs, cpu_wait_share=result.cpu_wait_share,
                   outside_share=result.outside_share,
                   wall_s=sum(run.wall_s for run in result.runs))

    @property
    def outcome(self) -> str:
        return self.verdict if self.verdict in OUTCOMES else "other"

    @property
    def condition(self) -> tuple[str, bool]:
        return self.regression.name, self.neighbour


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Row:
    regression: Regression
    neighbour: bool
    counts: dict[str, int]

    @property
    def runs(self) -> int:
        return sum(self.counts.values())

    @property
    def fail_rate(self) -> float:
        """Fails over the reruns: the detection rate, or for an unchanged rerun the false-alarm rate."""
        return self.counts[VerdictKind.FAIL] / self.runs if self.runs else float("nan")


@dataclasses.dataclass(kw_only=True)
class SelftestReport:
    config: SelftestConfig
    regressions: tuple[Regression, ...]
    launcher: str
    cores_per_rank: int | None
    workload: Mapping
    reference: Reference
    """The baseline the suite recorded, as it judges against it."""
    baseline: list[Rerun]
    """The baseline's own measurements (each judged ``no-baseline``)."""
    reruns: list[Rerun]
    wall_s: float
    load: tuple[float, float] | None = None
    """The machine's 1-minute load average when the self-test started and ended."""

    def conditions(self) -> list[tuple[Regression, bool]]:
        """(regression, neighbour) of each kind of rerun, in report order."""
        return [(UNCHANGED, False), *([(UNCHANGED, True)] if self.config.neighbour_runs else []),
                *((regression, False) for regression in self.regressions)]

    def rows(self) -> list[Row]:
        rows = []
        for regression, neighbour in self.conditions():
            outcomes = [r.outcome for r in self.reruns if r.condition == (regression.name, neighbour)]
            rows.append(Row(regression=regression, neighbour=neighbour,
                            counts={kind: outcomes.count(kind) for kind in OUTCOMES}))
        return rows

    def row(self, regression: Regression, neighbour: bool = False) -> Row:
        return next(r for r in self.rows() if (r.regression.name, r.neighbour) == (regression.name, neighbour))

    def false_alarms(self) -> int:
        return self.row(UNCHANGED).counts[VerdictKind.FAIL]

    def shortfalls(self) -> list[str]:
        """Where the rates miss, one line each (none when the self-test passes): a false alarm in an
        unchanged rerun, with a neighbour or without; unchanged reruns not mostly judged ``pass``
        (see :data:`MOSTLY_PASS`); a regression caught in fewer than :data:`RELIABLE` of its reruns."""
        missed = []
        for neighbour in (False, True) if self.config.neighbour_runs else (False,):
            row = self.row(UNCHANGED, neighbour)
            if row.counts[VerdictKind.FAIL]:
                missed.append(f"{row.counts[VerdictKind.FAIL]} false alarm(s) in {row.runs} unchanged reruns"
                              + (" with a neighbour's job" if neighbour else ""))
        row = self.row(UNCHANGED)
        decided = row.counts[VerdictKind.PASS] + row.counts[VerdictKind.FASTER]
        if row.runs and decided < MOSTLY_PASS * row.runs:
            inconclusive, other = row.counts[VerdictKind.INCONCLUSIVE], row.counts["other"]
            missed.append(f"only {decided} of {row.runs} unchanged reruns judged pass (under {MOSTLY_PASS:.0%}): "
                          f"{inconclusive} inconclusive, {other} without a verdict")
        for regression in self.regressions:
            row = self.row(regression)
            if not row.fail_rate >= RELIABLE:
                missed.append(f"{regression.name} caught in {row.counts[VerdictKind.FAIL]} of {row.runs} reruns "
                              f"(under {RELIABLE:.0%})")
        return missed


# --- running --------------------------------------------------------------------------------------


def suite_for(config: SelftestConfig, regression: Regression = UNCHANGED, *, record: bool = False) -> Suite:
    """The suite ``ci/suite`` would be, restricted to the self-test cell's series, reading (or, with
    ``record``, writing with ``--cell-repeats``) the self-test's private baseline file."""
    cell = config.cell
    options = {
        **config.suite_options,
        "frameworks": cell.framework, "loaders": cell.loader, "models": cell.model,
        "system": SYSTEM, "baselines_dir": config.workdir / "baselines", "workdir": config.workdir / "cells",
        "history_dir": None, "update_baselines": record, "repeat": config.baseline_runs if record else 1,
        "fault": regression.fault,
        "launch_env": (*config.suite_options.get("launch_env", ()), *regression.launch_env),
    }
    suite = Suite(SuiteOptions(**options))
    if reason := suite.skip_reason(cell):
        raise RuntimeError(f"the self-test cannot run {cell.id}: {reason}")
    return suite


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
    heartbeat, :class:`harness.rank.worker.ProgressFile`) first shows a timed step."""
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


def record_baseline(config: SelftestConfig, say: Callable[[str], None]) -> tuple[Suite, list[Rerun]]:
    """Measure the cell ``baseline_runs`` times and record the baseline as the suite does, over
    any an earlier self-test left in the same work directory."""
    (config.workdir / "baselines" / f"{SYSTEM}.json").unlink(missing_ok=True)
    suite = suite_for(config, record=True)
    measured = []
    for index in range(config.baseline_runs):
        result = suite.measure(config.cell)
        if not result.ok:
            raise RuntimeError(f"baseline measurement {index + 1} {result.run.status}:\n{result.run.error}")
        measured.append(Rerun.of(result, UNCHANGED, False))
        say(f"baseline {index + 1}/{config.baseline_runs}: {result.throughput.text(2)} img/s, "
            f"{len(result.runs)} launch(es), {measured[-1].wall_s:.0f} s")
    suite.update_baselines()
    if suite.baselines_kept or suite.prepared.baselines.reference(config.cell.id, "throughput") is None:
        raise RuntimeError(f"the suite recorded no baseline: {'; '.join(suite.baselines_kept) or 'no entry written'}")
    return suite, measured


def run_selftest(config: SelftestConfig, on_progress: Callable[[str], None] | None = None) -> SelftestReport:
    """Record the baseline, then the interleaved reruns, each measured and judged by the suite."""
    say = on_progress or (lambda line: None)
    started = time.monotonic()
    load_before = os.getloadavg()[0]
    regressions = config.regressions_or_default()
    recorder, baseline = record_baseline(config, say)
    reference = recorder.prepared.baselines.reference(config.cell.id, "throughput")
    say(f"baseline {reference.value:.2f} img/s, band {reference.lower:+.1%} / {reference.upper:+.1%}")

    suites = {regression.name: suite_for(config, regression) for regression in (UNCHANGED, *regressions)}
    order = [(regression, False) for regression in (UNCHANGED, *regressions) for _ in range(config.repeats)]
    order += [(UNCHANGED, True)] * config.neighbour_runs
    random.Random(config.seed).shuffle(order)
    progress = config.workdir / "cells" / config.cell.id / "progress-rank0.json"  # where run_cell's rank 0 reports
    reruns = []
    for index, (regression, neighbour) in enumerate(order):
        with neighbour_job(progress, *config.neighbour) if neighbour else contextlib.nullcontext():
            result = suites[regression.name].measure(config.cell)
        rerun = Rerun.of(result, regression, neighbour)
        reruns.append(rerun)
        seen = f"machine {rerun.machine_speed - 1:+.1%}" if rerun.machine_speed else "machine -"
        if rerun.cpu_wait_share is not None:
            seen += f", cpu wait {rerun.cpu_wait_share:.1%}"
        if rerun.outside_share is not None:
            seen += f", outside work {rerun.outside_share:.1%}"
        change = f" ({rerun.throughput.value / reference.value - 1:+.1%} as measured)" if rerun.throughput else ""
        say(f"rerun {index + 1}/{len(order)} {regression.name}{' with a neighbour' if neighbour else ''}: "
            f"{rerun.throughput.text(2) if rerun.throughput else 'no figure'}{change}, {seen}, "
            f"{rerun.launches} launch(es) -> {rerun.verdict}" + (f": {rerun.message}" if rerun.verdict == ERROR else ""))
    return SelftestReport(config=config, regressions=regressions, launcher=recorder.launcher_name,
                          cores_per_rank=recorder.prepared.cores_per_rank, workload=dataclasses.asdict(recorder.prepared.workload),
                          reference=reference, baseline=baseline, reruns=reruns, wall_s=time.monotonic() - started,
                          load=(load_before, os.getloadavg()[0]))


# --- report ---------------------------------------------------------------------------------------


def report_rows(report: SelftestReport) -> list[list[str]]:
    table = [["rerun", "expected", "measured (median, as measured)", "runs", *OUTCOMES, "launches", "fail rate"]]
    for row in report.rows():
        reruns = [r for r in report.reruns if r.condition == (row.regression.name, row.neighbour)]
        values = [r.throughput.value for r in reruns if r.throughput]
        measured = (f"{statistics.median(values):.2f} ({statistics.median(values) / report.reference.value - 1:+.1%})"
                    if values else "-")
        expected = row.regression.expected_change
        rate = f"{row.fail_rate:.0%}" + (" (false alarms)" if row.regression == UNCHANGED else " (detected)")
        table.append([row.regression.name + (" + neighbour" if row.neighbour else ""),
                      "0%" if row.regression == UNCHANGED else (f"{expected:+.1%}" if expected else "-"), measured,
                      str(row.runs), *(str(row.counts[k]) for k in OUTCOMES),
                      str(sum(r.launches for r in reruns)), rate])
    return table


def format_report(report: SelftestReport) -> str:
    c, w = report.config, report.workload
    runs = [r.throughput.value for r in report.baseline]
    speeds = sorted(r.machine_speed for r in report.reruns if r.machine_speed)
    lines = [
        f"cell {c.cell.id} as the suite measures it: launcher {report.launcher}, "
        f"{report.cores_per_rank or 'shared'} core(s) per rank, {w['image_size']} px, batch {w['batch_size']}, "
        f"{w['steps']} timed steps ({w['warmup_steps']} warm-up)",
        f"baseline: {len(runs)} measurements (--update-baselines --cell-repeats {len(runs)}), {report.reference.value:.2f} "
        f"img/s (measured {min(runs):.2f} to {max(runs):.2f}), band {report.reference.lower:+.1%} / "
        f"{report.reference.upper:+.1%}",
        format_table(report_rows(report)),
        f"false alarms: {report.false_alarms()} of {report.row(UNCHANGED).runs} unchanged reruns",
    ]
    for regression in report.regressions:
        row = report.row(regression)
        reliably = "reliably" if row.fail_rate >= RELIABLE else f"NOT reliably (under {RELIABLE:.0%})"
        lines.append(f"{regression.name}: caught in {row.counts[VerdictKind.FAIL]} of {row.runs} reruns, {reliably}"
                     + (f" [{', '.join(regression.launch_env)}]" if regression.launch_env else ""))
    if speeds:
        lines.append(f"machine speed by the yardstick against the baseline: median {statistics.median(speeds) - 1:+.1%}, "
                     f"from {speeds[0] - 1:+.1%} to {speeds[-1] - 1:+.1%}")
    if c.neighbour_runs:
        row = report.row(UNCHANGED, neighbour=True)
        contended = sum(1 for r in report.reruns if r.neighbour and r.contended_launches)
        fail, inconclusive, passed = (row.counts[kind] for kind in
                                      (VerdictKind.FAIL, VerdictKind.INCONCLUSIVE, VerdictKind.PASS))
        lines.append(f"with a neighbour's job on the cores: {fail} fail, {inconclusive} inconclusive, {passed} pass "
                     f"of {row.runs}; {contended} had a contended launch left out")
    lines.append(f"self-test took {report.wall_s / 60:.1f} min")
    if report.load:
        lines.append(f"load average {report.load[0]:.1f} at the start, {report.load[1]:.1f} at the end, on "
                     f"{os.cpu_count()} CPUs (a load above the CPU count means other work competed for them)")
    return "\n".join(lines)


def _seconds_pair(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--neighbour takes START,DURATION in seconds, e.g. 8,8; got {text!r}") from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.tasks.selftest", description=__doc__.split("\n\n")[0])
    parser.add_argument("--cell", default=SELFTEST_CELL.id, help=f"the cell to test (default {SELFTEST_CELL.id})")
    parser.add_argument("--repeats", type=int, default=10, help="reruns of each kind (default 10)")
    parser.add_argument("--baseline-runs", type=int, default=10,
                        help="measurements the baseline is recorded from (default 10)")
    parser.add_argument("--regressions", default="compute",
                        help="comma-separated: compute, slow:F (default compute)")
    parser.add_argument("--launcher", help="as the suite's --launcher (default: the suite's)")
    parser.add_argument("--workdir", type=Path, default=Path("results") / "selftest")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--neighbour-runs", type=int, default=0,
                        help="extra unchanged reruns with a neighbour's job busy on every core for a while (default 0)")
    parser.add_argument("--neighbour", type=_seconds_pair, default=DEFAULT_NEIGHBOUR,
                        help="when the neighbour's job starts, seconds after rank 0's first timed step, and how "
                             "long it runs (default 8,8)")
    args = parser.parse_args(argv)
    try:
        isa = cpu_identity().get("isa", "")
        cell = parse_cell_id(args.cell)
        if not isinstance(cell, Cell):
            raise ValueError(f"--cell {args.cell}: the self-test measures a throughput cell, not an accuracy cell")
        config = SelftestConfig(
            cell=cell, repeats=args.repeats, baseline_runs=args.baseline_runs,
            regressions=tuple(parse_regression(text, isa) for text in args.regressions.split(",") if text.strip()),
            workdir=args.workdir, seed=args.seed, neighbour_runs=args.neighbour_runs, neighbour=args.neighbour,
            suite_options={"launcher": args.launcher} if args.launcher else {})
    except ValueError as error:
        parser.error(str(error))
    report = run_selftest(config, on_progress=lambda line: print(f"  [selftest] {line}", flush=True))
    print(format_report(report))
    missed = report.shortfalls()
    for line in missed:
        print(f"self-test failed: {line}", file=sys.stderr)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
