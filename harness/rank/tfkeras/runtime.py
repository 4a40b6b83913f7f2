"""The TensorFlow runtime: a rank's device, threads, Keras model, optimizer, loss and loaders."""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow loads: its start-up notes would fill the log

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from harness.rank.loaders import LOADERS  # noqa: E402
from harness.rank.models import MODELS  # noqa: E402
from harness.rank.runtime import Device, RankRuntime, Sync  # noqa: E402
from harness.rank.trainloop import GraphProbe  # noqa: E402
from harness.rank.work import NotCounted  # noqa: E402


def categorical_loss(num_classes: int, label_smoothing: float):
    """Per-image cross-entropy of logits against integer labels, label-smoothed as torch's."""
    loss = keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=label_smoothing, reduction=None)

    def per_image(logits, labels):
        return loss(tf.one_hot(labels, num_classes), logits)
    return per_image


class KerasProbe(GraphProbe):
    """Forward and backward of a clone of the model (its own variables, outside any strategy): no
    communication. Its first call traces the function, untimed."""

    def __init__(self, model, loss_fn):
        super().__init__()
        self.model = keras.models.clone_model(model)
        variables = self.model.trainable_variables

        @tf.function(autograph=False)
        def step(images, labels):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(loss_fn(self.model(images, training=True), labels))
            return tape.gradient(loss, variables)
        self._traced_step = step

    def step(self, images, labels) -> None:
        self._traced_step(images, labels)


class TensorFlowRuntime(RankRuntime):
    name = "tensorflow"

    def work_counter(self, adapter, device):
        from harness.rank.frameworks.traced import TracedCalls
        from harness.rank.tf_work import TFWorkCounter

        if why := adapter.work_not_counted():
            raise NotCounted(why)
        if not isinstance(adapter, TracedCalls):
            raise NotCounted(f"{adapter.name}'s steps are not TensorFlow functions the harness calls")
        return TFWorkCounter(adapter, device)

    def pick_device(self, requested: str, local_rank: int) -> Device:
        gpus = tf.config.list_physical_devices("GPU")
        if requested == "cpu" or (requested == "auto" and not gpus):
            tf.config.set_visible_devices([], "GPU")
            return Device("cpu")
        if local_rank >= len(gpus):
            raise RuntimeError(f"local rank {local_rank} has no GPU: TensorFlow sees {len(gpus)} on this node")
        tf.config.set_visible_devices(gpus[local_rank], "GPU")
        return Device("cuda", local_rank)

    def set_threads(self, threads: int) -> None:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)

    def seed(self, seed: int) -> None:
        keras.utils.set_random_seed(seed)

    def build(self, adapter, model: str, workload, world_size: int, device, numerics=None):
        network = MODELS.create_in("tensorflow", model, image_size=workload.image_size,
                                   num_classes=workload.num_classes)
        # Keras' SGD: the same momentum update as torch's; its weight decay is decoupled (w -= lr*wd*w).
        optimizer = keras.optimizers.SGD(learning_rate=workload.base_lr * world_size, momentum=workload.momentum,
                                         weight_decay=workload.weight_decay)
        optimizer.build(network.trainable_variables)
        return network, optimizer, categorical_loss(workload.num_classes, workload.label_smoothing)

    def probe(self, model, loss_fn, device) -> KerasProbe:
        return KerasProbe(model, loss_fn)

    def sync(self, device) -> Sync:
        if device.type == "cuda":
            return tf.test.experimental.sync_devices
        return lambda: None  # eager TensorFlow returns from a CPU function once it has run

    def loader(self, name: str, workload, rank, device):
        return LOADERS.create_in("tensorflow", name, workload=workload, rank=rank)
