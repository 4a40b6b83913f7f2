"""MXNet/Gluon: a ``gluon.Trainer`` over MXNet's kvstore. One rank trains with kvstore ``device``
(on one device the Trainer makes no store: nothing to reduce); several ranks with ``dist_sync``,
ps-lite's parameter server: a scheduler, one server, and the ranks as its workers.

dlscale's launcher starts the ranks, not MXNet's ``launch.py``, so each rank takes its DMLC role
itself (:func:`process_environment`): rank 0 starts the scheduler and the server as its own child
processes (an interpreter that imports mxnet with ``DMLC_ROLE`` scheduler or server runs that role
until the workers finish), which share its cores: the server's summing is rank 0's work. Every rank
is a worker. All ports derive from the launch's ``MASTER_PORT``, so the ranks agree without
talking: the scheduler's is the next one, the workers' follow in rank order, since ps-lite numbers
the workers of one host by ascending port (across hosts it orders them by address first, and a
kvstore rank that is not the launcher's is refused). :mod:`~harness.rank.frameworks.mxnet_ps` runs
ps-lite with servers of their own, ranks of the launch.

The step split: :meth:`MXNetAdapter.forward_backward` runs forward, backward and
``Trainer.allreduce_grads``, which pushes each gradient to the server, where the workers' pushes are
summed, and pulls the sum back: all of the communication lands there. The Trainer keeps
``update_on_kvstore=False`` (dist_sync allows it), so the server holds no optimizer and only sums;
:meth:`MXNetAdapter.optimizer_step` is ``Trainer.update``, SGD on this rank alone. Gluon's habit is
``step(batch per worker)``, which with the server's sum multiplies the gradient by the worker count;
the update here normalises by the global batch instead, so that it is DDP's: the mean gradient at
the linearly scaled rate. MXNet's engine runs all of it asynchronously; the loop's sync
(``mx.nd.waitall``) ends each part. MXNet is imported on first use, never at module import.
"""
from __future__ import annotations

import contextlib
import gc
import os
import socket
import subprocess
import sys
import time
import weakref
from typing import Any, Iterator, Mapping

from harness.rank.frameworks.base import LossFn, Trainer
from harness.rank.frameworks.traced import TracedCalls
from harness.rank.rankenv import RankInfo, address_toward

ROLES = ("scheduler", "server", "worker")
SCHEDULER_PORT_OFFSET = 1
WORKER_PORT_OFFSET = 2
"""Rank r's worker (or server) listens on MASTER_PORT + 2 + r; a server beside rank 0 on the port after
the last rank's."""
AVERAGE_KEY = 1 << 30
"""Kvstore keys of :meth:`MXNetAdapter.average`, far above the Trainer's (one per parameter, from 0)."""
START_TIMEOUT_S = 120.0


def is_ps_variable(name: str) -> bool:
    """ps-lite reads ``DMLC_*`` and ``PORT``; one left over from elsewhere (a ``DMLC_RANK`` keeps
    ps-lite from recording the id the scheduler assigns) must not reach the job's processes."""
    return name.startswith("DMLC_") or name == "PORT"


def process_environment(base: Mapping[str, str], rank: RankInfo, role: str,
                        node_host: str | None = None, serving_ranks: int = 0) -> dict[str, str]:
    """``base`` with the ps-lite variables of one process of ``rank``'s job: its role, where the
    scheduler listens, how many servers and workers it waits for, and, for a server and a worker,
    the port it listens on and (where given) the address it tells the others. ``serving_ranks``:
    how many of the launch's ranks (the last) serve; 0 where one server runs beside rank 0 and
    every rank is a worker."""
    if role not in ROLES:
        raise ValueError(f"unknown ps-lite role {role!r}; valid roles: {', '.join(ROLES)}")
    if rank.master_port + WORKER_PORT_OFFSET + rank.world_size > 65535:
        raise ValueError(f"MASTER_PORT {rank.master_port} leaves no room above it for ps-lite's "
                         f"{rank.world_size + 2} ports")
    env = {name: value for name, value in base.items() if not is_ps_variable(name)}
    env.update(DMLC_ROLE=role, DMLC_PS_ROOT_URI=rank.master_addr,
               DMLC_PS_ROOT_PORT=str(rank.master_port + SCHEDULER_PORT_OFFSET),
               DMLC_NUM_SERVER=str(serving_ranks or 1), DMLC_NUM_WORKER=str(rank.world_size - serving_ranks))
    if role == "scheduler":
        # ZeroMQ binds an address, not a host name: this is ps-lite's one switch that makes the
        # scheduler bind every interface, so that MASTER_ADDR may be a name
        env["DMLC_USE_KUBERNETES"] = "1"
        return env
    beside_rank_0 = role == "server" and not serving_ranks
    env["PORT"] = str(rank.master_port + WORKER_PORT_OFFSET + (rank.world_size if beside_rank_0 else rank.rank))
    if node_host:
        env["DMLC_NODE_HOST"] = node_host
    return env


def claim_port(port: int) -> None:
    """Fail clearly where the scheduler's port is taken: a worker would otherwise join whatever
    listens there, and the scheduler's own failure would show only in the log."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as ZeroMQ binds: past TIME_WAIT
        try:
            probe.bind(("", port))
        except OSError as error:
            raise RuntimeError(f"MXNet's scheduler port {port} (MASTER_PORT + {SCHEDULER_PORT_OFFSET}) is taken on "
                               f"this node: {error}") from error


def wait_until_listening(host: str, port: int, children: Mapping[str, subprocess.Popen],
                         timeout_s: float = START_TIMEOUT_S) -> None:
    """Until the scheduler accepts connections; an error naming the role that exited first."""
    deadline = time.monotonic() + timeout_s
    while True:
        for role, child in children.items():
            if child.poll() is not None:
                raise RuntimeError(f"MXNet's {role} (pid {child.pid}) exited with {child.returncode} before the "
                                   f"scheduler listened on {host}:{port}; its error is in rank 0's log")
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"MXNet's scheduler did not listen on {host}:{port} within {timeout_s:.0f} s")
            time.sleep(0.1)


class Loss:
    """The step's loss as the training loop reads it, with ``float()`` once the timed window is over:
    an MXNet array has no ``__float__``, and reading one waits for it."""

    def __init__(self, value):
        self.value = value

    def __float__(self) -> float:
        return float(self.value.asscalar())


class MXNetAdapter(TracedCalls, Trainer):
    name = "mxnet"

    def __init__(self, *, shutdown_timeout_s: float = 60.0):
        self.shutdown_timeout_s = shutdown_timeout_s
        self.batch_size = 0
        self.mx = None
        self.kv = None
        self.trainer = None
        self._weights_broadcast = False
        self.children: dict[str, subprocess.Popen] = {}
        self._average_keys: dict[tuple, int] = {}

    def configure(self, *, batch_size: int, workdir=None) -> None:
        self.batch_size = batch_size

    def setup(self, rank: RankInfo, device) -> None:
        import mxnet as mx

        self.mx, self.rank = mx, rank
        if rank.world_size > 1:
            try:
                self.kv = self._join_parameter_server(rank)
            except BaseException:
                self._end_children(timeout_s=0)
                raise

    def _join_parameter_server(self, rank: RankInfo, kvstore: str = "dist_sync", serving_ranks: int = 0,
                               role: str = "worker"):
        """This process's part of ps-lite's job, as ``role``; rank 0 starts the scheduler (and,
        without ``serving_ranks``, the one server) as its children first."""
        host = address_toward(rank.master_addr, rank.master_port)
        if rank.rank == 0:
            claim_port(rank.master_port + SCHEDULER_PORT_OFFSET)
            children = ("scheduler",) if serving_ranks else ("scheduler", "server")
            self.children = {child: subprocess.Popen([sys.executable, "-c", "import mxnet"],
                                                     env=process_environment(os.environ, rank, child, host,
                                                                             serving_ranks))
                             for child in children}
            wait_until_listening(rank.master_addr, rank.master_port + SCHEDULER_PORT_OFFSET, self.children)
        own = process_environment(os.environ, rank, role, host, serving_ranks)
        for name in [name for name in os.environ if name not in own]:
            del os.environ[name]
        os.environ.update(own)
        kv = self.mx.kv.create(kvstore)
        workers = rank.world_size - serving_ranks
        if role == "worker" and (kv.rank, kv.num_workers) != (rank.rank, workers):
            raise RuntimeError(
                f"MXNet's kvstore numbers this worker {kv.rank} of {kv.num_workers}, but the launcher "
                f"({rank.source}) started it as rank {rank.rank} of {workers} workers: ps-lite numbers workers "
                f"by address, then port (this one: {own.get('DMLC_NODE_HOST', 'auto')}:{own['PORT']})")
        return kv

    def wrap(self, model, optimizer, loss_fn: LossFn) -> None:
        model.hybridize(static_alloc=True, static_shape=True)
        self.model, self.loss_fn = model, loss_fn
        self.trainer = self.mx.gluon.Trainer(model.collect_params(), optimizer, kvstore=self.kv or "device",
                                             update_on_kvstore=False)

    def forward_backward(self, images, labels) -> Loss:
        loss = self.traced("forward_backward", self._backward, images, labels)
        self.trainer.allreduce_grads()
        return loss

    def _backward(self, images, labels) -> Loss:
        with self.mx.autograd.record():
            losses = self.loss_fn(self.model(images), labels)
        losses.backward()
        if self.kv is not None and not self._weights_broadcast:
            self._broadcast_initial_weights()
        return Loss(losses.mean())

    def _broadcast_initial_weights(self) -> None:
        """Rank 0's initial weights, pulled by every rank before any gradient is pushed.

        Gluon's Trainer broadcasts them inside its first ``allreduce_grads``, right before that
        step's gradients, and nothing orders a key's broadcast pull after its gradient push: with
        ``update_on_kvstore=False`` the server replaces the stored weights with the gradients' sum,
        and a pull that reaches it later hands the parameter that sum as its weights (a third of
        the 2-rank ResNet44 launches here, the server sharing rank 0's core). The Trainer's own two
        steps of that broadcast, then a wait for it, avoid the race; they are private, MXNet 1.x's."""
        trainer = self.trainer
        if not trainer._kv_initialized:  # noqa: SLF001
            trainer._init_kvstore()  # noqa: SLF001
        trainer._init_params()  # noqa: SLF001 - every parameter is initialised once a forward pass has run
        self.mx.nd.waitall()
        self._weights_broadcast = True

    def optimizer_step(self) -> None:
        self.trainer.update(self.batch_size * self.rank.world_size)

    @contextlib.contextmanager
    def counting_collectives(self, tally) -> Iterator[None]:
        """The kvstore's pushes and pulls, counted where the Trainer calls the store, per key: the
        bytes of the arrays pushed, and of those pulled into. One rank has no store: none, counted."""
        kv = self.kv
        if kv is None:
            yield
            return

        import numpy as np

        def nbytes(arrays) -> int:
            arrays = arrays if isinstance(arrays, (list, tuple)) else [arrays]
            return sum(array.size * np.dtype(array.dtype).itemsize for array in arrays)

        def push(key, value, *args, **kwargs):
            tally.add("push", nbytes(value))
            return type(kv).push(kv, key, value, *args, **kwargs)

        def pull(key, out=None, *args, **kwargs):
            tally.add("pull", nbytes(out))
            return type(kv).pull(kv, key, out, *args, **kwargs)

        def pushpull(key, value, out=None, *args, **kwargs):
            tally.add("push", nbytes(value))
            tally.add("pull", nbytes(out if out is not None else value))
            return type(kv).pushpull(kv, key, value, out, *args, **kwargs)

        kv.push, kv.pull, kv.pushpull = push, pull, pushpull
        try:
            yield
        finally:
            for name in ("push", "pull", "pushpull"):
                delattr(kv, name)

    def average(self, tensor):
        import numpy as np

        mx = self.mx
        value = tensor if isinstance(tensor, mx.nd.NDArray) else mx.nd.array(np.atleast_1d(tensor))
        if self.kv is None:
            return value
        key = self._average_keys.get(value.shape)
        if key is None:
            key = self._average_keys[value.shape] = AVERAGE_KEY + len(self._average_keys)
            self.kv.init(key, mx.nd.zeros(value.shape))
        total = mx.nd.zeros(value.shape)
        self.kv.pushpull(key, value, out=total)
        return total / self.kv.num_workers

    def barrier(self) -> None:
        self.mx.nd.waitall()
        if self.kv is not None:
            self.kv._barrier()  # noqa: SLF001 - the kvstore's documented way to hold every worker

    def shutdown(self) -> None:
        """Free the kvstore, whose destructor waits for every worker, stops the server and ends the
        scheduler; then wait for rank 0's children. While an error propagates (a peer may never
        reach that wait) the store is left to the process's exit, and the children are ended."""
        failing = sys.exc_info()[0] is not None
        if self.kv is not None and not failing:
            self.mx.nd.waitall()
            store = weakref.ref(self.kv)
            if self.trainer is not None:
                # each parameter holds its trainer, and the worker holds the model until its record
                # is written: the trainer, and with it the store, goes once they let go of it
                for parameter in self.model.collect_params().values():
                    parameter._set_trainer(None)  # noqa: SLF001
            self.trainer = self.kv = None
            gc.collect()
            if store() is not None:
                self._end_children(timeout_s=0)
                raise RuntimeError("MXNet's kvstore outlived the shutdown (something still refers to it): its "
                                   "destructor would wait for the other workers at this process's exit")
        self.trainer = None
        self._end_children(timeout_s=0 if failing else self.shutdown_timeout_s)

    def _end_children(self, timeout_s: float) -> None:
        for child in self.children.values():
            try:
                child.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                child.terminate()
                try:
                    child.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()
        self.children = {}

    def settings(self) -> dict[str, Any]:
        settings = {"version": self.mx.__version__, "kvstore": self.kv.type if self.kv else "device",
                    "update_on_kvstore": False, "servers": 1 if self.kv else 0,
                    "workers": self.kv.num_workers if self.kv else 1,
                    "hybridize": "static_alloc, static_shape", "omp_threads": os.environ.get("OMP_NUM_THREADS")}
        if self.kv is not None:
            settings["scheduler"] = f"{os.environ['DMLC_PS_ROOT_URI']}:{os.environ['DMLC_PS_ROOT_PORT']}"
        return settings
