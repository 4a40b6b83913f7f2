"""One scaling-suite session: the settings from the command line, each cell's measurement and
verdict, the results file, the baseline update and the summary table. Free of pytest."""
from __future__ import annotations

import dataclasses
import functools
import math
import os
import time
import uuid
from pathlib import Path
from typing import Callable

from .baselines import BaselineFile
from .cells import (DEFAULT_MATRIX, PROFILES, AccuracyCell, AccuracySettings, Cell, Matrix, Workload,
                    accuracy_cells, check_name, parse_cell_id, parse_names, parse_ranks)
from .breakdown import CellBreakdown, cell_breakdown, has_breakdown
from .contention import outside_share, wait_share
from .dataset import DatasetError, ensure, validate_image_folder
from .environment import capture as capture_environment
from .fingerprint import fingerprint, fingerprint_hash
from .history import append as append_history
from .history import make_row
from .history import read as read_history
from .interrupts import INTERRUPTS
from .judging import Evidence, Verdict, judge, judge_cell, measured_enough, overall
from .jsonio import write_json_atomic
from . import allocation
from .allocation import launch_environment
from .launchers import LAUNCHERS, Launcher, default_launcher_name
from .frameworks import FRAMEWORKS
from .loaders import FILE_LOADERS, LOADERS, TFRECORD_LOADERS
from .models import MODELS
from .metrics import CellMetrics, pool_uncontended, step_samples, summarize, trim_warmup
from .stats import Estimate, efficiency_interval, throughput_interval
from .provenance import provenance
from .recording import baseline_entry, why_not_recorded
from .runner import CellRun, RunLimits, run_cell
from .system import detect_system, rank_capacity
from .tfrecord import TFRecordError, convert, open_tfrecord_set
from .yardstick import Yardstick, from_records

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATASET = Path(os.environ.get("DLSCALE_CACHE", Path.home() / ".cache" / "dlscale")) / "dataset"


ACCURACY_SETTINGS = AccuracySettings()


class SuiteError(ValueError):
    """A setting or input that stops the suite before any process starts."""


DEFAULT_MEASURE_BUDGET_S = 90.0
"""A launch of a default CPU cell takes 25-35 s here: room for two more when the first leaves the
cell imprecise or inconclusive (at 45 s, none ever fitted: every history row had one launch)."""
DEVICES = ("auto", "cpu", "cuda")
AT_LEAST = {"image_size": 1, "batch_size": 1, "steps": 1, "warmup_steps": 0, "num_workers": 0, "repeat": 1,
            "measure_budget": 0, "cores_per_rank": 1}
ABOVE_ZERO = ("precision", "widest_baseline", "cell_timeout", "hang_timeout")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SuiteOptions:
    launcher: str | None = None
    frameworks: str | None = None
    loaders: str | None = None
    models: str | None = None
    gpus: str | None = None
    system: str | None = None
    baselines_dir: Path = REPO / "baselines"
    results_json: Path | None = None
    workdir: Path = REPO / "results" / "cells"
    update_baselines: bool = False
    data: Path | None = None
    data_tfrecord: Path | None = None
    profile: str = "auto"
    device: str = "auto"
    image_size: int | None = None
    batch_size: int | None = None
    steps: int | None = None
    warmup_steps: int | None = None
    num_workers: int | None = None
    cores_per_rank: int | None = None
    """CPU cells: cores each rank owns (harness.binding); None: the node's cores over the largest
    number of ranks a cell of the session puts on one node."""
    cell_timeout: float | None = None
    hang_timeout: float | None = None
    precision: float = 0.02
    """Target relative half-width of a cell's throughput interval."""
    measure_budget: float = DEFAULT_MEASURE_BUDGET_S
    """Seconds a cell may spend in further launches to reach ``precision`` or a clear verdict."""
    repeat: int = 1
    """Independent measurements per cell; with --update-baselines their spread sets the band."""
    band_floor: float = 0.05
    """Narrowest band --repeat may derive."""
    widest_baseline: float = 0.10
    """Relative half-width of a measured interval beyond which ``--update-baselines`` keeps the
    old baseline: a reference that uncertain cannot place a band of 5-15%."""
    accept_regressions: bool = False
    """``--update-baselines`` records a cell judged ``fail`` too (a slowdown the site accepts)."""
    yardstick: bool = True
    """Judge a CPU cell's throughput normalised to its baseline's machine speed (harness.yardstick);
    False judges it as measured, e.g. to check the machine itself."""
    history_dir: Path | None = REPO / "history"
    """Where each measured cell appends a line to ``<system>.jsonl``; None: no history."""
    report: Path | None = None
    """Directory for the HTML report of the session."""
    launch_env: tuple[str, ...] = ()
    """``NAME=VALUE`` settings every rank gets (``--launch-env``), over those of ``launch_env_file``."""
    launch_env_file: Path | None = None
    """A site's launch environment file (``--launch-env-file``, else ``$DLSCALE_ENV_FILE``)."""
    fault: dict | None = None
    """A fault every launch injects on purpose (:mod:`harness.faults`): the self-test's regressions.
    No command-line option sets it."""


@dataclasses.dataclass(kw_only=True)
class CellResult:
    cell: Cell
    runs: list[CellRun]
    """Every launch of the cell: more than one when it was measured again for precision."""
    config_hash: str
    records: list[dict] = dataclasses.field(default_factory=list)
    """One pooled record per rank: every run's timed steps after the detected warm-up."""
    warmup_dropped: list[int] = dataclasses.field(default_factory=list)
    """Leading timed steps of each run detected as warm-up (MSER-5) and left out."""
    metrics: CellMetrics | None = None
    throughput: Estimate | None = None
    efficiency: Estimate | None = None
    efficiency_source: str | None = None
    """"measured" (reference cell in this run), "baseline", or "by definition" (the reference cell)."""
    verdicts: list[Verdict] = dataclasses.field(default_factory=list)
    fingerprint: dict | None = None
    breakdown: CellBreakdown | None = None
    yardstick: Yardstick | None = None
    """The machine's speed during the cell's launches; ``None`` for GPU cells."""
    machine_speed: float | None = None
    """The machine's speed relative to the baseline's, when the throughput was judged normalised."""
    cpu_wait_share: float | None = None
    """The largest share of its window a rank's threads waited for a CPU (harness.contention)."""
    outside_share: float | None = None
    """The largest share of a rank's own cores' time that work outside the cell took."""
    contended_runs: int = 0
    """Launches left out of the pooled samples because other work competed for the cores."""
    stack_changes: list[str] = dataclasses.field(default_factory=list)
    """Software that changed since the baseline was recorded (``"torch 2.13.1 -> 2.14.1"``)."""

    @property
    def run(self) -> CellRun:
        return self.runs[-1]

    @property
    def ok(self) -> bool:
        return all(run.ok for run in self.runs)

    @property
    def verdict(self) -> str:
        if not self.ok:
            return "error"
        return overall(self.verdicts)

    def to_json(self) -> dict:
        return {
            "cell": self.cell.id, "launcher": self.run.launcher, "status": self.run.status, "error": self.run.error,
            "runs": len(self.runs), "wall_s": round(sum(run.wall_s for run in self.runs), 3),
            "command": self.run.command, "warmup_dropped": self.warmup_dropped,
            "metrics": dataclasses.asdict(self.metrics) if self.metrics else None,
            "throughput": _estimate_json(self.throughput), "efficiency": _estimate_json(self.efficiency),
            "efficiency_source": self.efficiency_source,
            "verdict": self.verdict, "verdicts": [dataclasses.asdict(v) for v in self.verdicts],
            "config_hash": self.config_hash, "fingerprint": self.fingerprint,
            "breakdown": self.breakdown.to_json() if self.breakdown else None,
            "yardstick": self.yardstick.to_json() if self.yardstick else None, "machine_speed": self.machine_speed,
            "cpu_wait_share": self.cpu_wait_share, "outside_share": self.outside_share,
            "contended_runs": self.contended_runs, "stack_changes": self.stack_changes,
            "orphans_killed": [pid for run in self.runs for pid in run.orphans_killed],
            "orphans_elsewhere": {host: pids for run in self.runs for host, pids in run.orphans_elsewhere.items() if pids},
            "records": self.records or self.run.records,
        }


@dataclasses.dataclass(kw_only=True)
class AccuracyResult:
    cell: AccuracyCell
    run: CellRun
    config_hash: str
    outcome: dict | None = None
    """Rank 0's record: accuracy and learning rate per epoch, final accuracy (the same on every rank)."""
    verdict: Verdict | None = None


def _estimate_json(estimate: Estimate | None) -> dict | None:
    if estimate is None:
        return None
    finite = lambda x: x if math.isfinite(x) else None  # noqa: E731 - JSON has no infinity
    return {"value": estimate.value, "low": finite(estimate.low), "high": finite(estimate.high),
            "confidence": estimate.confidence, "n_steps": estimate.n_steps}


def check_settings(options: SuiteOptions) -> None:
    """Raise :class:`SuiteError` naming the first option whose value no cell could run with."""
    for name, least in AT_LEAST.items():
        value = getattr(options, name)
        if value is not None and not value >= least:
            raise SuiteError(f"--{name.replace('_', '-')} must be at least {least}, got {value}")
    for name in ABOVE_ZERO:
        value = getattr(options, name)
        if value is not None and not value > 0:
            raise SuiteError(f"--{name.replace('_', '-')} must be greater than 0, got {value}")
    if options.profile not in ("auto", *PROFILES):
        raise SuiteError(f"--profile: unknown profile {options.profile!r}; valid names: auto, {', '.join(PROFILES)}")
    if options.device not in DEVICES:
        raise SuiteError(f"--device: unknown device {options.device!r}; valid names: {', '.join(DEVICES)}")


def unwritable(directory: Path) -> str | None:
    """Why files cannot be made in ``directory`` (created with its parents if missing), or None."""
    existing = Path(os.path.abspath(directory))
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is not a directory"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable"
    return None


def _uses_gpus(device: str) -> bool:
    if device == "cpu":
        return False
    if device == "cuda":
        return True
    import torch

    return torch.cuda.is_available()


class Suite:
    def __init__(self, options: SuiteOptions):
        self.options = options
        self.results: list[CellResult] = []
        self.baseline_changes: list[str] | None = None
        self.baseline_error: str | None = None
        """Why ``--update-baselines`` could not write the file (e.g. another session held its lock)."""
        self.baselines_kept: list[str] = []
        """Cells ``--update-baselines`` did not record, each with why."""
        self.accuracy_results: list[AccuracyResult] = []
        self.cut_short: list[str] = []
        """Cells an interrupt ended before any launch of theirs was judged."""
        self._prepared = False
        check_settings(options)
        try:
            self.matrix = Matrix(
                frameworks=parse_names("--frameworks", options.frameworks, FRAMEWORKS) if options.frameworks
                else DEFAULT_MATRIX.frameworks,
                loaders=parse_names("--loaders", options.loaders, LOADERS) if options.loaders else DEFAULT_MATRIX.loaders,
                models=parse_names("--models", options.models, MODELS) if options.models else DEFAULT_MATRIX.models,
                ranks=parse_ranks(options.gpus) if options.gpus else DEFAULT_MATRIX.ranks,
            )
            if options.launcher:
                check_name("--launcher", options.launcher, LAUNCHERS)
            self.launch_environment = launch_environment(options.launch_env, options.launch_env_file, os.environ)
        except ValueError as error:
            raise SuiteError(str(error)) from None
        self._capacity: tuple[int, str] | None = None

    @functools.cached_property
    def launcher_name(self) -> str:
        return self.options.launcher or default_launcher_name()

    # -- before any process starts -------------------------------------------------------------
    def cells(self) -> list[Cell]:
        return self.matrix.cells()

    def accuracy_cells(self) -> list[AccuracyCell]:
        frameworks = self.matrix.frameworks if self.options.frameworks else ("ddp",)
        return [c for c in accuracy_cells(frameworks) if c.ranks in self.matrix.ranks or not self.options.gpus]

    @property
    def uses_gpus(self) -> bool:
        return _uses_gpus(self.options.device)

    def skip_reason(self, cell: Cell | AccuracyCell) -> str | None:
        missing = FRAMEWORKS.missing(cell.framework) or (isinstance(cell, Cell) and LOADERS.missing(cell.loader))
        if missing:
            return missing
        if isinstance(cell, Cell) and LOADERS.entry(cell.loader).needs_gpu and not self.uses_gpus:
            return f"loader {cell.loader} decodes on the GPU and this machine has none"
        capacity, where = self._rank_capacity()
        if cell.ranks > capacity:
            return f"{cell.id} needs {cell.ranks} ranks but {where}"
        return None

    def _rank_capacity(self) -> tuple[int, str]:
        if self._capacity is None:
            self._capacity = rank_capacity(self.uses_gpus)
        return self._capacity

    def workload(self) -> Workload:
        profile = self.options.profile
        if profile == "auto":
            profile = "study" if self.uses_gpus else "cpu-small"
        o = self.options
        return PROFILES[profile].replace(image_size=o.image_size, batch_size=o.batch_size, steps=o.steps,
                                         warmup_steps=o.warmup_steps, num_workers=o.num_workers,
                                         data_dir=str(self.data_dir) if self.data_dir else None,
                                         tfrecord_dir=str(self.tfrecord_dir) if self.tfrecord_dir else None)

    def prepare(self) -> None:
        """Check everything a cell needs, once, before the first cell starts."""
        if self._prepared:
            return
        options = self.options
        self._check_rank_counts()
        self._check_writable_places()
        self.data_dir, self.tfrecord_dir = self._prepare_data()
        self.launcher: Launcher = LAUNCHERS.create(self.launcher_name, environment=self.launch_environment)
        reason = self.launcher.unavailable_reason()
        if reason:
            raise SuiteError(f"launcher {self.launcher_name} is not usable: {reason}. Choose another with "
                             f"--launcher ({', '.join(LAUNCHERS.names())})")
        try:
            self.system = detect_system(options.system)
        except ValueError as error:
            raise SuiteError(str(error)) from None
        self.baselines = BaselineFile.load(options.baselines_dir / f"{self.system}.json", self.system)
        self._check_baseline_cells()
        self._check_history()
        self._workload = self.workload()
        self.cores_per_rank = self._cores_per_rank()
        self._provenance = provenance(REPO)
        self._environment = capture_environment()
        self.run_id = uuid.uuid4().hex[:12]
        self.limits = RunLimits(**{name: value for name, value in (("timeout_s", options.cell_timeout),
                                                                    ("heartbeat_s", options.hang_timeout))
                                   if value is not None})
        self._prepared = True

    def _check_rank_counts(self) -> None:
        """Counts asked for with --gpus must fit; default counts that do not are skipped (skip_reason)."""
        if not self.options.gpus:
            return
        capacity, where = self._rank_capacity()
        largest = max(self.matrix.ranks)
        if largest > capacity:
            raise SuiteError(f"--gpus {self.options.gpus}: {largest} ranks asked for, but {where}")

    def _cores_per_rank(self) -> int | None:
        """Cores each rank of a CPU cell owns: ``--cores-per-rank``, else the node's cores over the
        most ranks a cell of this session puts on one node; None for GPU cells (a rank owns its
        GPU) and where the ranks outnumber the cores (then they share them, and say so)."""
        if self.uses_gpus:
            return None
        job = allocation.from_env(os.environ)
        node_cores = min(job.cpus_per_node) if job and job.cpus_per_node else len(os.sched_getaffinity(0))
        capacity = self._rank_capacity()[0]
        largest = max((ranks for ranks in self.matrix.ranks if ranks <= capacity), default=1)
        per_node = math.ceil(largest / (job.nodes if job else 1))
        asked = self.options.cores_per_rank
        if asked is not None:
            if asked * per_node > node_cores:
                raise SuiteError(f"--cores-per-rank {asked}: the largest cell puts {per_node} rank(s) on a node of "
                                 f"{node_cores} core(s), which holds at most {node_cores // per_node} per rank")
            return asked
        return node_cores // per_node if per_node <= node_cores else None

    def _check_writable_places(self) -> None:
        """Everything the session will write must be writable before the first cell, not after it."""
        o = self.options
        places = [("--results-dir", o.workdir, o.workdir),
                  ("--results-json", o.results_json, o.results_json.parent if o.results_json else None),
                  ("--report", o.report, o.report), ("--history-dir", o.history_dir, o.history_dir),
                  ("--baselines-dir", o.baselines_dir, o.baselines_dir if o.update_baselines else None)]
        for option, given, directory in places:
            why = unwritable(directory) if directory is not None else None
            if why:
                raise SuiteError(f"{option}: cannot write {given}: {why}")

    def _check_baseline_cells(self) -> None:
        """A baseline entry for no cell this dlscale knows (a typo, a renamed model) would silently
        never be judged: refuse the file until it is corrected."""
        for cell_id in self.baselines.data["cells"]:
            try:
                parse_cell_id(cell_id)
            except ValueError as error:
                raise SuiteError(f"baseline file {self.baselines.path}: {error}; correct or remove that entry") from None

    def _check_history(self) -> None:
        """Refuse to append to a history file holding a line dlscale does not write: something else
        writes there. A line an interrupted run cut short is expected (history/README.md, "Damage")."""
        if self.options.history_dir is None:
            return
        path = self.options.history_dir / f"{self.system}.jsonl"
        try:
            _, problems = read_history(path)
        except OSError as error:
            raise SuiteError(f"history file {path} cannot be read: {error.strerror}") from None
        foreign = [problem for problem in problems if not problem.torn]
        if foreign:
            others = f", nor are {len(foreign) - 1} other line(s)" if len(foreign) > 1 else ""
            raise SuiteError(f"history file {path} line {foreign[0].line} is not a line dlscale writes "
                             f"({foreign[0].why}){others}; delete it, or pass another --history-dir or --no-history")

    def _prepare_data(self) -> tuple[Path | None, Path | None]:
        """The ImageFolder tree and the TFRecord shards the matrix reads, checked or generated."""
        loaders = {cell.loader for cell in self.cells()}
        needs_folder = bool(loaders & FILE_LOADERS)
        needs_tfrecord = bool(loaders & TFRECORD_LOADERS)
        options = self.options
        folder = tfrecord = None
        try:
            if options.data is not None and (needs_folder or needs_tfrecord):
                folder = _given_data("--data", options.data, validate_image_folder)
            elif needs_folder or (needs_tfrecord and options.data_tfrecord is None):
                folder = ensure(DEFAULT_DATASET, classes=100, per_class=24, size=96)
            if needs_tfrecord and options.data_tfrecord is not None:
                tfrecord = _given_data("--data-tfrecord", options.data_tfrecord, open_tfrecord_set)
            elif needs_tfrecord and options.data is not None:
                raise SuiteError("the -tfrecord loaders read TFRecord shards: pass --data-tfrecord DIR (make one "
                                 f"from your ImageFolder with: python -m harness.tfrecord --from {options.data} "
                                 "--to DIR)")
            elif needs_tfrecord:
                tfrecord = convert(folder, DEFAULT_DATASET.with_name(DEFAULT_DATASET.name + "-tfrecord"))
        except (DatasetError, TFRecordError) as error:
            raise SuiteError(str(error)) from None
        return folder, tfrecord

    # -- measuring -------------------------------------------------------------------------------
    def measure(self, cell: Cell, on_progress: Callable[[str], None] | None = None) -> CellResult:
        """Launch the cell until its throughput interval is narrow enough and its verdict is not
        inconclusive, or until its measuring budget is spent; judge the pooled samples."""
        self.prepare()
        result = CellResult(cell=cell, runs=[], config_hash=self._workload.config_hash(cell))
        started = time.monotonic()
        try:
            while True:
                run = run_cell(cell, self._workload, self.launcher, workdir=self.options.workdir,
                               limits=self.limits, spec_extra=self._spec_extra(), on_progress=on_progress)
                with INTERRUPTS.protect(raise_pending=False):  # a judged launch is kept whole
                    result.runs.append(run)
                    if run.ok:
                        self._evaluate(result)
                if not run.ok or self._measured_enough(result, started, run.wall_s):
                    break
                if on_progress:
                    on_progress(f"{cell.id}: measuring again (interval +-{result.throughput.half_width_rel:.1%}, "
                                f"verdict {result.verdict})")
        except BaseException:
            if not result.runs:
                self.cut_short.append(cell.id)
            raise
        finally:
            with INTERRUPTS.protect():
                self._record(result)
        return result

    def _spec_extra(self) -> dict:
        extra = {"device": self.options.device}
        if self.options.fault:
            extra["fault"] = self.options.fault
        if self.cores_per_rank:
            extra["cores_per_rank"] = self.cores_per_rank
        return extra

    def _measured_enough(self, result: CellResult, started: float, last_wall_s: float) -> bool:
        return measured_enough(result.throughput, result.verdict, precision=self.options.precision,
                               spent_s=time.monotonic() - started, next_launch_s=last_wall_s,
                               budget_s=self.options.measure_budget)

    def _record(self, result: CellResult) -> None:
        """Keep a cell with at least one launch: in the results, the history and the results file.
        An interrupt during a further launch keeps the launches already judged."""
        if not result.runs or (result.run.ok and result.metrics is None):
            return  # nothing launched, or judging it failed
        self.results.append(result)
        self._append_history(result)
        if self.options.results_json:
            self.write_results(self.options.results_json)

    def _append_history(self, result: CellResult) -> None:
        """One line per measured cell in ``history/<system>.jsonl``, written as soon as it is known."""
        if self.options.history_dir is None:
            return
        row = make_row(result.cell.id, run_id=self.run_id, verdict=result.verdict, throughput=result.throughput,
                       efficiency=result.efficiency, git_commit=self._provenance["git_commit"],
                       fingerprint=fingerprint_hash(result.fingerprint) if result.fingerprint else None,
                       launcher=result.run.launcher, ranks=result.cell.ranks, runs=len(result.runs),
                       yardstick_s=round(result.yardstick.seconds, 6) if result.yardstick else None,
                       machine_speed=result.machine_speed, cpu_wait_share=result.cpu_wait_share)
        append_history(self.options.history_dir / f"{self.system}.jsonl", [row])

    def _evaluate(self, result: CellResult) -> None:
        trimmed = [trim_warmup(run.records) for run in result.runs]
        result.warmup_dropped = [dropped for _, dropped in trimmed]
        result.records, result.contended_runs = pool_uncontended([records for records, _ in trimmed],
                                                                 self._baseline_wait(result))
        result.metrics = summarize(result.records)
        result.fingerprint = fingerprint(result.records, dataclasses.asdict(self._workload), result.cell.id,
                                         config_hash=result.config_hash)
        result.breakdown = cell_breakdown(result.records) if has_breakdown(result.records) else None
        result.yardstick = from_records(result.records)
        result.cpu_wait_share = wait_share(result.records)
        result.outside_share = outside_share(result.records)
        result.throughput = throughput_interval(*self._samples(result))
        result.efficiency, result.efficiency_source = self._efficiency(result)
        result.verdicts = self._judge(result)

    @staticmethod
    def _samples(result: CellResult) -> tuple[list[list[float]], list[int]]:
        return step_samples(result.records)

    def _reference_cell(self, cell: Cell) -> Cell:
        return dataclasses.replace(cell, ranks=min(self.matrix.ranks))

    def _efficiency(self, result: CellResult) -> tuple[Estimate | None, str | None]:
        reference = self._reference_cell(result.cell)
        if reference == result.cell:
            return Estimate(value=1.0, low=1.0, high=1.0), "by definition"
        steps, batches = self._samples(result)
        for earlier in reversed(self.results):
            if earlier.cell == reference and earlier.metrics:
                ref_steps, ref_batches = self._samples(earlier)
                return efficiency_interval(steps, batches, ref_steps, ref_batches), "measured"
        baseline = self.baselines.reference(reference.id, "throughput")
        if baseline:
            exact = Estimate(value=baseline.value, low=baseline.value, high=baseline.value)
            return efficiency_interval(steps, batches, exact, reference_ranks=reference.ranks), "baseline"
        return None, None

    def _judge(self, result: CellResult) -> list[Verdict]:
        evidence = Evidence(cell_id=result.cell.id, config_hash=result.config_hash,
                            config=dataclasses.asdict(self._workload), throughput=result.throughput,
                            efficiency=result.efficiency, efficiency_source=result.efficiency_source,
                            fingerprint=result.fingerprint, yardstick=result.yardstick,
                            cpu_wait_share=result.cpu_wait_share, outside_share=result.outside_share,
                            breakdown=result.breakdown)
        references = {metric: self.baselines.reference(result.cell.id, metric) for metric in ("throughput", "efficiency")}
        judgement = judge_cell(evidence, self.baselines.entry(result.cell.id), references,
                               use_yardstick=self.options.yardstick, baseline_path=str(self.baselines.path),
                               baseline_wait=self._baseline_wait(result))
        result.machine_speed, result.stack_changes = judgement.machine_speed, judgement.stack_changes
        return judgement.verdicts

    def _baseline_wait(self, result: CellResult) -> float | None:
        entry = self.baselines.entry(result.cell.id) or {}
        share = entry.get("cpu_wait_share")
        return float(share) if isinstance(share, (int, float)) and not isinstance(share, bool) else None

    def measure_accuracy(self, cell: AccuracyCell,
                         on_progress: Callable[[str], None] | None = None) -> "AccuracyResult":
        """Train the accuracy task once under the cell's framework; judge its final accuracy."""
        self.prepare()
        run = run_cell(cell, None, self.launcher, workdir=self.options.workdir, limits=self.limits,
                       spec_extra={"task": "accuracy", "accuracy": dataclasses.asdict(ACCURACY_SETTINGS),
                                   "device": self.options.device}, on_progress=on_progress)
        result = AccuracyResult(cell=cell, run=run, config_hash=ACCURACY_SETTINGS.config_hash(cell))
        if run.ok:
            result.outcome = min(run.records, key=lambda r: r["rank"])
            entry = self.baselines.entry(cell.id)
            measured = Estimate(value=result.outcome["final_val_accuracy"], low=result.outcome["final_val_accuracy"],
                                high=result.outcome["final_val_accuracy"])
            if entry is not None and entry.get("config_hash") not in (None, result.config_hash):
                result.verdict = Verdict(kind="stale", message="baseline measured with other accuracy settings")
            else:
                result.verdict = judge(measured, self.baselines.reference(cell.id, "accuracy"), metric="accuracy")
        self.accuracy_results.append(result)
        return result

    # -- after the cells -------------------------------------------------------------------------
    def results_document(self) -> dict:
        return {
            "system": getattr(self, "system", None), "launcher": self.launcher_name, "run_id": self.run_id,
            "cores_per_rank": getattr(self, "cores_per_rank", None),
            "workload": dataclasses.asdict(self._workload) if self._prepared else None,
            "provenance": self._provenance, "environment": self._environment,
            "launch_environment": self.launch_environment,
            "cells": [result.to_json() for result in self.results],
        }

    def write_results(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, self.results_document())

    def update_baselines(self) -> list[str]:
        """Write the completed cells into the baseline file. A cell measured several times
        (``--repeat``) is stored as the mean of its repeats with a band derived from their spread
        (:mod:`harness.recording`)."""
        by_cell: dict[Cell, list[CellResult]] = {}
        for result in self.results:
            by_cell.setdefault(result.cell, []).append(result)
        entries = []
        for results in by_cell.values():
            if not all(r.ok for r in results):
                continue  # a cell that failed in any repeat keeps its old baseline
            why_not = why_not_recorded(results, accept_regressions=self.options.accept_regressions,
                                       widest=self.options.widest_baseline)
            if why_not:
                self.baselines_kept.append(f"{results[0].cell.id}: {why_not}")
                continue
            entries.append(baseline_entry(results, config=dataclasses.asdict(self._workload),
                                          provenance=self._provenance, band_floor=self.options.band_floor,
                                          use_yardstick=self.options.yardstick))
        for result in self.accuracy_results:
            if result.outcome:
                entries.append({"cell": result.cell.id, "metrics": {"accuracy": result.outcome["final_val_accuracy"]},
                                "config_hash": result.config_hash, "config": dataclasses.asdict(ACCURACY_SETTINGS),
                                "provenance": {**self._provenance, "launcher": result.run.launcher,
                                               "ranks": result.cell.ranks}})
        if not entries:
            return []
        return self.baselines.update(entries)

    def accuracy_rows(self) -> list[list[str]]:
        """Final validation accuracy, one row per schedule, one column per global batch."""
        batches = sorted({r.cell.global_batch for r in self.accuracy_results})
        rows = [["schedule"] + [f"batch {b}" for b in batches]]
        for schedule in dict.fromkeys(r.cell.schedule for r in self.accuracy_results):
            row = [schedule]
            for batch in batches:
                found = [r for r in self.accuracy_results if r.cell.schedule == schedule and r.cell.global_batch == batch]
                row.append(", ".join(f"{r.outcome['final_val_accuracy']:.1%} ({r.verdict.kind})" if r.outcome
                                     else f"error ({r.run.status})" for r in found) or "-")
            rows.append(row)
        return rows

    def write_accuracy_plots(self, directory: Path) -> list[Path]:
        from .plots_accuracy import write_all

        outcomes = [r.outcome for r in self.accuracy_results if r.outcome]
        return write_all(outcomes, directory) if outcomes else []

    def summary_rows(self) -> list[list[str]]:
        rows = [["cell", "launcher", "img/s (95% CI)", "img/s/rank", "E_G (95% CI)", "baseline img/s", "delta",
                 "machine", "runs", "verdict"]]
        for r in self.results:
            reference = self.baselines.reference(r.cell.id, "throughput") if self._prepared else None
            baseline = f"{reference.value:.1f}" if reference else "-"
            if r.metrics is None:
                rows.append([r.cell.id, r.run.launcher, "-", "-", "-", baseline, "-", "-", str(len(r.runs)),
                             f"error ({r.run.status})"])
                continue
            if reference is None:
                delta = "-"
            elif r.verdict == "machine-differs":  # normalising across machines means nothing: as measured
                delta = f"{r.throughput.value / reference.value - 1:+.1%} raw"
            else:
                delta = f"{normalise(r.throughput.value, r.machine_speed) / reference.value - 1:+.1%}"
            machine = f"{r.machine_speed - 1:+.1%}" if r.machine_speed else "-"
            efficiency = _format_interval(r.efficiency, 3) if r.efficiency else "-"
            if r.efficiency_source == "baseline":
                efficiency += " (ref: baseline)"
            rows.append([r.cell.id, r.run.launcher, _format_interval(r.throughput, 1),
                         f"{r.throughput.value / r.cell.ranks:.1f}", efficiency, baseline, delta, machine,
                         f"{len(r.runs)} ({r.contended_runs} contended, left out)" if r.contended_runs else str(len(r.runs)),
                         r.verdict])
        return rows


def _given_data(option: str, path: Path, check: Callable[[Path], object]) -> Path:
    try:
        check(Path(path))
    except (DatasetError, TFRecordError) as error:
        raise SuiteError(f"{option}: {error}") from None
    return Path(path).resolve()


def _format_interval(estimate: Estimate, digits: int) -> str:
    if estimate.low == estimate.high:
        return f"{estimate.value:.{digits}f}"
    if estimate.too_few_samples:
        return f"{estimate.value:.{digits}f} [no CI]"
    return f"{estimate.value:.{digits}f} [{estimate.low:.{digits}f}, {estimate.high:.{digits}f}]"


def format_table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)
