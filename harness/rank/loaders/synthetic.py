"""Random tensors made once on the device: measures training without any I/O."""
from __future__ import annotations

import torch

from harness.rank.loaders.base import Loader
from harness.rank.rankenv import RankInfo
from harness.rank.synthetic_data import synthetic_batch
from harness.rank.workload import Workload


class SyntheticLoader(Loader):
    def __init__(self, *, workload: Workload, rank: RankInfo, device: torch.device):
        images, labels = synthetic_batch(batch_size=workload.batch_size, image_size=workload.image_size,
                                         num_classes=workload.num_classes, seed=workload.seed + rank.rank)
        self.images = torch.from_numpy(images).to(device)
        self.labels = torch.from_numpy(labels).to(device)

    def __iter__(self):
        while True:
            yield self.images, self.labels

    def batch_data(self) -> dict:
        return {"data": {"images_decoded": 0, "bytes_read": 0}}  # one batch, made before the steps
