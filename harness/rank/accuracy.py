"""The accuracy task's training on one rank: a short, real, seeded training whose validation
accuracy shows what the global batch size and the learning-rate schedule do to it (Aach et al.
2023, Fig. 8 and 9). Under a launcher the worker calls :func:`run_accuracy`; the task's command
line, which trains on one rank, is :mod:`harness.tasks.accuracy`. Here, in the rank layer, because
the ranks run it.

Data: scikit-learn's handwritten digits (1797 8x8 greyscale images, 10 classes, shipped with
scikit-learn, no download), split once into 1297 training and 500 validation images, stratified,
with a split seed that does not change with the training seed.

Model: :func:`build_digits_resnet`, a two-block ResNet at the images' own 8x8 resolution. It keeps
what makes ResNet50 train the way it does at large batches (residual blocks, batch normalisation,
SGD with momentum, label smoothing) at about 2 MFLOP per image, so a run is seconds on one CPU
core. Upsampling 8x8 images adds no information, only compute, and a full ResNet50 would take
hours here.

Training goes through :class:`~harness.rank.frameworks.base.Trainer` only, so it runs the same
under every framework: each rank trains on its shard of each epoch's shuffled training set
(DistributedSampler-style, padded to equal shards, incomplete batches dropped so that every step
has exactly the global batch ``batch_per_rank x world_size``), the learning rate comes from
:mod:`harness.rank.schedulers` and is set before every step (fractional epochs), and after each epoch
every rank scores its shard of the validation set and the counts are summed over ranks.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from typing import Iterator

import torch
from torch import nn

from harness.rank.frameworks.base import Role, Trainer
from harness.rank.rankenv import RankInfo, launch_port_block, read_rank_info
from harness.rank.schedulers import LRSchedule, check_schedule, scaled_lr, set_learning_rate, study_gamma
from harness.rank.trainloop import ProgressFn


VALIDATION_IMAGES = 500
SPLIT_SEED = 0
"""Fixed: the split is part of the task, not of a run."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class DigitsSplit:
    """The task's data as tensors: images (N, 1, 8, 8) standardised with the training set's
    statistics, labels (N,) int64."""

    train_images: torch.Tensor
    train_labels: torch.Tensor
    val_images: torch.Tensor
    val_labels: torch.Tensor
    num_classes: int = 10

    def to(self, device: torch.device) -> "DigitsSplit":
        return dataclasses.replace(
            self, train_images=self.train_images.to(device), train_labels=self.train_labels.to(device),
            val_images=self.val_images.to(device), val_labels=self.val_labels.to(device))


def load_digits_split(*, val_images: int = VALIDATION_IMAGES, split_seed: int = SPLIT_SEED) -> DigitsSplit:
    """scikit-learn's digits, split into training and validation sets, stratified by class."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1)  # pixel values 0..16
    labels = torch.tensor(digits.target, dtype=torch.int64)
    train_index, val_index = train_test_split(
        range(len(labels)), test_size=val_images, random_state=split_seed, stratify=digits.target)
    train_index, val_index = torch.tensor(train_index), torch.tensor(val_index)
    mean, std = images[train_index].mean(), images[train_index].std()
    images = (images - mean) / std
    return DigitsSplit(train_images=images[train_index], train_labels=labels[train_index],
                       val_images=images[val_index], val_labels=labels[val_index])


class BasicBlock(nn.Module):
    """ResNet's basic block: two 3x3 convolutions with batch norm and an identity (or 1x1) shortcut."""

    def __init__(self, channels_in: int, channels_out: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(channels_in, channels_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels_out)
        self.conv2 = nn.Conv2d(channels_out, channels_out, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels_out)
        self.shortcut = nn.Identity()
        if stride != 1 or channels_in != channels_out:
            self.shortcut = nn.Sequential(nn.Conv2d(channels_in, channels_out, 1, stride=stride, bias=False),
                                          nn.BatchNorm2d(channels_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


def build_digits_resnet(num_classes: int = 10, width: int = 32) -> nn.Module:
    """Stem 3x3 conv (8x8, ``width`` channels), a basic block at 8x8, a strided block to 4x4 with
    twice the channels, global average pooling and a linear classifier: 77k parameters."""
    return nn.Sequential(
        nn.Conv2d(1, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
        BasicBlock(width, width),
        BasicBlock(width, 2 * width, stride=2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(2 * width, num_classes),
    )


def shard_indices(count: int, *, rank: int, world_size: int, epoch: int, seed: int) -> torch.Tensor:
    """This rank's indices of an epoch, as ``DistributedSampler(shuffle=True)`` picks them.

    Every rank draws the same permutation (seeded by ``seed + epoch``), pads it by wrapping
    around to a multiple of ``world_size`` and takes every ``world_size``-th index from ``rank``.
    """
    order = torch.randperm(count, generator=torch.Generator().manual_seed(seed + epoch))
    padded = -(-count // world_size) * world_size
    order = torch.cat([order, order[:padded - count]])
    return order[rank::world_size]


def _no_progress(phase: str, step: int, of: int) -> None:
    pass


def _batchnorms(model: nn.Module) -> list[nn.modules.batchnorm._BatchNorm]:
    return [module for module in model.modules()
            if isinstance(module, nn.modules.batchnorm._BatchNorm) and module.track_running_stats]


@torch.no_grad()
def recalibrate_batchnorm(model: nn.Module, images: torch.Tensor, *, batch: int = 256) -> None:
    """Replace the BN running statistics by their exact averages over ``images`` with the current
    weights ("precise BN", Wu and Johnson 2021)."""
    layers = _batchnorms(model)
    momenta = [layer.momentum for layer in layers]
    for layer in layers:
        layer.reset_running_stats()
        layer.momentum = None  # a cumulative average over the batches below
    model.train()
    for start in range(0, len(images), batch):
        model(images[start:start + batch])
    for layer, momentum in zip(layers, momenta):
        layer.momentum = momentum


def _average_batchnorm_statistics(adapter: Trainer, model: nn.Module) -> None:
    # Frameworks keep BN running statistics differently (DDP re-broadcasts rank 0's before every
    # forward, Horovod never syncs them); averaging makes evaluation the same under all of them.
    for layer in _batchnorms(model):
        layer.running_mean.copy_(adapter.average(layer.running_mean))
        layer.running_var.copy_(adapter.average(layer.running_var))


@torch.no_grad()
def evaluate(adapter: Trainer, model: nn.Module, data: DigitsSplit, *, rank: RankInfo,
             batch: int = 500) -> float:
    """Global validation accuracy: each rank scores its shard, the counts are summed over ranks."""
    _average_batchnorm_statistics(adapter, model)
    model.eval()
    mine = torch.arange(rank.rank, len(data.val_labels), rank.world_size, device=data.val_labels.device)
    correct = 0
    for start in range(0, len(mine), batch):
        index = mine[start:start + batch]
        correct += int((model(data.val_images[index]).argmax(dim=1) == data.val_labels[index]).sum())
    model.train()
    counts = torch.tensor([correct, len(mine)], dtype=torch.float64, device=data.val_labels.device)
    correct_total, seen_total = (adapter.average(counts) * rank.world_size).tolist()
    assert round(seen_total) == len(data.val_labels), (seen_total, len(data.val_labels))
    return correct_total / seen_total


def run_accuracy(adapter: Trainer, *, rank: RankInfo, device: torch.device, schedule: str,
                 epochs: int, batch_per_rank: int, base_lr: float, warmup_epochs: float,
                 label_smoothing: float = 0.1, seed: int = 1234, progress: ProgressFn | None = None,
                 reference_batch: int | None = None, momentum: float = 0.9, weight_decay: float = 1e-4,
                 gamma: float | None = None, lr_min: float = 0.0, precise_bn: bool = True,
                 data: DigitsSplit | None = None) -> dict:
    """Train the digits ResNet for ``epochs`` epochs through ``adapter`` (already set up) and
    return this rank's view of the run; the accuracies and losses are global, the same on every rank.
    ``lr_per_epoch`` holds the learning rate at the start of each epoch.

    ``base_lr`` is the learning rate of ``reference_batch`` images per step (default
    ``batch_per_rank``, that is base_lr per rank as in the study); the peak rate is
    base_lr x global_batch / reference_batch, reached after ``warmup_epochs`` of linear ramp from
    base_lr. ``gamma`` defaults to :func:`~harness.rank.schedulers.study_gamma` of ``epochs``.

    ``precise_bn``: before each evaluation, recompute the BN statistics over the rank's training
    shard with the current weights. At the largest batches this task has 1-2 steps per epoch, so
    the usual running averages (momentum 0.1) lag far behind the weights and evaluation would
    measure that lag, not what the batch size did to the optimisation; the study's largest batch
    still had ~20 steps per epoch. Costs about a third of an epoch's compute.
    """
    check_schedule(schedule)
    if epochs < 1 or batch_per_rank < 1:
        raise ValueError(f"epochs and batch_per_rank must be positive, got {epochs} and {batch_per_rank}")
    progress = progress or _no_progress
    data = (data or load_digits_split()).to(device)
    rank = dataclasses.replace(rank, world_size=adapter.training_ranks(rank.world_size))  # servers train nothing
    global_batch = batch_per_rank * rank.world_size
    shard_size = -(-len(data.train_labels) // rank.world_size)
    steps_per_epoch = shard_size // batch_per_rank
    if steps_per_epoch == 0:
        raise ValueError(f"a global batch of {global_batch} is larger than the {len(data.train_labels)} training images")
    lr_max = scaled_lr(base_lr, global_batch, reference_batch or batch_per_rank)
    lr_at = LRSchedule(schedule=schedule, lr_max=lr_max, total_epochs=epochs, warmup_epochs=warmup_epochs,
                       warmup_start_lr=min(base_lr, lr_max), lr_min=lr_min,
                       gamma=study_gamma(epochs) if gamma is None else gamma)

    torch.manual_seed(seed)  # the same initial weights on every rank, whatever the framework broadcasts
    model = build_digits_resnet(data.num_classes).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr_at(0.0), momentum=momentum, weight_decay=weight_decay)
    adapter.wrap(model, optimizer, nn.CrossEntropyLoss(label_smoothing=label_smoothing))
    total_steps = epochs * steps_per_epoch
    if adapter.role() is Role.SERVES:  # a parameter server: it applies the workers' gradients until they are done
        return {**adapter.serve(progress, total_steps), "schedule": schedule, "global_batch": global_batch}

    started = time.perf_counter()
    accuracies, lrs, train_losses = [], [], []
    for epoch in range(epochs):
        order = shard_indices(len(data.train_labels), rank=rank.rank, world_size=rank.world_size,
                              epoch=epoch, seed=seed).to(device)
        lrs.append(lr_at(epoch))
        loss_sum = torch.zeros((), device=device)
        for step in range(steps_per_epoch):
            set_learning_rate(optimizer, lr_at(epoch + step / steps_per_epoch))
            index = order[step * batch_per_rank:(step + 1) * batch_per_rank]
            loss = adapter.forward_backward(data.train_images[index], data.train_labels[index])
            adapter.optimizer_step()
            loss_sum += loss.detach()
            progress("train", epoch * steps_per_epoch + step + 1, total_steps)
        train_losses.append(float(adapter.average(loss_sum / steps_per_epoch)))
        if precise_bn:
            recalibrate_batchnorm(model, data.train_images[order])
        accuracies.append(evaluate(adapter, model, data, rank=rank))
        progress("eval", epoch + 1, epochs)
    return {
        "schedule": schedule,
        "global_batch": global_batch,
        "batch_per_rank": batch_per_rank,
        "world_size": rank.world_size,
        "epochs": epochs,
        "steps": total_steps,
        "lr_max": lr_max,
        "precise_bn": precise_bn,
        "schedule_settings": dataclasses.asdict(lr_at),
        "val_accuracy_per_epoch": accuracies,
        "final_val_accuracy": accuracies[-1],
        "lr_per_epoch": lrs,
        "train_loss_per_epoch": train_losses,
        "train_s": time.perf_counter() - started,
    }


@contextlib.contextmanager
def single_rank_adapter(framework: str = "ddp") -> Iterator[tuple[Trainer, RankInfo]]:
    """A set-up adapter for a world of one process, with no launcher: for tests and the command line."""
    from harness.rank.frameworks import FRAMEWORKS

    names = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")
    saved = {name: os.environ.get(name) for name in names}
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(launch_port_block(1)), RANK="0", WORLD_SIZE="1")
    try:
        rank = read_rank_info(os.environ)
        adapter = FRAMEWORKS.create(framework)
        adapter.setup(rank, torch.device("cpu"))
        try:
            yield adapter, rank
        finally:
            adapter.shutdown()
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
