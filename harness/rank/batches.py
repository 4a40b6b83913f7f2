"""A loader of a runtime other than torch's, as the training loop takes one: endless (images,
labels) batches, the settings its record keeps, and ``close``."""
from __future__ import annotations

from typing import Iterable


class Batches:
    def __init__(self, batches: Iterable, settings: dict):
        self._batches = batches
        self._settings = settings

    def __iter__(self):
        return iter(self._batches)

    @property
    def source(self) -> Iterable:
        """What yields the batches (a ``tf.data.Dataset``, for a strategy that hands it out itself)."""
        return self._batches

    def settings(self) -> dict:
        return dict(self._settings)

    def close(self) -> None:
        self._batches = None  # the last reference to a pipeline: its threads or worker processes end
