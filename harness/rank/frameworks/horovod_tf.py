"""Horovod for TensorFlow/Keras: gradients averaged by Horovod's background thread (MPI or Gloo
controller), no ``tf.distribute`` strategy.

The controller follows the launcher as for torch's Horovod (:mod:`harness.rank.frameworks.horovod`):
``mpirun`` and ``srun`` give the MPI controller, ``horovodrun --gloo`` the Gloo one.

Keras 3 variables are not TensorFlow variables (no ``.ref()``), which Horovod 0.28's
``DistributedGradientTape`` and broadcasts need, and Keras 3's optimizer never calls the
``get_gradients`` that ``hvd.DistributedOptimizer`` overrides (that optimizer would train without
averaging anything). So the gradients are taken with respect to each Keras variable's TensorFlow
variable (``.value``) through ``hvd.DistributedGradientTape``, and applied by the plain Keras
optimizer. Horovod and TensorFlow are imported on first use, never at module import (this module
must not import torch either: the TensorFlow runtime's environment has none).
"""
from __future__ import annotations

import os
from typing import Any

from harness.rank.frameworks.base import LossFn, Trainer
from harness.rank.frameworks.traced import TracedCalls
from harness.rank.frameworks.horovod_common import HorovodKnobs, horovod_settings, import_horovod, init_checked
from harness.rank.rankenv import RankInfo

INSTALL = "ci/install_horovod_tf.sh"


class HorovodTFAdapter(TracedCalls, Trainer):
    name = "horovod_tf"

    def __init__(self, *, fusion_threshold_mb: float | None = None, cycle_time_ms: float | None = None):
        self.knobs = HorovodKnobs(fusion_threshold_mb=fusion_threshold_mb, cycle_time_ms=cycle_time_ms)
        self.hvd = None

    def setup(self, rank: RankInfo, device) -> None:
        import tensorflow as tf

        hvd = import_horovod("horovod.tensorflow", INSTALL)
        self.tf, self.rank = tf, rank
        self.knobs.export()
        init_checked(hvd, rank, INSTALL)
        self.hvd = hvd
        # The TensorFlow runtime has already made this rank's GPU (if any) the only one it sees.
        self.device = device

    def wrap(self, model, optimizer, loss_fn: LossFn) -> None:
        tf, hvd = self.tf, self.hvd
        self.model, self.optimizer = model, optimizer
        # Every rank starts from rank 0's weights and statistics. A new optimizer has no state to send
        # (its slots are zeros on every rank), as in the torch adapter.
        hvd.broadcast_variables([variable.value for variable in model.variables], root_rank=0)
        variables = model.trainable_variables
        sources = [variable.value for variable in variables]  # TensorFlow variables, which Horovod's tape needs

        @tf.function(autograph=False)
        def forward_backward(images, labels):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(loss_fn(model(images, training=True), labels))
            # The all-reduce of every gradient (averaged over ranks) happens in gradient().
            averaged = hvd.DistributedGradientTape(tape, op=hvd.Average).gradient(loss, sources)
            return averaged, loss

        @tf.function(autograph=False)
        def apply(averaged):
            optimizer.apply(averaged, variables)

        self._forward_backward, self._apply, self._gradients = forward_backward, apply, None

    def forward_backward(self, images, labels):
        self._gradients, loss = self.traced("forward_backward", self._forward_backward, images, labels)
        return loss  # an eager tensor: no graph to detach from

    def optimizer_step(self) -> None:
        self.traced("optimizer", self._apply, self._gradients)
        self._gradients = None

    def average(self, tensor):
        return self.hvd.allreduce(self.tf.convert_to_tensor(tensor), op=self.hvd.Average, name="dlscale.average")

    def barrier(self) -> None:
        # horovod.tensorflow has no barrier(); an eager all-reduce returns once every rank has joined it.
        float(self.average(0.0))

    def shutdown(self) -> None:
        if self.hvd is not None and self.hvd.is_initialized():
            self.hvd.shutdown()

    def settings(self) -> dict[str, Any]:
        import keras

        return {**horovod_settings(self.hvd), "tensorflow": self.tf.__version__, "keras": keras.__version__,
                "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default")}
