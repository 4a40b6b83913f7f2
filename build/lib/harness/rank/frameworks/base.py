"""The small interface every framework adapter implements. The training loop sees only this."""
from __future__ import annotations

import abc
from typing import Callable

import torch

from harness.rank.rankenv import RankInfo

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class FrameworkAdapter(abc.ABC):
    """Wraps one distributed framework: set-up, one training step in two halves, collectives."""

    name: str

    def configure(self, *, batch_size: int) -> None:
        """Called before :meth:`setup` with the images per rank per step, for adapters that need it."""

    @abc.abstractmethod
    def setup(self, rank: RankInfo, device: torch.device) -> None:
        """Join the job's process group."""

    @abc.abstractmethod
    def wrap(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, loss_fn: LossFn) -> None:
        """Make the model and optimizer distributed; keep them for the steps."""

    @abc.abstractmethod
    def forward_backward(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Forward and backward pass, gradients averaged over ranks when it returns; the loss."""

    @abc.abstractmethod
    def optimizer_step(self) -> None:
        """Apply the averaged gradients and clear them."""

    @abc.abstractmethod
    def average(self, tensor: torch.Tensor) -> torch.Tensor:
        """Mean of ``tensor`` over all ranks."""

    @abc.abstractmethod
    def barrier(self) -> None: ...

    @abc.abstractmethod
    def shutdown(self) -> None: ...

    def settings(self) -> dict:
        """Framework settings that change results, recorded in each rank's record."""
        return {}
