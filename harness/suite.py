"""One scaling-suite session: the settings from the command line, each cell's measurement and
verdict, the results file, the baseline update and the summary table. Free of pytest."""
from __future__ import annotations

import dataclasses
import functools
import os
from pathlib import Path
from typing import Callable

from .baselines import BaselineFile, Verdict, judge
from .cells import DEFAULT_MATRIX, PROFILES, Cell, Matrix, Workload, parse_list, parse_ranks
from .dataset import DatasetError, ensure, validate_image_folder
from .jsonio import write_json_atomic
from .launchers import LAUNCHERS, Launcher, default_launcher_name
from .frameworks import FRAMEWORKS
from .loaders import FILE_LOADERS, LOADERS, TFRECORD_LOADERS
from .metrics import CellMetrics, parallel_efficiency, summarize
from .provenance import provenance
from .runner import CellRun, RunLimits, run_cell
from .system import detect_system, rank_capacity
from .tfrecord import TFRecordError, convert, open_tfrecord_set

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATASET = Path(os.environ.get("DLSCALE_CACHE", Path.home() / ".cache" / "dlscale")) / "dataset"


class SuiteError(ValueError):
    """A setting or input that stops the suite before any process starts."""


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
    cell_timeout: float | None = None
    hang_timeout: float | None = None


@dataclasses.dataclass(kw_only=True)
class CellResult:
    cell: Cell
    run: CellRun
    metrics: CellMetrics | None
    efficiency: float | None
    efficiency_source: str | None
    """"measured" (reference cell in this run), "baseline", or "by definition" (the reference cell)."""
    verdicts: list[Verdict]
    config_hash: str

    @property
    def verdict(self) -> str:
        if not self.run.ok:
            return "error"
        kinds = [v.kind for v in self.verdicts]
        for kind in ("fail", "stale", "no-baseline", "faster"):
            if kind in kinds:
                return kind
        return "pass"

    def to_json(self) -> dict:
        return {
            "cell": self.cell.id, "launcher": self.run.launcher, "status": self.run.status, "error": self.run.error,
            "wall_s": round(self.run.wall_s, 3), "command": self.run.command,
            "metrics": dataclasses.asdict(self.metrics) if self.metrics else None,
            "efficiency": self.efficiency, "efficiency_source": self.efficiency_source,
            "verdict": self.verdict, "verdicts": [dataclasses.asdict(v) for v in self.verdicts],
            "config_hash": self.config_hash, "orphans_killed": self.run.orphans_killed, "records": self.run.records,
        }


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
        self._prepared = False
        try:
            self.matrix = Matrix(
                frameworks=parse_list(options.frameworks) if options.frameworks else DEFAULT_MATRIX.frameworks,
                loaders=parse_list(options.loaders) if options.loaders else DEFAULT_MATRIX.loaders,
                models=parse_list(options.models) if options.models else DEFAULT_MATRIX.models,
                ranks=parse_ranks(options.gpus) if options.gpus else DEFAULT_MATRIX.ranks,
            )
            if options.launcher:
                LAUNCHERS.check(options.launcher)
        except ValueError as error:
            raise SuiteError(str(error)) from None
        self._capacity: tuple[int, str] | None = None

    @functools.cached_property
    def launcher_name(self) -> str:
        return self.options.launcher or default_launcher_name()

    # -- before any process starts -------------------------------------------------------------
    def cells(self) -> list[Cell]:
        return self.matrix.cells()

    @property
    def uses_gpus(self) -> bool:
        return _uses_gpus(self.options.device)

    def skip_reason(self, cell: Cell) -> str | None:
        missing = FRAMEWORKS.missing(cell.framework) or LOADERS.missing(cell.loader)
        if missing:
            return missing
        if LOADERS.entry(cell.loader).needs_gpu and not self.uses_gpus:
            return f"loader {cell.loader} decodes on the GPU and this machine has none"
        if self._capacity is None:
            self._capacity = rank_capacity(self.uses_gpus)
        capacity, where = self._capacity
        if cell.ranks > capacity:
            return f"{cell.id} needs {cell.ranks} ranks but {where}"
        return None

    def workload(self) -> Workload:
        profile = self.options.profile
        if profile == "auto":
            profile = "study" if self.uses_gpus else "cpu-small"
        if profile not in PROFILES:
            raise SuiteError(f"unknown profile {profile!r}; valid names: auto, {', '.join(PROFILES)}")
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
        self.data_dir, self.tfrecord_dir = self._prepare_data()
        self.launcher: Launcher = LAUNCHERS.create(self.launcher_name)
        reason = self.launcher.unavailable_reason()
        if reason:
            raise SuiteError(f"launcher {self.launcher_name} is not usable: {reason}. Choose another with "
                             f"--launcher ({', '.join(LAUNCHERS.names())})")
        try:
            self.system = detect_system(options.system)
        except ValueError as error:
            raise SuiteError(str(error)) from None
        self.baselines = BaselineFile.load(options.baselines_dir / f"{self.system}.json", self.system)
        self._workload = self.workload()
        self.limits = RunLimits(**{name: value for name, value in (("timeout_s", options.cell_timeout),
                                                                    ("heartbeat_s", options.hang_timeout))
                                   if value is not None})
        self._prepared = True

    def _prepare_data(self) -> tuple[Path | None, Path | None]:
        """The ImageFolder tree and the TFRecord shards the matrix reads, checked or generated."""
        loaders = {cell.loader for cell in self.cells()}
        needs_folder = bool(loaders & FILE_LOADERS)
        needs_tfrecord = bool(loaders & TFRECORD_LOADERS)
        options = self.options
        folder = tfrecord = None
        try:
            if options.data is not None and (needs_folder or needs_tfrecord):
                validate_image_folder(options.data)
                folder = Path(options.data).resolve()
            elif needs_folder or (needs_tfrecord and options.data_tfrecord is None):
                folder = ensure(DEFAULT_DATASET, classes=100, per_class=24, size=96)
            if needs_tfrecord and options.data_tfrecord is not None:
                tfrecord = Path(options.data_tfrecord).resolve()
                open_tfrecord_set(tfrecord)
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
        self.prepare()
        workload = self._workload
        run = run_cell(cell, workload, self.launcher, workdir=self.options.workdir, limits=self.limits,
                       spec_extra={"device": self.options.device}, on_progress=on_progress)
        metrics = summarize(run.records) if run.ok else None
        result = CellResult(cell=cell, run=run, metrics=metrics, efficiency=None, efficiency_source=None,
                            verdicts=[], config_hash=workload.config_hash(cell))
        if metrics:
            result.efficiency, result.efficiency_source = self._efficiency(cell, metrics)
            result.verdicts = self._judge(result)
        self.results.append(result)
        if self.options.results_json:
            self.write_results(self.options.results_json)
        return result

    def _reference_cell(self, cell: Cell) -> Cell:
        smallest = min(self.matrix.ranks)
        return dataclasses.replace(cell, ranks=smallest)

    def _efficiency(self, cell: Cell, metrics: CellMetrics) -> tuple[float | None, str | None]:
        reference = self._reference_cell(cell)
        if reference == cell:
            return 1.0, "by definition"
        for earlier in self.results:
            if earlier.cell == reference and earlier.metrics:
                return parallel_efficiency(metrics.throughput, cell.ranks, earlier.metrics.throughput,
                                           reference.ranks), "measured"
        baseline = self.baselines.reference(reference.id, "throughput")
        if baseline:
            return parallel_efficiency(metrics.throughput, cell.ranks, baseline.value, reference.ranks), "baseline"
        return None, None

    def _judge(self, result: CellResult) -> list[Verdict]:
        entry = self.baselines.entry(result.cell.id)
        if entry is None:
            return [Verdict(kind="no-baseline", message=f"no baseline for {result.cell.id} in {self.baselines.path}")]
        if entry.get("config_hash") not in (None, result.config_hash):
            differs = _config_differences(entry.get("config", {}), dataclasses.asdict(self._workload))
            return [Verdict(kind="stale", message=f"baseline measured with another configuration ({differs}); "
                                                  "re-record it with --update-baselines")]
        verdicts = [judge(result.metrics.throughput, self.baselines.reference(result.cell.id, "throughput"),
                          metric="throughput")]
        efficiency_reference = self.baselines.reference(result.cell.id, "efficiency")
        if result.efficiency is not None and efficiency_reference and result.efficiency_source != "by definition":
            verdicts.append(judge(result.efficiency, efficiency_reference, metric="efficiency"))
        return verdicts

    # -- after the cells -------------------------------------------------------------------------
    def write_results(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, {
            "system": getattr(self, "system", None), "launcher": self.launcher_name,
            "workload": dataclasses.asdict(self._workload) if self._prepared else None,
            "provenance": provenance(REPO),
            "cells": [result.to_json() for result in self.results],
        })

    def update_baselines(self) -> list[str]:
        completed = [r for r in self.results if r.metrics]
        if not completed:
            return []
        shared = provenance(REPO)
        entries = [{
            "cell": r.cell.id,
            "metrics": {"throughput": r.metrics.throughput,
                        "efficiency": r.efficiency if r.efficiency_source == "measured" else None},
            "config_hash": r.config_hash,
            "config": dataclasses.asdict(self._workload),
            "provenance": {**shared, "launcher": r.run.launcher, "ranks": r.cell.ranks},
        } for r in completed]
        data, changes = self.baselines.updated(entries)
        self.baselines.write(data)
        return changes

    def summary_rows(self) -> list[list[str]]:
        rows = [["cell", "launcher", "img/s", "img/s/rank", "E_G", "baseline img/s", "delta", "verdict"]]
        for r in self.results:
            reference = self.baselines.reference(r.cell.id, "throughput") if self._prepared else None
            if r.metrics:
                delta = f"{r.metrics.throughput / reference.value - 1:+.1%}" if reference else "-"
                efficiency = f"{r.efficiency:.3f}" if r.efficiency is not None else "-"
                if r.efficiency_source == "baseline":
                    efficiency += " (ref: baseline)"
                rows.append([r.cell.id, r.run.launcher, f"{r.metrics.throughput:.1f}", f"{r.metrics.per_rank:.1f}",
                             efficiency, f"{reference.value:.1f}" if reference else "-", delta, r.verdict])
            else:
                rows.append([r.cell.id, r.run.launcher, "-", "-", "-", f"{reference.value:.1f}" if reference else "-",
                             "-", f"error ({r.run.status})"])
        return rows


def _config_differences(old: dict, new: dict) -> str:
    keys = sorted((set(old) | set(new)) - {"data_dir", "tfrecord_dir"})
    diffs = [f"{key}: {old.get(key)!r} -> {new.get(key)!r}" for key in keys if old.get(key) != new.get(key)]
    return ", ".join(diffs) or "framework, loader or model settings"


def format_table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)
