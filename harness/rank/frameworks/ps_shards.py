"""A parameter server's shard of the model and how it applies the workers' gradients, synchronously
or asynchronously: what :mod:`harness.rank.frameworks.torch_ps` serves over torch.distributed.rpc.
No RPC here, so that the update rules are tested on their own.

- ``sync``: the shard waits for one gradient from every worker, applies their mean in one optimizer
  step, and answers every waiting worker with the new parameters (staleness 0 by construction);
- ``async``: the shard applies each gradient on arrival and answers at once. A gradient's
  *staleness* is the number of updates other workers applied between its worker's read of the
  parameters and its arrival.

A push from a worker's counted step (harness.rank.work, after the timed window) names its worker:
the shard counts it, and the parameters it answers with (the worker's pull), by worker
(:class:`ServedWork`), and never as a timed update.
"""
from __future__ import annotations

import dataclasses
import statistics
import threading
import time
from typing import Callable, Sequence

import torch

from harness.rank.frameworks.ps_common import ServerStats, check_mode


def assign_shards(sizes: Sequence[int], servers: int) -> list[int]:
    """The server of each parameter (by index), balancing the servers' element counts: the largest
    parameters first, each to the least loaded server. The same on every rank."""
    if servers < 1:
        raise ValueError(f"a parameter-server job needs at least one server, got {servers}")
    load = [0] * servers
    owner = [0] * len(sizes)
    for index in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        server = min(range(servers), key=lambda s: (load[s], s))
        owner[index] = server
        load[server] += sizes[index]
    return owner


class ServedWork:
    """What a shard received and answered for the workers' counted steps: pushes (gradients in) and
    pulls (parameters out), calls and bytes, by worker."""

    def __init__(self):
        self.by_worker: dict[int, dict[str, dict[str, int]]] = {}

    def add(self, worker: int, kind: str, tensors: Sequence[torch.Tensor]) -> None:
        counts = self.by_worker.setdefault(worker, {}).setdefault(kind, {"calls": 0, "bytes": 0})
        counts["calls"] += 1
        counts["bytes"] += sum(tensor.nbytes for tensor in tensors)

    def to_json(self) -> dict:
        return {str(worker): dict(sorted(kinds.items())) for worker, kinds in sorted(self.by_worker.items())}


@dataclasses.dataclass
class Reply:
    parameters: list[torch.Tensor]
    version: int
    """Updates this shard has applied, this one included."""


class Shard:
    """The parameters one server holds, their optimizer, and the update rule of ``mode``.
    ``push`` runs on the RPC agent's threads; a lock orders the updates."""

    def __init__(self, parameters: Sequence[torch.Tensor], *, mode: str, workers: int,
                 make_optimizer: Callable[[list[torch.Tensor]], torch.optim.Optimizer],
                 clock: Callable[[], float] = time.perf_counter):
        check_mode(mode)
        self.mode, self.workers, self.clock = mode, workers, clock
        self.parameters = [tensor.detach().clone().requires_grad_(False) for tensor in parameters]
        self.optimizer = make_optimizer(self.parameters)
        self.lock = threading.Lock()
        self.version = 0
        self.stats = ServerStats()
        self.served = ServedWork()
        self.done_workers: set[int] = set()
        self._pending: list[list[torch.Tensor]] = []
        self._pending_lr: list[float] = []
        self._waiting: torch.futures.Future | None = None

    def read(self) -> Reply:
        with self.lock:
            return Reply([tensor.clone() for tensor in self.parameters], self.version)

    def push(self, gradients: list[torch.Tensor], read_version: int, lr: float, timed: bool,
             counted_by: int | None = None) -> torch.futures.Future:
        """Take one worker's gradients, computed on the parameters of ``read_version``, at its
        learning rate ``lr``; a future of the :class:`Reply` the worker continues from.
        ``counted_by``: the worker, where the push is its counted step's (counted, not timed)."""
        arrived = self.clock()
        if counted_by is not None:
            timed = False
        with self.lock:
            if counted_by is not None:
                self.served.add(counted_by, "push", gradients)
                self.served.add(counted_by, "pull", self.parameters)  # the answer: the shard's parameters
            if timed and self.stats.first_arrival is None:
                self.stats.first_arrival = arrived
            if self.mode == "async":
                if timed:
                    self.stats.staleness.append(self.version - read_version)
                self._apply([gradients], [lr], timed)
                done = torch.futures.Future()
                done.set_result(Reply([tensor.clone() for tensor in self.parameters], self.version))
                return done
            if self._waiting is None:
                self._waiting = torch.futures.Future()
            waiting = self._waiting
            self._pending.append(gradients)
            self._pending_lr.append(lr)
            if len(self._pending) == self.workers:
                self._apply(self._pending, self._pending_lr, timed)
                self._pending, self._pending_lr, self._waiting = [], [], None
                waiting.set_result(Reply([tensor.clone() for tensor in self.parameters], self.version))
            return waiting

    def _apply(self, gradients: list[list[torch.Tensor]], lrs: list[float], timed: bool) -> None:
        for index, tensor in enumerate(self.parameters):
            tensor.grad = torch.stack([worker[index] for worker in gradients]).mean(dim=0)
        for group in self.optimizer.param_groups:
            group["lr"] = statistics.fmean(lrs)
        self.optimizer.step()
        self.version += 1
        if timed:
            self.stats.updates += 1
            self.stats.last_update = self.clock()

    def finish(self, worker: int) -> None:
        with self.lock:
            self.done_workers.add(worker)

    def all_done(self) -> bool:
        with self.lock:
            return len(self.done_workers) == self.workers
