"""Random tensors made once on the device: measures training without any I/O."""
from __future__ import annotations

import torch

from harness.rank.loaders.base import Loader
from harness.rank.rankenv import RankInfo
from harness.rank.workload import Workload


class SyntheticLoader(Loader):
    def __init__(self, *, workload: Workload, rank: RankInfo, device: torch.device):
        generator = torch.Generator().manual_seed(workload.seed + rank.rank)
        size = (workload.batch_size, 3, workload.image_size, workload.image_size)
        self.images = torch.randn(size, generator=generator).to(device)
        self.labels = torch.randint(0, workload.num_classes, (workload.batch_size,), generator=generator).to(device)

    def __iter__(self):
        while True:
            yield self.images, self.labels
