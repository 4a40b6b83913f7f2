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

    def close(self) -> None:
        pass
