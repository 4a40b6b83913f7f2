"""The study's learning-rate schedules as pure functions of the (fractional) epoch.

    lr = learning_rate("cosine", epoch + step / steps_per_epoch,
                       lr_max=linear_scaling(0.025, gpus), total_epochs=90, warmup_epochs=5)

Every framework adapter trains with this one module, so a difference in accuracy between
frameworks is never a difference in schedules. Aach et al. 2023, "Learning rate scheduling":

1. step-wise: LR_max, times 0.1 at epochs 30, 60 and 80 of 90 -- for a run of another length the
   same fractions 1/3, 2/3 and 8/9 of it;
2. cosine, eq. (1): LR_t = LR_min + (LR_max - LR_min) (1 + cos(pi t / t_max)) / 2;
3. exponential, eq. (2): LR_t = LR_max * gamma^t with gamma = 0.95;

each after a linear warm-up over the first W epochs (5 in the study) from ``warmup_start_lr`` up
to LR_max, and LR_max from the linear scaling rule, LR_max = base_lr (0.025) x number of GPUs.

How t counts (the paper does not say; this module's choice): the warm-up epochs are part of the
run's length, as in Fig. 8a ("including warm-up in first five epochs" of the 90 plotted), and
the decays of eqs. (1) and (2) start at the end of the warm-up: t = epoch - W and
t_max = total_epochs - W. So every schedule hands over from the warm-up at exactly LR_max with no
jump, and cosine reaches LR_min at the last epoch. This is what PyTorch's ``SequentialLR`` of a
``LinearLR`` warm-up followed by ``CosineAnnealingLR(T_max=total - W)`` or ``ExponentialLR`` does.
The step-wise milestones count whole-run epochs (30, 60 and 80 include the 5 warm-up epochs), as
in the ImageNet recipe the study follows (Goyal et al. 2017).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable, Mapping

STUDY_EPOCHS = 90
STUDY_WARMUP_EPOCHS = 5
STUDY_BASE_LR = 0.025
"""Per-GPU learning rate of the study (64 images per GPU); scaled linearly with the GPU count."""
STUDY_GAMMA = 0.95
STEP_FRACTIONS = ((1, 3), (2, 3), (8, 9))
"""Step-wise milestones as fractions of the run: epochs 30, 60 and 80 of 90."""
STEP_FACTOR = 0.1


def linear_scaling(base_lr: float, gpus: int) -> float:
    """The linear scaling rule: LR_max = base_lr x number of GPUs (ranks)."""
    if base_lr <= 0 or gpus < 1:
        raise ValueError(f"linear scaling needs base_lr > 0 and gpus >= 1, got {base_lr} and {gpus}")
    return base_lr * gpus


def scaled_lr(base_lr: float, global_batch: int, reference_batch: int) -> float:
    """The linear scaling rule by batch: base_lr x global_batch / reference_batch.

    With ``reference_batch`` the per-GPU batch this is :func:`linear_scaling`; it also covers a
    large global batch emulated with a large per-rank batch on few ranks.
    """
    if global_batch < 1 or reference_batch < 1:
        raise ValueError(f"batch sizes must be positive, got {global_batch} and {reference_batch}")
    return base_lr * global_batch / reference_batch


def step_milestones(total_epochs: float) -> tuple[float, ...]:
    """Epochs at which the step-wise schedule multiplies by 0.1: (30, 60, 80) for 90 epochs."""
    return tuple(total_epochs * numerator / denominator for numerator, denominator in STEP_FRACTIONS)


def study_gamma(total_epochs: float, *, gamma: float = STUDY_GAMMA,
                reference_epochs: float = STUDY_EPOCHS) -> float:
    """Per-epoch decay that gives a run of ``total_epochs`` the study's exponential shape.

    Eq. (2) decays per epoch, so 0.95 over a 15-epoch run ends near 0.95**15 = 0.46 of LR_max
    instead of the study's 0.95**85 = 0.013 after 90. Scaling the exponent by the run's length, as the
    step-wise milestones are scaled, keeps the same curve over the fraction of training done.
    """
    if total_epochs <= 0:
        raise ValueError(f"total_epochs must be positive, got {total_epochs}")
    return gamma ** (reference_epochs / total_epochs)


def _step(epoch: float, *, lr_max: float, total_epochs: float, **_: float) -> float:
    drops = sum(1 for milestone in step_milestones(total_epochs) if epoch >= milestone)
    return lr_max * STEP_FACTOR ** drops


def _cosine(epoch: float, *, lr_max: float, lr_min: float, total_epochs: float, warmup_epochs: float,
            **_: float) -> float:
    t_max = total_epochs - warmup_epochs
    t = min(epoch - warmup_epochs, t_max)  # past t_max the cosine would climb again
    return lr_min + (lr_max - lr_min) * (1 + math.cos(math.pi * t / t_max)) / 2


def _exponential(epoch: float, *, lr_max: float, gamma: float, warmup_epochs: float, **_: float) -> float:
    return lr_max * gamma ** (epoch - warmup_epochs)


_Decay = Callable[..., float]
"""A decay after the warm-up: ``decay(epoch, lr_max=, lr_min=, gamma=, total_epochs=, warmup_epochs=)``."""

SCHEDULES: Mapping[str, _Decay] = {
    "step": _step,
    "cosine": _cosine,
    "exponential": _exponential,
}
SCHEDULE_NAMES: tuple[str, ...] = tuple(SCHEDULES)


def check_schedule(name: str) -> None:
    if name not in SCHEDULES:
        raise ValueError(f"unknown learning-rate schedule {name!r}; valid names: {', '.join(SCHEDULE_NAMES)}")


def learning_rate(schedule: str, epoch: float, *, lr_max: float, total_epochs: float,
                  warmup_epochs: float, lr_min: float = 0.0, gamma: float = STUDY_GAMMA,
                  warmup_start_lr: float = 0.0) -> float:
    """The learning rate at ``epoch`` (fractional: epoch + step / steps_per_epoch).

    During ``[0, warmup_epochs)`` it rises linearly from ``warmup_start_lr`` to ``lr_max``; after,
    it follows ``schedule`` with t = epoch - warmup_epochs (see the module docstring).
    """
    check_schedule(schedule)
    if lr_max <= 0:
        raise ValueError(f"lr_max must be positive, got {lr_max}")
    if not 0 <= lr_min <= lr_max:
        raise ValueError(f"lr_min must lie in [0, lr_max={lr_max}], got {lr_min}")
    if not 0 < gamma <= 1:
        raise ValueError(f"gamma must lie in (0, 1], got {gamma}")
    if not 0 <= warmup_epochs < total_epochs:
        raise ValueError(f"warmup_epochs must lie in [0, total_epochs={total_epochs}), got {warmup_epochs}")
    if not 0 <= warmup_start_lr <= lr_max:
        raise ValueError(f"warmup_start_lr must lie in [0, lr_max={lr_max}], got {warmup_start_lr}")
    if epoch < 0:
        raise ValueError(f"epoch must not be negative, got {epoch}")
    if epoch < warmup_epochs:
        return warmup_start_lr + (lr_max - warmup_start_lr) * epoch / warmup_epochs
    return SCHEDULES[schedule](epoch, lr_max=lr_max, lr_min=lr_min, gamma=gamma,
                               total_epochs=total_epochs, warmup_epochs=warmup_epochs)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class LRSchedule:
    """One run's schedule, checked once; call it with the fractional epoch."""

    schedule: str
    """One of :data:`SCHEDULE_NAMES`."""
    lr_max: float
    """Peak learning rate, reached at the end of the warm-up (see :func:`linear_scaling`)."""
    total_epochs: float
    """Length of the run, warm-up included."""
    warmup_epochs: float = STUDY_WARMUP_EPOCHS
    warmup_start_lr: float = 0.0
    """Learning rate at epoch 0; Goyal et al. start from the single-GPU rate, base_lr."""
    lr_min: float = 0.0
    """Floor of the cosine schedule."""
    gamma: float = STUDY_GAMMA
    """Per-epoch decay of the exponential schedule."""

    def __post_init__(self) -> None:
        self(0.0)  # validates every field

    def __call__(self, epoch: float) -> float:
        return learning_rate(self.schedule, epoch, lr_max=self.lr_max, total_epochs=self.total_epochs,
                             warmup_epochs=self.warmup_epochs, lr_min=self.lr_min, gamma=self.gamma,
                             warmup_start_lr=self.warmup_start_lr)


def set_learning_rate(optimizer, lr: float) -> None:
    """Give every parameter group of a torch optimizer the learning rate ``lr``."""
    for group in optimizer.param_groups:
        group["lr"] = lr
