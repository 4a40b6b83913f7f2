"""TensorFlow/Keras: ``tf.distribute.MultiWorkerMirroredStrategy``, one worker per rank, gradients
summed by the strategy's collective all-reduce (a ring over gRPC on CPUs, NCCL on GPUs).

The workers find each other through TensorFlow's own ``SlurmClusterResolver`` under srun, and
through the launch's directory otherwise (mpirun, torchrun: each rank publishes its address there
and reads the others'). The step is split as the training loop times it: :meth:`forward_backward`
computes the gradients and all-reduces them (the loss scaled by the global batch, as Keras does),
:meth:`optimizer_step` applies them in cross-replica context, where Keras' optimizer does not
reduce them a second time. TensorFlow is imported on first use, never at module import.
"""
from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from harness.common.jsonio import write_json_atomic
from harness.rank.frameworks.base import LossFn, Trainer
from harness.rank.frameworks.traced import TracedCalls
from harness.rank.rankenv import RankInfo, address_toward, own_port

RENDEZVOUS_TIMEOUT_S = 300.0


def published_cluster(rank: RankInfo, workdir: Path, timeout_s: float = RENDEZVOUS_TIMEOUT_S) -> list[str]:
    """Every rank's ``host:port``, by rank: this rank's written to ``workdir``, the others' read from it."""
    return [entry["address"] for entry in publish_and_gather(rank, workdir, timeout_s=timeout_s)]


def publish_and_gather(rank: RankInfo, workdir: Path, *, prefix: str = "tf-worker-", extra: dict | None = None,
                       timeout_s: float = RENDEZVOUS_TIMEOUT_S) -> list[dict]:
    """Every rank's entry, by rank: this rank's (its ``address`` on its own port of the launch's
    block, which the runner found free outside the kernel's ephemeral range, and ``extra``) written
    to ``workdir`` as ``<prefix><rank>.json``, the others' read from there."""
    host = address_toward(rank.master_addr, rank.master_port) or socket.gethostname()
    write_json_atomic(workdir / f"{prefix}{rank.rank}.json", {"address": f"{host}:{own_port(rank)}", **(extra or {})})
    return gather_published(workdir, prefix, rank.world_size, timeout_s)


def gather_published(workdir: Path, prefix: str, ranks: int, timeout_s: float = RENDEZVOUS_TIMEOUT_S) -> list[dict]:
    """The entries ``ranks`` ranks published in ``workdir``, by rank, once all have."""
    deadline = time.monotonic() + timeout_s
    while True:
        paths = [workdir / f"{prefix}{other}.json" for other in range(ranks)]
        if all(path.exists() for path in paths):
            return [json.loads(path.read_text()) for path in paths]
        if time.monotonic() > deadline:
            silent = [str(other) for other, path in enumerate(paths) if not path.exists()]
            raise TimeoutError(f"TensorFlow rank(s) {', '.join(silent)} did not publish their address in "
                               f"{workdir} within {timeout_s:.0f} s")
        time.sleep(0.1)


class TensorFlowAdapter(TracedCalls, Trainer):
    name = "tensorflow"

    def __init__(self, *, timeout_s: int = 300):
        self.timeout_s = timeout_s
        self.batch_size = 0
        self.workdir: Path | None = None

    def configure(self, *, batch_size: int, workdir: Path | None = None) -> None:
        self.batch_size, self.workdir = batch_size, workdir

    def setup(self, rank: RankInfo, device) -> None:
        import tensorflow as tf

        self.tf, self.rank = tf, rank
        self.cluster = "local"
        resolver = None
        if rank.world_size > 1 and rank.source == "slurm":
            # The resolver lists a node's tasks only as far as its GPU slots go, and without a GPU
            # count it asks nvidia-smi, which a CPU node lacks. GPUs are the runtime's to assign
            # (auto_set_gpu off: the slots set nothing), so give it a slot per task.
            resolver = tf.distribute.cluster_resolver.SlurmClusterResolver(
                port_base=rank.master_port + 1, gpus_per_node=rank.world_size, gpus_per_task=1, auto_set_gpu=False)
            self.cluster = "SlurmClusterResolver"
        elif rank.world_size > 1:
            if self.workdir is None:
                raise RuntimeError("TensorFlow workers outside Slurm meet in the launch's directory: none was given")
            workers = published_cluster(rank, self.workdir)
            resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
                tf.train.ClusterSpec({"worker": workers}), task_type="worker", task_id=rank.rank, rpc_layer="grpc")
            self.cluster = "launch directory"
        implementation = tf.distribute.experimental.CommunicationImplementation
        self.communication = implementation.NCCL if device.type == "cuda" else implementation.RING
        options = tf.distribute.experimental.CommunicationOptions(implementation=self.communication,
                                                                  timeout_seconds=self.timeout_s)
        self.strategy = tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver,
                                                                  communication_options=options)
        if self.strategy.num_replicas_in_sync != rank.world_size:
            raise RuntimeError(f"TensorFlow's strategy holds {self.strategy.num_replicas_in_sync} replicas but the "
                               f"launcher ({rank.source}) started {rank.world_size} ranks")

    def scope(self):
        return self.strategy.scope()

    def wrap(self, model, optimizer, loss_fn: LossFn) -> None:
        tf, strategy = self.tf, self.strategy
        global_batch = self.batch_size * self.rank.world_size
        self.model, self.optimizer = model, optimizer
        variables = model.trainable_variables

        def gradients(images, labels):
            with tf.GradientTape() as tape:
                per_image = loss_fn(model(images, training=True), labels)
                loss = tf.nn.compute_average_loss(per_image, global_batch_size=global_batch)
            summed = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM,
                                                                    tape.gradient(loss, variables))
            return summed, tf.reduce_mean(per_image)  # this rank's loss, as the torch adapters report it

        @tf.function(autograph=False)
        def forward_backward(images, labels):
            return strategy.run(gradients, args=(images, labels))

        @tf.function(autograph=False)
        def apply(summed):
            optimizer.apply(summed, variables)  # cross-replica context: applied, not reduced again

        self._forward_backward, self._apply, self._gradients = forward_backward, apply, None

    def forward_backward(self, images, labels):
        self._gradients, loss = self.traced("forward_backward", self._forward_backward, images, labels)
        return loss

    def optimizer_step(self) -> None:
        self.traced("optimizer", self._apply, self._gradients)
        self._gradients = None

    def average(self, tensor):
        tf = self.tf
        mean = self.strategy.run(
            lambda value: tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.MEAN, value),
            args=(tf.convert_to_tensor(tensor),))
        return self.strategy.experimental_local_results(mean)[0]

    def barrier(self) -> None:
        float(self.average(0.0))

    def shutdown(self) -> None:
        pass  # the strategy's gRPC server lives as long as the process, which ends after the record

    def settings(self) -> dict[str, Any]:
        import keras

        return {"version": self.tf.__version__, "keras": keras.__version__,
                "strategy": "MultiWorkerMirroredStrategy", "cluster": self.cluster,
                "communication": self.communication.name, "replicas": self.strategy.num_replicas_in_sync,
                "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default")}
