"""TensorFlow's parameter server: ``tf.distribute.ParameterServerStrategy`` driven by its
``ClusterCoordinator``, asynchronous by design (each worker's gradients are applied as they arrive).

Of a launch's ranks the last ``ps_servers`` are the strategy's ``ps`` tasks and the others its
``worker`` tasks, each a ``tf.distribute.Server`` in the rank's process; rank 0 starts the
coordinator (the strategy's ``chief``, :mod:`harness.rank.tfkeras.coordinator`) as its child, as the
``mxnet`` cell starts ps-lite's scheduler. TensorFlow's strategy is single-client: the coordinator
builds the model (its variables on the servers), makes each worker's dataset and schedules every
step; a worker's process only executes the steps it is sent. So the coordinator keeps, of every
step, the worker's own clock readings (:func:`step_closure` in the coordinator: before the batch,
after the gradients, after the update) and which worker ran it (its process id), and each worker
rank makes its record from its own steps (:func:`worker_samples`); the servers' record counts the
updates they applied. A worker rank times its compute probe on its own batch before the coordinator
starts and after it is done, so that no probe runs beside the steps.

The ranks and the coordinator meet by files in the launch's directory (below); every rank relays
the coordinator's progress, so that the runner hears the cell while the coordinator works, and a
fault set for any rank strikes it at that step. TensorFlow is imported on first use.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

from harness.common.jsonio import write_json_atomic
from harness.rank.frameworks.base import Follower, FrameworkAdapter, Role, Server
from harness.rank.frameworks.ps_common import ServerRoles, ServerStats, check_settings, workers_beside
from harness.rank.frameworks.tensorflow import publish_and_gather
from harness.rank.rankenv import RankInfo, spare_port

POLL_S = 0.1
PUBLISHED = "tf-ps-rank"
"""Each rank's address, process id and device type (rank 0's: the coordinator's address too): ``<PUBLISHED><rank>.json``."""
COORDINATOR_PROGRESS = "tf-ps-coordinator.json"
COORDINATOR_ERROR = "tf-ps-coordinator-error.json"
DONE = "tf-ps-done.json"
"""The coordinator's word that every step has run: the servers' figures."""
STAMP_FIELDS = ("started", "batch_read", "gradients_computed", "applied", "loss", "pid")
"""What a step returns to the coordinator, in this order: the worker's clock (``tf.timestamp``) at
its start, once it has its batch, once its gradients are computed and once they are applied; its
loss; its process id."""


def probed_path(workdir: Path, rank: int) -> Path:
    """A worker rank's word that its compute probes before the window are done."""
    return workdir / f"tf-ps-probed-rank{rank}.json"


def steps_path(workdir: Path, rank: int) -> Path:
    """The steps a worker rank executed, in order, as the coordinator received them."""
    return workdir / f"tf-ps-steps-rank{rank}.json"


def cluster_spec(published: Sequence[dict], workers: int) -> dict[str, list[str]]:
    """TensorFlow's cluster from what every rank published: rank order, workers first."""
    return {"chief": [published[0]["chief"]],
            "worker": [entry["address"] for entry in published[:workers]],
            "ps": [entry["address"] for entry in published[workers:]]}


def schedule_another(counts: Sequence[int], per_worker: int, scheduled: int, limit: int) -> bool:
    """Whether the coordinator schedules one more step, given how many each worker rank has run. It
    hands every step to whichever worker is free, so a faster worker runs more; it goes on until each
    has run its ``per_worker`` (warm-up and timed), so that every record times the steps the cell
    asks for with the other workers busy beside them. A worker still short once ``limit`` steps are
    scheduled fails the cell, named."""
    fewest = min(counts)
    if fewest >= per_worker:
        return False
    if scheduled >= limit:
        short = counts.index(fewest)
        raise RuntimeError(f"worker rank {short} executed {fewest} of its {per_worker} steps when {scheduled} were "
                           f"scheduled: the coordinator sends it too little work to time")
    return True


def worker_samples(steps: Sequence[Sequence[float]], warmup: int, timed: int, batch_size: int) -> dict:
    """A worker's record from its steps (rows of :data:`STAMP_FIELDS`, in order), the training
    loop's parts: the wait for the batch, forward and backward, and the rest (the update at the
    servers, and the wait for the coordinator's next step since the previous one ended)."""
    column = {name: index for index, name in enumerate(STAMP_FIELDS)}
    step_times, data_wait, fwd_bwd, optimizer, losses = [], [], [], [], []
    window_start = None
    for index in range(warmup, warmup + timed):
        row = steps[index]
        previous_end = steps[index - 1][column["applied"]] if index else row[column["started"]]
        window_start = previous_end if window_start is None else window_start
        step = row[column["applied"]] - previous_end
        data = row[column["batch_read"]] - row[column["started"]]
        compute = row[column["gradients_computed"]] - row[column["batch_read"]]
        step_times.append(step)
        data_wait.append(data)
        fwd_bwd.append(compute)
        optimizer.append(step - data - compute)
        losses.append(row[column["loss"]])
    return {"step_times": step_times, "data_wait": data_wait, "losses": losses, "images": timed * batch_size,
            "window_s": steps[warmup + timed - 1][column["applied"]] - window_start,
            "fwd_bwd": fwd_bwd, "optimizer": optimizer}


def server_stats(steps_by_worker: Sequence[Sequence[Sequence[float]]], warmup: int) -> ServerStats:
    """What every server saw past the warm-up: each step updates every server's variables once."""
    applied = STAMP_FIELDS.index("applied")
    timed = [steps[warmup:] for steps in steps_by_worker]
    return ServerStats(updates=sum(len(steps) for steps in timed),
                       first_arrival=min(steps[warmup - 1][applied] if warmup else steps[0][0]
                                         for steps in steps_by_worker),
                       last_update=max(steps[-1][applied] for steps in timed if steps))


class TensorFlowPSAdapter(ServerRoles, FrameworkAdapter, Server, Follower):
    name = "tensorflow_ps"
    worker_role = Role.FOLLOWS

    def __init__(self, *, mode: str = "async", ps_servers: int = 1, shutdown_timeout_s: float = 60.0):
        check_settings(mode, ps_servers)
        if mode != "async":
            raise ValueError("TensorFlow's ParameterServerStrategy applies each worker's gradients as they arrive: "
                             "it has no synchronous mode")
        self.mode, self.servers, self.shutdown_timeout_s = mode, ps_servers, shutdown_timeout_s
        self.batch_size, self.workdir = 0, None
        self.coordinator: subprocess.Popen | None = None
        self.relayed: tuple | None = None

    def configure(self, *, batch_size: int, workdir: Path | None = None) -> None:
        if workdir is None:
            raise RuntimeError("TensorFlow's parameter-server ranks meet in the launch's directory: none was given")
        self.batch_size, self.workdir = batch_size, workdir

    def setup(self, rank: RankInfo, device) -> None:
        import tensorflow as tf

        self.tf, self.rank = tf, rank
        self.workers = workers_beside(self.servers, rank.world_size)
        chief = {"chief": f"{rank.master_addr}:{spare_port(rank)}"} if rank.rank == 0 else {}
        published = publish_and_gather(rank, self.workdir, prefix=PUBLISHED,
                                       extra={"pid": os.getpid(), "device": device.type, **chief})
        self.cluster = cluster_spec(published, self.workers)
        job, index = ("ps", rank.rank - self.workers) if self.serves() else ("worker", rank.rank)
        # the steps run under the server's own settings, not the process's: its cores for the
        # kernels, and TensorFlow's default of inter-op threads (with one, a step waiting for its
        # batch or for a server holds the only thread the awaited op could run on)
        threads = tf.config.threading.get_intra_op_parallelism_threads()
        config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=threads)
        self.server = tf.distribute.Server(tf.train.ClusterSpec(self.cluster), job_name=job, task_index=index,
                                           protocol="grpc", config=config, start=True)
        if rank.rank == 0:
            # the coordinator places nothing on a GPU: the workers compute, the servers hold the variables
            self.coordinator = subprocess.Popen(
                [sys.executable, "-m", "harness.rank.tfkeras.coordinator", str(self.workdir / "spec.json")],
                env={**os.environ, "CUDA_VISIBLE_DEVICES": ""}, stdin=subprocess.DEVNULL)

    def wrap(self, model, optimizer, loss_fn) -> None:
        pass  # the coordinator builds the model that trains; this rank's copy serves its compute probe

    def follow(self, progress: Callable[[str, int, int], None], probes: Callable[[], list[float]]) -> dict:
        before = probes()
        write_json_atomic(probed_path(self.workdir, self.rank.rank), {"probes": before})
        sent = self._await(steps_path(self.workdir, self.rank.rank), progress)
        after = probes()
        samples = worker_samples(sent["steps"], sent["warmup"], sent["timed"], self.batch_size)
        return {**samples, "compute_probe": before + after, **({"work": sent["work"]} if "work" in sent else {})}

    def serve(self, progress: Callable[[str, int, int], None], steps: int) -> dict:
        done = self._await(self.workdir / DONE, progress)
        server = self.rank.rank - self.workers
        served = done.get("work", {})
        work = served.get(str(server)) or {"not_counted": served.get("not_counted", "the coordinator counted no step")}
        return {"role": "server", "server": server, **done["servers"], "work": work}

    def _await(self, path: Path, progress: Callable[[str, int, int], None]) -> dict:
        """``path``'s content once the coordinator has written it; meanwhile its progress, relayed."""
        while not path.exists():
            self._check_coordinator()
            self._relay(progress)
            time.sleep(POLL_S)
        self._relay(progress)
        return json.loads(path.read_text())

    def _relay(self, progress: Callable[[str, int, int], None]) -> None:
        try:
            state = json.loads((self.workdir / COORDINATOR_PROGRESS).read_text())
        except (OSError, json.JSONDecodeError):
            return  # not written yet (it is written atomically)
        phase, step, of = state["phase"], state["step"], state["of"]
        if self.relayed == (phase, step, of):
            return  # no heartbeat of our own: a stuck coordinator must not look alive
        # every step in between, so that a fault set at any one of them strikes
        first = self.relayed[1] + 1 if self.relayed and self.relayed[0] == phase else min(1, step)
        for passed in range(first, step + 1):
            progress(phase, passed, of)
        self.relayed = (phase, step, of)

    def _check_coordinator(self) -> None:
        failure = self.workdir / COORDINATOR_ERROR
        exited = self.coordinator is not None and self.coordinator.poll() is not None
        if exited:
            time.sleep(1.0)  # its error report may be on the way
        if failure.exists():
            raise RuntimeError(f"TensorFlow's coordinator (rank 0's child) failed: "
                               f"{json.loads(failure.read_text())['error']}")
        if exited:
            raise RuntimeError(f"TensorFlow's coordinator (rank 0's child, pid {self.coordinator.pid}) exited with "
                               f"status {self.coordinator.returncode} before the steps were done")

    def barrier(self) -> None:
        pass  # the coordinator orders the ranks' phases (files in the launch's directory)

    def shutdown(self) -> None:
        """Rank 0 waits for its coordinator to end (at once, while an error propagates)."""
        if self.coordinator is None:
            return
        failing = sys.exc_info()[0] is not None
        try:
            self.coordinator.wait(timeout=0 if failing else self.shutdown_timeout_s)
        except subprocess.TimeoutExpired:
            self.coordinator.kill()
            self.coordinator.wait()
        self.coordinator = None

    def settings(self) -> dict:
        import keras

        return {"version": self.tf.__version__, "keras": keras.__version__, "strategy": "ParameterServerStrategy",
                "coordinator": "ClusterCoordinator (rank 0's child)", "mode": self.mode, "servers": self.servers,
                "workers": self.workers, "input": "a per-worker dataset, unsharded (the strategy's)",
                "learning_rate": self.learning_rate_rule(), "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default")}

