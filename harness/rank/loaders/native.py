"""PyTorch's own pipeline: ImageFolder + DataLoader + DistributedSampler, decoding JPEGs on CPU
with the standard ImageNet training transforms."""
from __future__ import annotations

import os

import torch
from PIL import Image
from torch.utils.data import DataLoader, DistributedSampler
from torchvision import datasets, transforms

from harness.rank.loaders.base import Loader
from harness.rank.rankenv import RankInfo
from harness.rank.workload import Workload

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class CorruptImageError(RuntimeError):
    pass


def load_rgb(path: str) -> Image.Image:
    """PIL's errors for a broken file often omit its name; this one names it."""
    try:
        with open(path, "rb") as handle:
            image = Image.open(handle)
            return image.convert("RGB")
    except Exception as error:
        raise CorruptImageError(f"cannot decode image {path}: {error}") from error


def training_transform(image_size: int) -> transforms.Compose:
    return transforms.Compose([
        transforms.RandomResizedCrop(image_size),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD),
    ])


class NativeLoader(Loader):
    def __init__(self, *, workload: Workload, rank: RankInfo, device: torch.device):
        if workload.data_dir is None:
            raise ValueError("the native loader needs a dataset directory (--data)")
        self.device = device
        dataset = datasets.ImageFolder(workload.data_dir, transform=training_transform(workload.image_size),
                                       loader=load_rgb)
        self.sampler = DistributedSampler(dataset, num_replicas=rank.world_size, rank=rank.rank,
                                          shuffle=True, seed=workload.seed, drop_last=True)
        workers = workload.num_workers
        self.loader = DataLoader(
            dataset, batch_size=workload.batch_size, sampler=self.sampler, num_workers=workers,
            pin_memory=device.type == "cuda", drop_last=True, persistent_workers=workers > 0,
        )
        if len(self.loader) == 0:
            raise ValueError(f"dataset {workload.data_dir} has {len(dataset)} images: too few for one batch of "
                             f"{workload.batch_size} per rank on {rank.world_size} ranks")
        self._settings = {"num_workers": workers, "images": len(dataset), "classes": len(dataset.classes)}
        self.last_batch: list[int] = []
        """The dataset's indices of the last batch yielded."""

    def __iter__(self):
        epoch = 0
        while True:
            self.sampler.set_epoch(epoch)
            order = list(self.sampler)  # the order the DataLoader takes this epoch's images in
            for index, (images, labels) in enumerate(self.loader):
                size = self.loader.batch_size
                self.last_batch = order[index * size:(index + 1) * size]
                yield images.to(self.device, non_blocking=True), labels.to(self.device, non_blocking=True)
            epoch += 1

    def batch_data(self) -> dict:
        files = [self.loader.dataset.samples[index][0] for index in self.last_batch]
        return {"data": {"images_decoded": len(files), "bytes_read": sum(os.path.getsize(path) for path in files)}}

    def settings(self) -> dict:
        return dict(self._settings)
