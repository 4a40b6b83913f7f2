"""What every rank of a cell trains with: image size, batch, steps, optimiser and data settings.

What of it is part of a cell's configuration hash: :func:`harness.config.cells.config_hash`."""
from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Workload:
    """Settings shared by every cell of a run. The fields a backend's registry entry claims as its
    ``knobs`` (the DALI loaders' threads, the native loader's workers) are read only by that
    backend's cells, and hashed only into their configuration."""

    image_size: int = 224
    batch_size: int = 64
    """Images per rank per step (the study used 64 per GPU)."""
    warmup_steps: int = 10
    """Steps run before timing starts; never counted."""
    steps: int = 50
    """Timed steps."""
    num_workers: int = 4
    """DataLoader worker processes per rank (native loader)."""
    num_classes: int = 1000
    base_lr: float = 0.025
    """Per-rank learning rate; scaled linearly with the rank count, as in the study."""
    momentum: float = 0.9
    weight_decay: float = 1e-4
    label_smoothing: float = 0.1
    seed: int = 1234
    data_dir: str | None = None
    """ImageFolder tree (or, for the DALI loaders, a directory of indexed TFRecord shards) read by
    the file-reading loaders."""
    tfrecord_dir: str | None = None
    """Indexed TFRecord shards read by the ``-tfrecord`` loader variants."""
    data_format: str = "auto"
    """How the DALI loaders read ``data_dir``: "folder" (ImageFolder tree), "tfrecord" (shards with
    DALI index files, see harness.data.tfrecord) or "auto" (whichever the directory holds)."""
    dali_threads: int = 4
    """DALI CPU worker threads per rank (the DALI loaders' counterpart of ``num_workers``)."""
    ps_servers: int = 1
    """Parameter-server cells: how many of a launch's ranks serve (the last ones); the rest train."""
    prefetch: int = 2
    """Batches the DALI pipeline prepares ahead (its ``prefetch_queue_depth``)."""

    def replace(self, **changes: Any) -> "Workload":
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})
