"""Random tensors made once: training without any I/O, as harness.rank.loaders.synthetic for torch."""
from __future__ import annotations

import tensorflow as tf

from harness.rank.batches import Batches
from harness.rank.synthetic_data import synthetic_batch


def SyntheticLoader(*, workload, rank) -> Batches:  # noqa: N802 - a loader is made by calling its name
    images, labels = synthetic_batch(batch_size=workload.batch_size, image_size=workload.image_size,
                                     num_classes=workload.num_classes, seed=workload.seed + rank.rank)
    batch = tf.constant(images.transpose(0, 2, 3, 1)), tf.constant(labels.astype("int32"))  # NHWC, as Keras takes it
    return SyntheticBatches(tf.data.Dataset.from_tensors(batch).repeat(), {})


class SyntheticBatches(Batches):
    def batch_data(self) -> dict:
        return {"data": {"images_decoded": 0, "bytes_read": 0}}  # one batch, made before the steps
