"""Gluon's own pipeline, as MXNet users feed a Gluon model: ``ImageFolderDataset`` and a
``DataLoader`` of ``num_workers`` worker processes, decoding JPEGs with the ImageNet training
transforms as the torch native loader does (a random crop of 8-100% of the area at 3/4 to 4/3
aspect, resized, a random flip, ImageNet mean and standard deviation), NCHW.

Rank ``r`` of ``n`` reads every ``n``-th image from the ``r``-th (of the largest multiple of ``n``,
as torch's ``DistributedSampler`` with ``drop_last``), reshuffled every epoch from the seed
``seed + rank``; partial batches are dropped. Labels come as float32, as Gluon's losses take them.
Which files a batch read follows from the sampler's order of its epoch (:class:`FolderBatches`).
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from mxnet import gluon
from mxnet.gluon.data.vision import ImageFolderDataset, transforms

from harness.rank.batches import Batches

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def training_transform(image_size: int) -> transforms.Compose:
    return transforms.Compose([
        transforms.RandomResizedCrop(image_size),
        transforms.RandomFlipLeftRight(),
        transforms.ToTensor(),
        transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD),
    ])


class ShardSampler(gluon.data.Sampler):
    """This rank's indices in a new order every epoch."""

    def __init__(self, length: int, rank: int, world_size: int, seed: int):
        self._indices = np.arange(rank, length - length % world_size, world_size)
        self._random = np.random.RandomState(seed)

    order: list[int] = []
    """The current epoch's order (drawn when its epoch starts)."""

    def __iter__(self):
        self.order = self._random.permutation(self._indices).tolist()
        return iter(self.order)

    def __len__(self) -> int:
        return len(self._indices)


class FolderBatches(Batches):
    """The loader's batches, epoch after epoch; :meth:`batch_data` says which files the last one read."""

    def __init__(self, loader: gluon.data.DataLoader, sampler: ShardSampler, files: list[str], batch_size: int,
                 settings: dict):
        super().__init__(self._epochs(loader), settings)
        self.sampler, self.files, self.batch_size = sampler, files, batch_size
        self._last: tuple[list[int], int] | None = None

    def _epochs(self, loader):
        while True:
            for index, (images, labels) in enumerate(loader):
                self._last = (self.sampler.order, index)
                yield images, labels.astype("float32")

    def batch_data(self) -> dict:
        if self._last is None:
            return {"not_counted": {"data": "no batch was taken"}}
        order, index = self._last
        read = [self.files[i] for i in order[index * self.batch_size:(index + 1) * self.batch_size]]
        return {"data": {"images_decoded": len(read), "bytes_read": sum(os.path.getsize(path) for path in read)}}


def FolderLoader(*, workload, rank) -> Batches:  # noqa: N802 - a loader is made by calling its name
    if workload.data_dir is None:
        raise ValueError("the native loader needs a dataset directory (--data)")
    root = Path(workload.data_dir)
    if not root.is_dir():
        raise ValueError(f"dataset directory {root} does not exist")
    folder = ImageFolderDataset(str(root))
    sampler = ShardSampler(len(folder), rank.rank, rank.world_size, workload.seed + rank.rank)
    if len(sampler) < workload.batch_size:
        raise ValueError(f"dataset {root} has {len(folder)} images: too few for one batch of {workload.batch_size} "
                         f"per rank on {rank.world_size} ranks")
    loader = gluon.data.DataLoader(folder.transform_first(training_transform(workload.image_size)),
                                   batch_size=workload.batch_size, sampler=sampler, last_batch="discard",
                                   num_workers=workload.num_workers)
    # closing drops the only reference to the loader: DataLoader.__del__ ends its worker processes
    return FolderBatches(loader, sampler, [path for path, _ in folder.items], workload.batch_size,
                         {"num_workers": workload.num_workers, "images": len(folder), "classes": len(folder.synsets),
                          "reader": "gluon ImageFolderDataset"})
