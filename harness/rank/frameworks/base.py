"""The small interfaces of the framework adapters. Every adapter states the role of each of its
ranks, and the worker dispatches on it: a rank that trains runs the training loop's steps through
a :class:`Trainer`'s members (the loop sees only those), a rank that serves (a parameter server)
runs :meth:`Server.serve`, and a rank whose steps another process runs (TensorFlow's coordinator)
runs :meth:`Follower.follow`. An adapter implements the interfaces of the roles its ranks take, and
no member it cannot have."""
from __future__ import annotations

import abc
import contextlib
import enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ContextManager

from harness.rank.numerics import Numerics
from harness.rank.rankenv import RankInfo

if TYPE_CHECKING:  # adapters of other runtimes than torch's use this interface too
    import torch

    from harness.rank.work import CollectiveTally

LossFn = Callable[[Any, Any], Any]


class Role(enum.Enum):
    TRAINS = "trains"
    """Runs the training loop's steps: the adapter is a :class:`Trainer`."""
    SERVES = "serves"
    """Serves the others until they are done: the adapter is a :class:`Server`."""
    FOLLOWS = "follows"
    """Another process runs this rank's steps: the adapter is a :class:`Follower`."""


class FrameworkAdapter(abc.ABC):
    """Wraps one distributed framework: what every rank does, whatever its role: set-up, the model's
    place, the ranks that train, and shutting down."""

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

    def role(self) -> Role:
        """This rank's role (known after :meth:`setup`)."""
        return Role.TRAINS

    def training_ranks(self, world_size: int) -> int:
        """How many of the launch's ranks train (the global batch's, and the learning rate's, count)."""
        return world_size

    @abc.abstractmethod
    def wrap(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, loss_fn: LossFn) -> None:
        """Make the model and optimizer distributed; keep them for the steps."""

    @abc.abstractmethod
    def barrier(self) -> None: ...

    @abc.abstractmethod
    def shutdown(self) -> None: ...

    def settings(self) -> dict:
        """Framework settings that change results, recorded in each rank's record."""
        return {}


class Trainer(FrameworkAdapter):
    """An adapter whose ranks run the training loop's steps (:func:`harness.rank.trainloop.train`)."""

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

    def work_not_counted(self) -> str | None:
        """Why this framework's steps cannot be counted after the timed window
        (:mod:`harness.rank.work`), or None where they can."""
        return None

    def counting_collectives(self, tally: CollectiveTally) -> ContextManager:
        """Count into ``tally``, per tensor, the collectives of the steps run in the block that torch's
        dispatcher does not see (a background thread's, an RPC's); those it sees are counted there."""
        return contextlib.nullcontext()


class Server(abc.ABC):
    """An adapter with serving ranks (:attr:`Role.SERVES`)."""

    @abc.abstractmethod
    def serve(self, progress: Callable[[str, int, int], None], steps: int) -> dict:
        """A serving rank's life, until the workers are done: its record's figures."""


class Follower(abc.ABC):
    """An adapter whose training ranks another process steps (:attr:`Role.FOLLOWS`)."""

    @abc.abstractmethod
    def follow(self, progress: Callable[[str, int, int], None], probes: Callable[[], list[float]]) -> dict:
        """A coordinated rank's life until its steps are done: the samples of its steps, as the
        training loop's; ``probes`` times this rank's compute probes (before and after the steps)."""
