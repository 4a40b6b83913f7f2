"""What every rank of a cell trains with: image size, batch, steps, optimiser and data settings.

It is part of each cell's configuration hash (:meth:`Workload.config_hash`)."""
from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from harness.config.cells import Cell


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Workload:
    """Settings shared by every cell of a run. Part of each cell's configuration hash."""

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
    prefetch: int = 2
    """Batches the DALI pipeline prepares ahead (its ``prefetch_queue_depth``)."""

    def config_hash(self, cell: Cell) -> str:
        """Hash of everything that changes what a cell measures, except the rank count."""
        fields = dataclasses.asdict(self)
        for where in ("data_dir", "tfrecord_dir"):  # where the data lives is not what is measured
            fields.pop(where)
        fields.update(framework=cell.framework, loader=cell.loader, model=cell.model)
        return short_hash(fields)

    def replace(self, **changes: Any) -> "Workload":
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})


def short_hash(fields: Mapping[str, Any]) -> str:
    """The config hash of a workload's fields: 16 hex digits of the SHA-256 of their sorted JSON."""
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]
