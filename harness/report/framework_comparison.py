"""Each framework's throughput relative to PyTorch DDP on the same loader, model and rank count,
measured in the same run, beside the ratios the related studies publish.

A ratio comes only from two cells of one session (one machine, one stack, minutes apart): their
pooled per-step times are bootstrapped each on its own and divided replicate by replicate
(:func:`harness.judging.stats.efficiency_interval` at equal rank counts is exactly that ratio).
A cell is set beside the DDP cell with as many training ranks (the same global batch): a
parameter-server cell's servers train nothing, so its g3 of two workers meets DDP's g2.
"""
from __future__ import annotations

import dataclasses
from typing import Iterable, Sequence

from harness.judging.metrics import step_samples
from harness.judging.stats import Estimate, efficiency_interval
from harness.rank.cell import Cell
from harness.rank.frameworks import FRAMEWORKS

REFERENCE_FRAMEWORK = "ddp"

SEED_002 = "002_6e34a6e4352ca902.txt"
SEED_002_QUOTE = ("the theDistributedDataParallelfeatures in the Pytorch library seem to be the most efficient "
                  "framework for distributing the training process across many devices, allowing to reach a "
                  "throughput speedup of 10.11 when using 12 NVidia Tesla V100GPUs when training Resnet44 on the "
                  "CIFAR10 dataset.")  # as extracted, words run together
"""Seed 002's scaling figure for ResNet44 (E_G 10.11 / 12 = 0.84 at 12 GPUs), beside the E_G column."""
SEED_004 = "004_329eebec84006829.txt"
SEED_004_QUOTE = ("Overall, in synchronous learning setups, TensorFlow is slower compared to PyTorch by average "
                  "2.65X, while the latter lags MXNet by average 1.38X.")
SEED_004_PS_QUOTE = "Regarding asynchronous learning, MXNet is faster by average 3.22X in respect with TensorFlow."


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PublishedRatio:
    framework: str
    ratio: float
    """Its throughput over PyTorch's (synchronous all-reduce)."""
    source: str
    quote: str


PUBLISHED_RATIOS = {name: PublishedRatio(framework=name, ratio=FRAMEWORKS.entry(name).published_speed,
                                         source=SEED_004, quote=SEED_004_QUOTE)
                    for name in FRAMEWORKS.names() if FRAMEWORKS.entry(name).published_speed is not None}
"""The frameworks whose registry entries carry seed 004's ratio (CPU clusters)."""

PUBLISHED_NOTES = ((SEED_004, SEED_004_QUOTE, "CPU clusters; the ratios in the table's last column"),
                   (SEED_002, SEED_002_QUOTE, "V100 GPUs: E_G 0.84 at 12 GPUs, beside the summary's E_G column"),
                   (SEED_004, SEED_004_PS_QUOTE, "CPU clusters, parameter server; its one asynchronous figure "
                                                 "sets MXNet beside TensorFlow: the rows of mxnet_ps_async and "
                                                 "tensorflow_ps_async, each beside DDP's all-reduce with as many "
                                                 "training ranks, as are the other parameter-server cells"))
"""What the related studies publish about frameworks side by side: (seed, quote, how it reads here)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class FrameworkRatio:
    cell: Cell
    ratio: Estimate
    """The cell's throughput over the DDP cell's of the same loader, model and training ranks."""
    training_ranks: int


def framework_ratios(measured: Iterable[tuple[Cell, Sequence[dict]]]) -> list[FrameworkRatio]:
    """Every non-DDP cell of ``measured`` (cells with their pooled per-rank records) whose DDP
    counterpart was measured too, ordered by loader, model, rank count and framework."""
    records = {cell: cell_records for cell, cell_records in measured if cell_records}
    ratios = []
    for cell in sorted(records, key=lambda c: (c.loader, c.model, len(records[c]), c.framework)):
        training = len(records[cell])  # one pooled record per training rank
        reference = dataclasses.replace(cell, framework=REFERENCE_FRAMEWORK, ranks=training)
        if cell.framework == REFERENCE_FRAMEWORK or reference not in records:
            continue
        steps, batches = step_samples(records[cell])
        reference_steps, reference_batches = step_samples(records[reference])
        ratios.append(FrameworkRatio(cell=cell, training_ranks=training, ratio=efficiency_interval(
            steps, batches, reference_steps, reference_batches)))
    return ratios


def comparison_rows(ratios: Sequence[FrameworkRatio]) -> list[list[str]]:
    """A table: loader, model, ranks, framework, throughput over DDP with its interval, and the
    published ratio where a seed gives one."""
    rows = [["loader", "model", "ranks", "framework", f"throughput / {REFERENCE_FRAMEWORK} [95% CI]",
             "published (seed 004)"]]
    for entry in ratios:
        ratio, published = entry.ratio, PUBLISHED_RATIOS.get(entry.cell.framework)
        ranks = str(entry.cell.ranks) + (f" ({entry.training_ranks} training)"
                                         if entry.training_ranks != entry.cell.ranks else "")
        rows.append([entry.cell.loader, entry.cell.model, ranks, entry.cell.framework,
                     ratio.text(3),
                     f"{published.ratio:.3f}" if published else "-"])
    return rows
