"""The interface every loader implements: an endless stream of device-ready batches."""
from __future__ import annotations

import abc
from typing import Iterator

import torch


class Loader(abc.ABC):
    @abc.abstractmethod
    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Endless (images, labels) batches on the training device, this rank's shard only."""

    def settings(self) -> dict:
        """Loader settings recorded in each rank's record."""
        return {}

    def batch_data(self) -> dict:
        """What the last batch yielded took to make, for its counted work (:mod:`harness.rank.work`):
        ``{"data": {"images_decoded": n, "bytes_read": b}}``, or ``{"not_counted": {"data": why}}``."""
        return {"not_counted": {"data": f"the {type(self).__name__} does not say what it read"}}

    def close(self) -> None:
        pass
