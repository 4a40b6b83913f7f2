"""Random arrays made once: training without any I/O, on the numbers every runtime's synthetic loader
trains on (harness.rank.synthetic_data)."""
from __future__ import annotations

import itertools

import mxnet as mx

from harness.rank.batches import Batches
from harness.rank.synthetic_data import synthetic_batch


def SyntheticLoader(*, workload, rank) -> Batches:  # noqa: N802 - a loader is made by calling its name
    images, labels = synthetic_batch(batch_size=workload.batch_size, image_size=workload.image_size,
                                     num_classes=workload.num_classes, seed=workload.seed + rank.rank)
    batch = mx.nd.array(images), mx.nd.array(labels, dtype="float32")  # Gluon's losses take float labels
    return SyntheticBatches(itertools.repeat(batch), {})


class SyntheticBatches(Batches):
    def batch_data(self) -> dict:
        return {"data": {"images_decoded": 0, "bytes_read": 0}}  # one batch, made before the steps
