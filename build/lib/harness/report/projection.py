"""Time to train: how long the study's full training (90 epochs of ImageNet-1k) would take at a
measured throughput, beside the runtimes the study reports.

    time_to_train_s(throughput)  -> seconds for 90 x 1,281,167 images
    format_duration(seconds)     -> "12.7 h", "3.3 min", "190 s"

A projection assumes the measured images per second hold for the whole training: no evaluation,
no checkpoints, no start-up, and the study's image size and batch per rank (a CPU cell at 32 px
projects a CPU run at 32 px, not the study's 224 px training).
"""
from __future__ import annotations

import dataclasses
import math

IMAGENET_TRAIN_IMAGES = 1_281_167
"""Images in the ImageNet-1k (ILSVRC-2012) training set."""
STUDY_EPOCHS = 90
"""The study trains for 90 epochs ("Benchmark results" section)."""


def time_to_train_s(throughput: float, *, epochs: int = STUDY_EPOCHS, images: int = IMAGENET_TRAIN_IMAGES) -> float:
    """Seconds to see ``epochs`` x ``images`` images at ``throughput`` images per second."""
    if not throughput > 0:
        raise ValueError(f"a projection needs a positive throughput, got {throughput}")
    return epochs * images / throughput


def throughput_for(seconds: float, *, epochs: int = STUDY_EPOCHS, images: int = IMAGENET_TRAIN_IMAGES) -> float:
    """The images per second a training of ``seconds`` implies (the inverse of :func:`time_to_train_s`)."""
    if not seconds > 0:
        raise ValueError(f"a duration must be positive, got {seconds}")
    return epochs * images / seconds


def format_duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "-"
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.1f} d"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 120:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.0f} s"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PublishedRuntime:
    """A training runtime the study states, quoted word for word."""

    model: str
    loader: str
    gpus: int
    seconds: float
    relation: str
    """"<", ">" or "~": how the quote bounds the runtime."""
    quote: str
    where: str

    @property
    def implied_throughput(self) -> float:
        """Images per second this runtime implies for 90 epochs of ImageNet (approximate where the
        quote is a bound or an approximation)."""
        return throughput_for(self.seconds)


ABSTRACT = ("Findings show that the DALI data loader significantly reduces the overall runtime of ResNet50 from "
            "more than 12 h on 4 GPUs to less than 200 s on 1024 GPUs.")
CONCLUSION = ("Overall, the total training time was reduced from ≈ 13 h on 4 GPUs to ≈ 200 s on 1024 GPUs for "
              "training ResNet50 (234 times faster) and ≈ 17 h to ≈ 300 s for the Resnet152 case (204 times "
              "faster), respectively.")

STUDY_RUNTIMES: tuple[PublishedRuntime, ...] = (
    PublishedRuntime(model="resnet50", loader="dali", gpus=4, seconds=12 * 3600, relation=">", quote=ABSTRACT,
                     where="Abstract"),
    PublishedRuntime(model="resnet50", loader="dali", gpus=1024, seconds=200, relation="<", quote=ABSTRACT,
                     where="Abstract"),
    PublishedRuntime(model="resnet50", loader="dali", gpus=4, seconds=13 * 3600, relation="~", quote=CONCLUSION,
                     where="Summary, conclusion, and outlook"),
    PublishedRuntime(model="resnet50", loader="dali", gpus=1024, seconds=200, relation="~", quote=CONCLUSION,
                     where="Summary, conclusion, and outlook"),
    PublishedRuntime(model="resnet152", loader="dali", gpus=4, seconds=17 * 3600, relation="~", quote=CONCLUSION,
                     where="Summary, conclusion, and outlook"),
    PublishedRuntime(model="resnet152", loader="dali", gpus=1024, seconds=300, relation="~", quote=CONCLUSION,
                     where="Summary, conclusion, and outlook"),
)
"""The study's stated runtimes for 90 epochs on JUWELS Booster (A100 GPUs, 64 images per GPU).

The conclusion's "234 times faster" on 256 times the GPUs is a parallel efficiency of about 0.91,
above the E_G of 0.76 the "Efficiency" section gives for ResNet50 at 1024 GPUs: the study does not
say what its runtimes include, so treat them as orders of magnitude, not as E_G."""


def projection_rows(cells: list[dict]) -> list[list[str]]:
    """For a results file's cells: the cell, its throughput and the projected 90-epoch time."""
    rows = [["cell", "img/s", "90 epochs of ImageNet-1k"]]
    for cell in cells:
        throughput = _throughput(cell)
        if throughput is None:
            rows.append([cell["cell"], "-", "-"])
            continue
        rows.append([cell["cell"], f"{throughput:.1f}", format_duration(time_to_train_s(throughput))])
    return rows


def reference_rows() -> list[list[str]]:
    rows = [["model", "GPUs", "stated runtime", "implied img/s", "where"]]
    for point in STUDY_RUNTIMES:
        stated = {">": "more than ", "<": "less than ", "~": "≈ "}[point.relation] + format_duration(point.seconds)
        rows.append([point.model, str(point.gpus), stated, f"{point.implied_throughput:,.0f}", point.where])
    return rows


def _throughput(cell: dict) -> float | None:
    estimate = cell.get("throughput") or {}
    value = estimate.get("value") if isinstance(estimate, dict) else None
    if value is None and cell.get("metrics"):
        value = cell["metrics"].get("throughput")
    return value if isinstance(value, (int, float)) and value > 0 else None
