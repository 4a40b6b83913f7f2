"""Random arrays made once: training without any I/O, on the numbers every runtime's synthetic loader
trains on (harness.rank.synthetic_data)."""
from __future__ import annotations

import itertools
from typing import Callable, Iterable

import mxnet as mx

from harness.rank.synthetic_data import synthetic_batch


class Batches:
    """Batches as the training loop takes a loader: endless (images, labels), settings, close."""

    def __init__(self, batches: Iterable, settings: dict, close: Callable[[], None] | None = None):
        self._batches = batches
        self._settings = settings
        self._close = close

    def __iter__(self):
        return iter(self._batches)

    def settings(self) -> dict:
        return dict(self._settings)

    def close(self) -> None:
        if self._close is not None:
            self._close()
        self._batches = None


def SyntheticLoader(*, workload, rank) -> Batches:  # noqa: N802 - a loader is made by calling its name
    images, labels = synthetic_batch(batch_size=workload.batch_size, image_size=workload.image_size,
                                     num_classes=workload.num_classes, seed=workload.seed + rank.rank)
    batch = mx.nd.array(images), mx.nd.array(labels, dtype="float32")  # Gluon's losses take float labels
    return Batches(itertools.repeat(batch), {})
