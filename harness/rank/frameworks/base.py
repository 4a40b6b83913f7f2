"""The small interface every framework adapter implements. The training loop sees only this."""
from __future__ import annotations

import abc
import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ContextManager

from harness.rank.numerics import Numerics
from harness.rank.rankenv import RankInfo

if TYPE_CHECKING:  # adapters of other runtimes than torch's use this interface too
    import torch

LossFn = Callable[[Any, Any], Any]


class FrameworkAdapter(abc.ABC):
    """Wraps one distributed framework: set-up, one training step in two halves, collectives."""

    name: str
    numerics: Numerics = Numerics()
    """What the cell trains in; the worker sets it before :meth:`setup` (the runtime has applied it to
    the model; an adapter that steps its optimizer scales fp16's losses)."""
    keeps_weights_in_dtype = False
    """The framework holds a bf16 or fp16 cell's weights in that dtype itself (DeepSpeed), instead of
    running float32 weights under autocast."""

    def configure(self, *, batch_size: int, workdir: Path | None = None) -> None:
        """Called before :meth:`setup` with the images per rank per step and the launch's directory,
        which every rank shares (a rendezvous by files), for adapters that need them."""

    @abc.abstractmethod
    def setup(self, rank: RankInfo, device: torch.device) -> None:
        """Join the job's process group."""

    def scope(self) -> ContextManager:
        """Where the runtime builds the model and optimizer (a TensorFlow strategy's scope)."""
        return contextlib.nullcontext()

    def serves(self) -> bool:
        """Whether this rank serves the others (a parameter server) instead of training."""
        return False

    def serve(self, progress: Callable[[str, int, int], None], steps: int) -> dict:
        """A serving rank's life, until the workers are done: its record's figures."""
        raise NotImplementedError(f"{self.name} has no serving ranks")

    def coordinated(self) -> bool:
        """Whether another process runs this training rank's steps (TensorFlow's coordinator): the
        rank loads no data and steps nothing itself; :meth:`follow` returns its record's samples."""
        return False

    def follow(self, progress: Callable[[str, int, int], None], probes: Callable[[], list[float]]) -> dict:
        """A coordinated rank's life until its steps are done: the samples of its steps, as the
        training loop's; ``probes`` times this rank's compute probes (before and after the steps)."""
        raise NotImplementedError(f"{self.name} runs its own steps")

    def training_ranks(self, world_size: int) -> int:
        """How many of the launch's ranks train (the global batch's, and the learning rate's, count)."""
        return world_size

    @abc.abstractmethod
    def wrap(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, loss_fn: LossFn) -> None:
        """Make the model and optimizer distributed; keep them for the steps."""

    @abc.abstractmethod
    def forward_backward(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Forward and backward pass, gradients averaged over ranks when it returns; the loss, detached
        from any graph (the loop keeps it until the timed window is over)."""

    @abc.abstractmethod
    def optimizer_step(self) -> None:
        """Apply the averaged gradients and clear them."""

    def window_starts(self) -> None:
        """The timed window begins (every training rank has passed the barrier before it)."""

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
