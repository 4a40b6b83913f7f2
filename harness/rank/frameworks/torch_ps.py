"""PyTorch parameter server on ``torch.distributed.rpc``, synchronous or asynchronous, written the way
PyTorch's RPC parameter-server tutorials write it (a server object behind RPC functions; the
synchronous one answers through ``rpc.functions.async_execution`` futures once every worker's
gradient is in; :mod:`harness.rank.frameworks.ps_shards` holds the update rules).

Roles by rank: of a launch's ``world_size`` ranks the last ``ps_servers`` serve, the others train,
so ``--gpus 3`` with one server is two workers. Every parameter lives on one server
(:func:`~harness.rank.frameworks.ps_shards.assign_shards`), which also holds its optimizer state;
the workers keep a local copy of the model for forward and backward. A worker's optimizer step
pushes each server its shard's gradients and waits for the parameters it answers with: the cell's
``optimizer`` part is the time waiting for the servers. The worker's own optimizer is never
stepped; it carries the learning rate (the linearly scaled rate for the workers' global batch, or
the schedule's), which each push sends along. An asynchronous update is one worker's batch, so it
is applied at that rate over the worker count.

Ports derive from the launch's ``MASTER_PORT``: the process group (gloo, for the workers' barrier
and averages) uses it, the RPC agent's rendezvous the next one (:func:`rpc_rendezvous`). RPC carries
CPU tensors: on a GPU a worker copies its gradients to the host and the answer back, as the
tutorials do.
"""
from __future__ import annotations

import contextlib
import datetime
import os
import sys
import time
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist
import torch.distributed.rpc as rpc

from harness.rank.frameworks.base import LossFn, Server, Trainer
from harness.rank.frameworks.ps_common import ServerRoles, check_settings, workers_beside
from harness.rank.frameworks.ps_shards import Reply, Shard, assign_shards
from harness.rank.rankenv import RankInfo
from harness.rank.work import COUNTED_STEPS, CollectiveTally

RPC_PORT_OFFSET = 1
POLL_S = 0.2

_shard: Shard | None = None
"""The shard this process serves; set on a server rank before any worker pushes."""


def _read() -> Reply:
    return _shard.read()


@rpc.functions.async_execution
def _push(gradients: list[torch.Tensor], read_version: int, lr: float, timed: bool,
          counted_by: int | None = None) -> torch.futures.Future:
    return _shard.push(gradients, read_version, lr, timed, counted_by)


def _finish(worker: int) -> None:
    _shard.finish(worker)


class TorchPSAdapter(ServerRoles, Trainer, Server):
    name = "torch_ps"

    def __init__(self, *, mode: str, ps_servers: int = 1, timeout_s: int = 300):
        check_settings(mode, ps_servers)
        self.mode, self.servers, self.timeout_s = mode, ps_servers, timeout_s
        self.timed = False
        self.tally: CollectiveTally | None = None
        """Where a counted step's pushes and pulls are counted (None: no step is counted)."""
        self.versions: list[int] = []

    # --- roles ------------------------------------------------------------------------------------

    def setup(self, rank: RankInfo, device: torch.device) -> None:
        self.rank, self.device = rank, device
        self.workers = workers_beside(self.servers, rank.world_size)
        timeout = datetime.timedelta(seconds=self.timeout_s)
        dist.init_process_group("gloo", init_method="env://", rank=rank.rank, world_size=rank.world_size,
                                timeout=timeout)
        self.worker_group = dist.new_group(list(range(self.workers)), timeout=timeout)
        options = rpc.TensorPipeRpcBackendOptions(init_method=rpc_rendezvous(rank), rpc_timeout=self.timeout_s,
            num_worker_threads=max(16, 2 * self.workers))
        rpc.init_rpc(self._name(rank.rank), rank=rank.rank, world_size=rank.world_size, rpc_backend_options=options)

    def _name(self, rank: int) -> str:
        return f"ps{rank - self.workers}" if rank >= self.workers else f"worker{rank}"

    def _server_rank(self, server: int) -> int:
        return self.workers + server

    # --- model ------------------------------------------------------------------------------------

    def wrap(self, model, optimizer, loss_fn: LossFn) -> None:
        global _shard
        self.model, self.optimizer, self.loss_fn = model, optimizer, loss_fn
        parameters = list(model.parameters())
        owner = assign_shards([p.numel() for p in parameters], self.servers)
        self.shards = [[index for index, server in enumerate(owner) if server == s] for s in range(self.servers)]
        if self.serves():
            mine = self.shards[self.rank.rank - self.workers]
            defaults = optimizer.defaults
            _shard = Shard([parameters[i].detach().cpu() for i in mine], mode=self.mode, workers=self.workers,
                           make_optimizer=lambda tensors: torch.optim.SGD(
                               tensors, lr=defaults["lr"], momentum=defaults["momentum"],
                               weight_decay=defaults["weight_decay"]))
        dist.barrier()  # every server holds its shard before any worker reads one
        if not self.serves():
            self.versions = [0] * self.servers
            for server in range(self.servers):
                self._take(server, self._call(server, rpc.rpc_sync, _read))

    def _take(self, server: int, reply: Reply) -> None:
        parameters = list(self.model.parameters())
        with torch.no_grad():
            for index, value in zip(self.shards[server], reply.parameters):
                parameters[index].copy_(value)
        self.versions[server] = reply.version

    def _call(self, server: int, how: Callable, function: Callable, *args) -> Any:
        try:
            return how(self._name(self._server_rank(server)), function, args=args)
        except RuntimeError as error:
            raise self._unanswered(server, error) from error

    def _unanswered(self, server: int, error: Exception) -> RuntimeError:
        rank = self._server_rank(server)
        return RuntimeError(f"parameter server {self._name(rank)} (rank {rank}) did not answer: {error}")

    # --- a worker's step --------------------------------------------------------------------------

    def forward_backward(self, images, labels):
        loss = self.loss_fn(self.model(images), labels)
        loss.backward()
        return loss.detach()

    def optimizer_step(self) -> None:
        lr = self.optimizer.param_groups[0]["lr"] / (self.workers if self.mode == "async" else 1)
        parameters = list(self.model.parameters())
        pending = []
        counted_by = self.rank.rank if self.tally is not None else None
        for server, indices in enumerate(self.shards):
            gradients = [parameters[i].grad.detach().to("cpu") for i in indices]
            pending.append(self._call(server, rpc.rpc_async, _push, gradients, self.versions[server], lr, self.timed,
                                      counted_by))
            if self.tally is not None:
                self.tally.add("push", sum(gradient.nbytes for gradient in gradients))
        for server, future in enumerate(pending):
            try:
                reply = future.wait()
            except RuntimeError as error:
                raise self._unanswered(server, error) from error
            if self.tally is not None:
                self.tally.add("pull", sum(parameter.nbytes for parameter in reply.parameters))
            self._take(server, reply)
        self.model.zero_grad(set_to_none=True)

    def window_starts(self) -> None:
        self.timed = True

    @contextlib.contextmanager
    def counting_collectives(self, tally: CollectiveTally) -> Iterator[None]:
        """A worker's pushes and pulls go by RPC, out of torch's dispatcher: each counted here, per
        server, as the gradients it sends and the parameters the server answers with. The servers
        count the same pushes as the counted step's, never as timed updates."""
        self.tally = tally
        try:
            yield
        finally:
            self.tally = None

    def average(self, tensor):
        tensor = tensor.detach().clone()
        dist.all_reduce(tensor, group=self.worker_group)
        return tensor / self.workers

    def barrier(self) -> None:
        dist.barrier(group=self.worker_group)

    # --- a server's life --------------------------------------------------------------------------

    def serve(self, progress: Callable[[str, int, int], None], steps: int) -> dict:
        """Answer the workers until each has finished; the timed window's figures. Progress counts
        the timed updates applied, so that the runner hears the server and a fault can strike it."""
        expected = self.timed_updates_expected(steps)
        reported = 0
        while not _shard.all_done():
            time.sleep(POLL_S)
            # no heartbeat of its own: a server waiting on a hung worker must not look alive
            while reported < _shard.stats.updates:
                reported += 1
                progress("timed", reported, expected)
        return {"role": "server", "server": self.rank.rank - self.workers,
                "parameters": sum(p.numel() for p in _shard.parameters), **_shard.stats.to_json(),
                "work": served_work(_shard.served.to_json())}

    def shutdown(self) -> None:
        failing = sys.exc_info()[0] is not None
        if rpc_ready() and not failing and not self.serves():
            for server in range(self.servers):
                self._call(server, rpc.rpc_sync, _finish, self.rank.rank)
        if rpc_ready():
            rpc.shutdown(graceful=not failing)
        if dist.is_initialized():
            dist.destroy_process_group()

    def settings(self) -> dict:
        return {"mode": self.mode, "servers": self.servers, "workers": self.workers, "rpc": "tensorpipe",
                "learning_rate": self.learning_rate_rule(),
                "server_elements": [sum(p.numel() for i, p in enumerate(self.model.parameters()) if i in shard)
                                    for shard in self.shards]}


def served_work(by_worker: dict) -> dict:
    """A server's record of the pushes and pulls of the workers' counted steps, per step; where no
    worker counted a step (counting off or failed) it says so rather than a zero."""
    if not by_worker:
        return {"not_counted": "no worker counted a step (counting turned off, or failed: see the workers' work)"}
    return {"by_worker": by_worker, "steps": COUNTED_STEPS}


def rpc_rendezvous(rank: RankInfo) -> str:
    """Where the RPC agents meet: a store of their own on the port after the process group's, or,
    under torchrun, the elastic agent's store, as the process group does. Some torch versions (2.11;
    not 2.14) make every rank of every rendezvous under torchrun a client of a store they assume
    the agent serves, so that one on another port waits for ever. RPC keeps its keys apart from the
    process group's by a prefix of its own."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        return f"tcp://{rank.master_addr}:{rank.master_port}"
    return f"tcp://{rank.master_addr}:{rank.master_port + RPC_PORT_OFFSET}"


def rpc_ready() -> bool:
    return rpc.api._is_current_rpc_agent_set()  # noqa: SLF001 - rpc has no public "is initialised"
