"""MXNet's parameter server with servers of their own: ps-lite's kvstore ``dist_sync`` or
``dist_async``, where of a launch's ranks the last ``ps_servers`` serve and the others train. Rank 0
starts ps-lite's scheduler beside its worker, as a child process; every process takes its DMLC role
from dlscale's launch (:func:`~harness.rank.frameworks.mxnet.process_environment`), none from
MXNet's launch script.

The servers hold the weights and the optimizer (``update_on_kvstore``, the only way ``dist_async``
trains): a worker's optimizer step is Gluon's ``Trainer.step``, which pushes the gradients and pulls
the new weights, so the cell's ``optimizer`` part is the wait for the servers. ``dist_sync``: a
server sums one gradient from every worker, then updates once; ``dist_async``: it updates on every
push. The optimizer rescales by the global batch at the linearly scaled rate, so a synchronous
update is DDP's and an asynchronous one is one worker's batch at that rate over the worker count,
as :mod:`~harness.rank.frameworks.torch_ps` has it.

A serving rank runs ps-lite's server in its own process (MXNet's ``KVStoreServer``) with a
controller of its own: besides the optimizer it takes worker 0's word that the timed window starts,
and it wraps the optimizer's updater to count the timed updates (the server's rate). ps-lite does
not tell the updater which worker a gradient comes from, so no staleness is recorded.

The workers count a step after the window (harness.rank.work): each counts its kvstore's pushes and
pulls where the Trainer calls it (:meth:`~harness.rank.frameworks.mxnet.MXNetAdapter.
counting_collectives`); a server counts the updates beyond the window's expected ones as the counted
step's, with the bytes applied, never as timed updates. Asynchronously a fast worker's counted push
may land before a slow worker's last timed one: the window then ends at the expected count of
updates all the same.
"""
from __future__ import annotations

import collections
import pickle
import time
from typing import Callable

import numpy

from harness.rank.frameworks.base import Server
from harness.rank.frameworks.mxnet import AVERAGE_KEY, MXNetAdapter
from harness.rank.frameworks.ps_common import ServerRoles, ServerStats, check_settings, workers_beside
from harness.rank.rankenv import RankInfo
from harness.rank.work import COUNTED_STEPS

SERVE = "dlscale:serve"
"""Worker 0's command that the workers are set up: the server takes over its updater."""
TIMED = "dlscale:timed"
"""Worker 0's command that the timed window starts."""
CONTROLLER_COMMAND = 0
"""ps-lite hands only commands of this head to the server's Python controller."""


class UpdateCounter:
    """A server's updater: the optimizer's (once the workers send it), counting the timed updates; a
    key of :meth:`MXNetPSAdapter.average` sums what the workers push instead."""

    def __init__(self, progress: Callable[[str, int, int], None], expected: int, clock=time.perf_counter):
        self.progress, self.expected, self.clock = progress, expected, clock
        self.optimizer_updater: Callable | None = None
        self.stats = ServerStats()
        self.timed = False
        self.calls: collections.Counter = collections.Counter()
        self.counted = {"calls": 0, "bytes": 0}
        """Updates after the window's expected ones (the workers' counted step), and their bytes."""

    def window_starts(self) -> None:
        self.timed = True
        self.stats.first_arrival = self.clock()

    def __call__(self, key: int, pushed, stored) -> None:
        if key >= AVERAGE_KEY:
            stored += pushed
            return
        if self.optimizer_updater is None:
            stored[:] = pushed  # what ps-lite's server does without an updater
        else:
            self.optimizer_updater(key, pushed, stored)
        if self.timed:
            if self.calls[key] >= self.expected:  # this key's window is over: a counted step's update
                self.counted["calls"] += 1
                self.counted["bytes"] += pushed.size * numpy.dtype(pushed.dtype).itemsize
                return
            self.calls[key] += 1
            rounds = min(self.calls.values())  # every key this server holds updated that often
            if rounds > self.stats.updates:
                self.stats.updates, self.stats.last_update = rounds, self.clock()
                self.progress("timed", rounds, self.expected)


    def served_work(self) -> dict:
        """What this server applied for the workers' counted step: updates and bytes, not by worker
        (ps-lite sums a synchronous round's pushes before the updater, and names no worker)."""
        if not self.counted["calls"]:
            return {"not_counted": "no worker counted a step (counting turned off, or failed: see the workers' work)"}
        return {"applied": dict(self.counted), "steps": COUNTED_STEPS,
                "by_worker_not_counted": "ps-lite names no worker to the server's updater"}


class MXNetPSAdapter(ServerRoles, MXNetAdapter, Server):
    name = "mxnet_ps"

    def __init__(self, *, mode: str, ps_servers: int = 1, shutdown_timeout_s: float = 60.0):
        check_settings(mode, ps_servers)
        super().__init__(shutdown_timeout_s=shutdown_timeout_s)
        self.mode, self.servers = mode, ps_servers
        self.average_calls = 0

    def setup(self, rank: RankInfo, device) -> None:
        import mxnet as mx

        self.mx, self.rank = mx, rank
        self.workers = workers_beside(self.servers, rank.world_size)
        try:
            self.kv = self._join_parameter_server(rank, f"dist_{self.mode}", self.servers,
                                                  "server" if self.serves() else "worker")
        except BaseException:
            self._end_children(timeout_s=0)
            raise

    # --- a worker ---------------------------------------------------------------------------------

    def wrap(self, model, optimizer, loss_fn) -> None:
        if self.serves():
            return  # the servers take the optimizer and the weights from the workers' first step
        model.hybridize(static_alloc=True, static_shape=True)
        self.model, self.loss_fn = model, loss_fn
        # the servers get the optimizer once, with the rescaling it has then: the global batch's
        optimizer.rescale_grad = 1.0 / (self.batch_size * self.workers)
        self.trainer = self.mx.gluon.Trainer(model.collect_params(), optimizer, kvstore=self.kv,
                                             update_on_kvstore=True)
        if self.rank.rank == 0:
            self.kv._send_command_to_servers(CONTROLLER_COMMAND, SERVE)  # noqa: SLF001
        self.kv._barrier()  # noqa: SLF001 - no worker pushes before the servers count

    def forward_backward(self, images, labels):
        return self.traced("forward_backward", self._backward, images, labels)

    def optimizer_step(self) -> None:
        self.trainer.step(1)  # the optimizer's rescale_grad already divides by the global batch

    def window_starts(self) -> None:
        if self.rank.rank == 0:
            self.kv._send_command_to_servers(CONTROLLER_COMMAND, TIMED)  # noqa: SLF001

    def average(self, tensor):
        """Each call a key of its own, which the servers sum (:class:`UpdateCounter`) whether they
        run synchronously or not; pulled once every worker's push has landed."""
        import numpy as np

        mx = self.mx
        value = tensor if isinstance(tensor, mx.nd.NDArray) else mx.nd.array(np.atleast_1d(tensor))
        key = AVERAGE_KEY + self.average_calls
        self.average_calls += 1
        self.kv.init(key, mx.nd.zeros(value.shape))
        self.kv.push(key, value)
        self.barrier()
        total = mx.nd.zeros(value.shape)
        self.kv.pull(key, out=total)
        self.barrier()
        return total / self.workers

    # --- a server ---------------------------------------------------------------------------------

    def serve(self, progress: Callable[[str, int, int], None], steps: int) -> dict:
        """ps-lite's server until the workers are done (worker 0's kvstore stops it as it goes)."""
        from mxnet.kvstore.kvstore_server import KVStoreServer

        counter = UpdateCounter(progress, self.timed_updates_expected(steps))
        kv, get_updater = self.kv, self.mx.optimizer.get_updater

        class Server(KVStoreServer):
            def _controller(self):
                def control(command: int, body: bytes, _) -> None:
                    if body == SERVE.encode():
                        kv._set_updater(counter)  # noqa: SLF001
                    elif body == TIMED.encode():
                        counter.window_starts()
                    elif counter.optimizer_updater is None:
                        # MXNet's own command: every worker sends the optimizer; the first stays (a
                        # later one would drop the momentum of the updates since)
                        counter.optimizer_updater = get_updater(pickle.loads(body))
                return control

        Server(kv).run()
        return {"role": "server", "server": self.rank.rank - self.workers, "keys": len(counter.calls),
                **counter.stats.to_json(), "work": counter.served_work()}

    def settings(self) -> dict:
        return {"version": self.mx.__version__, "kvstore": self.kv.type, "update_on_kvstore": True,
                "mode": self.mode, "servers": self.servers, "workers": self.workers,
                "hybridize": "static_alloc, static_shape",
                "learning_rate": self.learning_rate_rule()}
