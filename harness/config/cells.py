"""The matrix of cells the suite measures, defined once, as data (what one cell is:
:class:`harness.rank.cell.Cell`)."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from typing import Any, Mapping

from harness.common.registry import Registry
from harness.rank.cell import Cell
from harness.rank.frameworks import FRAMEWORKS, has_servers, numerics_unsupported
from harness.rank.loaders import LOADERS
from harness.rank.models import MODELS
from harness.rank.numerics import DEFAULT_DTYPE, DTYPES, Numerics
from harness.rank.workload import Workload


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class DatasetShape:
    """The generated dataset a profile's file-reading loaders read (:func:`harness.data.dataset.ensure`)."""

    name: str
    """Its directory under the cache; its TFRecord shards go beside it as ``<name>-tfrecord``."""
    classes: int
    per_class: int
    size: int
    """Side of each JPEG in pixels."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Profile:
    """A named workload preset (``--workload-profile``): what each rank trains with, on which generated data."""

    workload: Workload
    dataset: DatasetShape
    models: tuple[str, ...] = ("resnet50",)
    """The models measured when ``--models`` names none."""


IMAGENET_LIKE = DatasetShape(name="dataset", classes=100, per_class=24, size=96)

PROFILES: Mapping[str, Profile] = {
    # The study's settings (ImageNet-sized images, 64 per GPU).
    "study": Profile(workload=Workload(), dataset=IMAGENET_LIKE),
    # Small enough that a CPU-only machine measures the whole matrix in minutes.
    "cpu-small": Profile(workload=Workload(image_size=32, batch_size=16, warmup_steps=5, steps=50, num_workers=2,
                                           num_classes=100, dali_threads=2),
                         dataset=IMAGENET_LIKE),
    # Seeds 002 and 003's workload: ResNet44 on CIFAR-10-shaped data (32x32 RGB JPEGs, 10 classes).
    "cpu-cifar": Profile(workload=Workload(image_size=32, batch_size=32, warmup_steps=5, steps=50, num_workers=2,
                                           num_classes=10, dali_threads=2),
                         dataset=DatasetShape(name="dataset-cifar", classes=10, per_class=240, size=32),
                         models=("resnet44",)),
}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Matrix:
    frameworks: tuple[str, ...] = ("ddp", "horovod", "deepspeed", "deepspeed_zero1", "deepspeed_zero2")
    loaders: tuple[str, ...] = ("synthetic", "native", "dali-cpu", "dali-cpu-tfrecord")
    models: tuple[str, ...] = ("resnet50",)
    ranks: tuple[int, ...] = (1, 2)
    dtypes: tuple[str, ...] = (DEFAULT_DTYPE,)
    channels_last: bool = False
    compiled: bool = False

    def __post_init__(self) -> None:
        for registry, names in ((FRAMEWORKS, self.frameworks), (LOADERS, self.loaders), (MODELS, self.models)):
            for name in names:
                registry.check(name)
        if any(r < 1 for r in self.ranks):
            raise ValueError(f"rank counts must be positive, got {list(self.ranks)}")
        for dtype in self.dtypes:
            Numerics(dtype=dtype)

    def numerics(self) -> list[Numerics]:
        return [Numerics(dtype=dtype, channels_last=self.channels_last, compiled=self.compiled)
                for dtype in self.dtypes]

    def cells(self) -> list[Cell]:
        """Every cell, each series' rank counts in increasing order so references come first. A
        framework meets only the loaders, models and numerics its runtime implements (TensorFlow has
        no DALI loader here, torch no native TFRecord reader, only torch's frameworks train in bf16):
        other combinations are no cell at all."""
        return [Cell(framework=f, loader=l, model=m, ranks=g, **dataclasses.asdict(n))
                for f in self.frameworks for l in self.loaders for m in self.models for n in self.numerics()
                if implemented(f, l, m, n) for g in sorted(set(self.ranks))]

    def unimplemented(self) -> list[str]:
        """The framework x loader x model series (and numerics) of the matrix that no runtime implements."""
        return ["-".join((f, l, m, *n.words)) for f in self.frameworks for l in self.loaders for m in self.models
                for n in self.numerics() if not implemented(f, l, m, n)]


def implemented(framework: str, loader: str, model: str, numerics: Numerics = Numerics()) -> bool:
    """Whether the framework's runtime has the loader and the model, and the framework trains in
    ``numerics`` (on some device: a GPU-only dtype is the session's to refuse on CPUs)."""
    runtime = FRAMEWORKS.entry(framework).runtime
    return (LOADERS.target(loader, runtime) is not None and MODELS.target(model, runtime) is not None
            and numerics_unsupported(framework, numerics, gpu=None) is None)


DEFAULT_MATRIX = Matrix(
    frameworks=("ddp", "horovod", "deepspeed", "deepspeed_zero1", "deepspeed_zero2", "tensorflow", "horovod_tf",
                "mxnet"),
    loaders=("synthetic", "native", "native-tfrecord", "dali-cpu", "dali-cpu-tfrecord"))


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class AccuracyCell:
    """One accuracy run: a learning-rate schedule at one global batch (per-rank batch x ranks)."""

    framework: str
    schedule: str
    batch_per_rank: int
    ranks: int
    servers: int = 0
    """Parameter servers among the ranks (the last ones): they train nothing."""

    @property
    def training_ranks(self) -> int:
        return self.ranks - self.servers

    @property
    def global_batch(self) -> int:
        return self.batch_per_rank * self.training_ranks

    @property
    def id(self) -> str:
        return f"accuracy-{self.framework}-{self.schedule}-b{self.global_batch}-g{self.ranks}"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class AccuracySettings:
    """The accuracy task's training settings, the same for every accuracy cell of a run."""

    epochs: int = 8
    warmup_epochs: float = 0.5
    base_lr: float = 0.05
    """Learning rate at ``reference_batch`` images per step, scaled linearly with the global batch."""
    reference_batch: int = 32
    label_smoothing: float = 0.1
    seed: int = 1234

    def config_hash(self, cell: AccuracyCell) -> str:
        fields = dataclasses.asdict(cell)
        if not cell.servers:  # as before cells had servers: their baselines stay current
            del fields["servers"]
        return short_hash({**dataclasses.asdict(self), **fields})


ACCURACY_SCHEDULES = ("step", "cosine", "exponential")
# (per-rank batch, ranks): global batches of 32 to 1024 on at most 2 ranks, so that the study's
# finding (accuracy falls as the global batch grows at a fixed number of epochs) shows on one node.
ACCURACY_BATCHES = ((32, 1), (64, 2), (256, 2), (512, 2))


def accuracy_cells(frameworks: tuple[str, ...] = ("ddp",)) -> list[AccuracyCell]:
    """Each framework at the same global batches; a parameter-server framework's cells add one server
    to the ranks that train, so that a batch's cells of every framework train alike."""
    return [AccuracyCell(framework=f, schedule=s, batch_per_rank=b, ranks=g + servers, servers=servers)
            for f in frameworks for servers in [1 if has_servers(f) else 0]
            for s in ACCURACY_SCHEDULES for b, g in ACCURACY_BATCHES]


def parse_list(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def parse_names(option: str, text: str, registry: Registry) -> tuple[str, ...]:
    """The comma-separated names an option gives, each one ``registry`` knows."""
    names = parse_list(text)
    if not names:
        raise ValueError(f"{option}: no name given; valid names: {', '.join(registry.names())}")
    for name in names:
        check_name(option, name, registry)
    return names


def check_name(option: str, name: str, registry: Registry) -> None:
    try:
        registry.check(name)
    except ValueError as error:
        raise ValueError(f"{option}: {error}") from None


def parse_dtypes(text: str) -> tuple[str, ...]:
    dtypes = parse_list(text)
    if not dtypes or (unknown := [dtype for dtype in dtypes if dtype not in DTYPES]):
        raise ValueError(f"--dtypes: unknown dtype {unknown[0]!r}; valid names: {', '.join(DTYPES)}" if dtypes
                         else f"--dtypes: no name given; valid names: {', '.join(DTYPES)}")
    return dtypes


def parse_ranks(text: str) -> tuple[int, ...]:
    usage = f"--gpus takes comma-separated positive rank counts such as 1,2,4; got {text!r}"
    try:
        ranks = tuple(int(part) for part in parse_list(text))
    except ValueError:
        raise ValueError(usage) from None
    if not ranks or any(r < 1 for r in ranks):
        raise ValueError(usage)
    return ranks


_CELL_ID = re.compile(r"(?P<rest>.+)-g(?P<ranks>[1-9][0-9]*)")
_ACCURACY_ID = re.compile(r"accuracy-(?P<framework>[^-]+)-(?P<schedule>[^-]+)-b(?P<batch>[1-9][0-9]*)")


def parse_cell_id(cell_id: str) -> Cell | AccuracyCell:
    """The cell an id names (a baseline file's key); ``ValueError`` says why it names none here."""
    try:
        match = _CELL_ID.fullmatch(cell_id)
        if not match:
            raise ValueError("not of the form <framework>-<loader>-<model>-g<ranks>")
        if match["rest"].startswith("accuracy-"):
            return _parse_accuracy_id(match["rest"], int(match["ranks"]))
        return _parse_cell_id(match["rest"], int(match["ranks"]))
    except ValueError as error:
        raise ValueError(f"cell id {cell_id!r}: {error}") from None


def scaling_cell(cell_id: str) -> Cell | None:
    """The :class:`Cell` behind ``<framework>-<loader>-<model>-g<ranks>`` without checking its names
    against the registries (a baseline may name a backend this installation lacks); ``None`` for
    an accuracy cell's id or one of another form. Framework and model names hold no ``-``; loader
    names may (``dali-cpu-tfrecord``)."""
    match = _CELL_ID.fullmatch(cell_id)
    if not match or cell_id.startswith("accuracy-"):
        return None
    return _split_cell_id(match["rest"], int(match["ranks"]))


def _split_cell_id(rest: str, ranks: int) -> Cell | None:
    """Framework and model names hold no ``-``; loader names may (``dali-cpu-tfrecord``); the
    numerics' words, when there are any, follow the model."""
    framework, *words = rest.split("-")
    numerics, words = Numerics.from_words(words)
    if len(words) < 2:
        return None
    return Cell(framework=framework, loader="-".join(words[:-1]), model=words[-1], ranks=ranks,
                **dataclasses.asdict(numerics))


def _parse_cell_id(rest: str, ranks: int) -> Cell:
    cell = _split_cell_id(rest, ranks)
    if cell is None:
        raise ValueError("not of the form <framework>-<loader>-<model>-g<ranks>")
    Matrix(frameworks=(cell.framework,), loaders=(cell.loader,), models=(cell.model,), ranks=(ranks,))  # names known?
    if reason := numerics_unsupported(cell.framework, cell.numerics, gpu=None):
        raise ValueError(reason)
    return cell


def _parse_accuracy_id(rest: str, ranks: int) -> AccuracyCell:
    match = _ACCURACY_ID.fullmatch(rest)
    if match:
        FRAMEWORKS.check(match["framework"])
    servers = 1 if match and has_servers(match["framework"]) else 0  # as accuracy_cells makes them
    if not match or ranks <= servers or int(match["batch"]) % (ranks - servers):
        raise ValueError("not of the form accuracy-<framework>-<schedule>-b<global batch>-g<ranks>, the batch a "
                         "multiple of the training ranks")
    if match["schedule"] not in ACCURACY_SCHEDULES:
        raise ValueError(f"unknown schedule {match['schedule']!r}; valid names: {', '.join(ACCURACY_SCHEDULES)}")
    return AccuracyCell(framework=match["framework"], schedule=match["schedule"],
                        batch_per_rank=int(match["batch"]) // (ranks - servers), ranks=ranks, servers=servers)


WHERE_DATA_LIVES = ("data_dir", "tfrecord_dir")
"""Workload fields that say where the data is, not what is measured: in no configuration hash."""


def _knobs() -> dict[str, set[str]]:
    """Each backend-specific workload field -> the backends (framework, loader and model names)
    that read it."""
    owners: dict[str, set[str]] = {}
    for registry in (FRAMEWORKS, LOADERS, MODELS):
        for name in registry.names():
            for knob in registry.entry(name).knobs:
                owners.setdefault(knob, set()).add(name)
    return owners


def measured_config(workload: Mapping[str, Any], cell: Cell | None) -> dict[str, Any]:
    """The workload fields that change what ``cell`` measures: all of them except where the data
    lives and the knobs only other backends read (a DALI thread count is not a DDP-synthetic
    cell's). For no cell (an id of another form) every knob counts."""
    knobs = _knobs()
    used = {cell.framework, cell.loader, cell.model} if cell else set().union(*knobs.values())
    return {key: value for key, value in workload.items()
            if key not in WHERE_DATA_LIVES and (key not in knobs or knobs[key] & used)}


def config_hash(workload: Mapping[str, Any], cell: Cell) -> str:
    """Hash of everything that changes what a cell measures, except the rank count (numerics at
    their defaults left out, so that the baselines recorded before they existed stay current)."""
    return short_hash({**measured_config(workload, cell),
                       "framework": cell.framework, "loader": cell.loader, "model": cell.model, **numerics_of(cell)})


def numerics_of(cell: Cell) -> dict[str, Any]:
    """The cell's numerics that are not the defaults (:mod:`harness.rank.numerics`), by field."""
    return {key: value for key, value in cell.to_spec().items() if key not in ("framework", "loader", "model", "ranks")}


def short_hash(fields: Mapping[str, Any]) -> str:
    """16 hex digits of the SHA-256 of ``fields``' sorted JSON."""
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]
