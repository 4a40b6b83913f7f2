"""PyTorch DistributedDataParallel: gloo on CPU, NCCL on GPU, one rank per device."""
from __future__ import annotations

import datetime

import torch
import torch.distributed as dist

from harness.rank.frameworks.base import LossFn, Trainer
from harness.rank.rankenv import RankInfo
from harness.rank.torch_numerics import LossScaling


class DDPAdapter(Trainer):
    name = "ddp"

    def __init__(self, *, bucket_cap_mb: int = 25, timeout_s: int = 300):
        self.bucket_cap_mb = bucket_cap_mb
        self.timeout_s = timeout_s

    def setup(self, rank: RankInfo, device: torch.device) -> None:
        self.device = device
        dist.init_process_group(
            backend="nccl" if device.type == "cuda" else "gloo",
            init_method="env://",  # the worker exported MASTER_ADDR/PORT; torchrun's agent store is reused
            rank=rank.rank, world_size=rank.world_size,
            timeout=datetime.timedelta(seconds=self.timeout_s),
        )

    def wrap(self, model, optimizer, loss_fn: LossFn) -> None:
        device_ids = [self.device.index] if self.device.type == "cuda" else None
        self.model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=device_ids, bucket_cap_mb=self.bucket_cap_mb)
        self.optimizer = optimizer
        self.loss_fn = loss_fn
        self.scaling = LossScaling(self.numerics, self.device)

    def forward_backward(self, images, labels):
        loss = self.loss_fn(self.model(images), labels)
        self.scaling.backward(loss)  # DDP's autograd hooks all-reduce the gradient buckets during backward
        return loss.detach()

    def optimizer_step(self) -> None:
        self.scaling.step(self.optimizer)
        self.optimizer.zero_grad(set_to_none=True)

    def average(self, tensor):
        tensor = tensor.detach().clone()
        dist.all_reduce(tensor)
        return tensor / dist.get_world_size()

    def barrier(self) -> None:
        dist.barrier()

    def shutdown(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()

    def settings(self) -> dict:
        return {"backend": dist.get_backend() if dist.is_initialized() else None,
                "bucket_cap_mb": self.bucket_cap_mb, **self.scaling.settings()}
