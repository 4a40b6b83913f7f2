"""The torch runtime: PyTorch DDP, Horovod and DeepSpeed ranks, torchvision and CIFAR models, and the
synthetic, native and DALI loaders."""
from __future__ import annotations

import torch

from harness.rank.clocks import CudaEventClock, StepClock
from harness.rank.layout import flush_denormals
from harness.rank.loaders import LOADERS
from harness.rank.models import build_model
from harness.rank.numerics import Numerics
from harness.rank.runtime import RankRuntime, Sync
from harness.rank.torch_numerics import as_trained
from harness.rank.torch_work import TorchWorkCounter
from harness.rank.trainloop import ComputeProbe, device_sync
from harness.rank.work import NotCounted


class TorchRuntime(RankRuntime):
    name = "torch"

    def work_counter(self, adapter, device) -> TorchWorkCounter:
        if why := adapter.work_not_counted():
            raise NotCounted(why)
        return TorchWorkCounter(device, adapter.counting_collectives)

    def pick_device(self, requested: str, local_rank: int) -> torch.device:
        if requested == "cpu" or (requested == "auto" and not torch.cuda.is_available()):
            return torch.device("cpu")
        count = torch.cuda.device_count()
        if local_rank >= count:
            raise RuntimeError(f"local rank {local_rank} has no GPU: this node shows {count}")
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)

    def set_threads(self, threads: int) -> None:
        torch.set_num_threads(threads)
        flush_denormals()  # where the launch environment asks (harness.rank.layout)

    def seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def build(self, adapter, model: str, workload, world_size: int, device, numerics: Numerics = Numerics()):
        network = build_model(model, workload.num_classes).to(device)
        network = as_trained(network, numerics, device, keeps_weights_in_dtype=adapter.keeps_weights_in_dtype)
        optimizer = torch.optim.SGD(network.parameters(), lr=workload.base_lr * world_size,
                                    momentum=workload.momentum, weight_decay=workload.weight_decay)
        return network, optimizer, torch.nn.CrossEntropyLoss(label_smoothing=workload.label_smoothing)

    def probe(self, model, loss_fn, device) -> ComputeProbe:
        return ComputeProbe(model, loss_fn)  # copied before any framework hooks the model

    def sync(self, device) -> Sync:
        return device_sync(device)

    def clock(self, device) -> StepClock:
        return CudaEventClock() if device.type == "cuda" else super().clock(device)

    def loader(self, name: str, workload, rank, device):
        return LOADERS.create(name, workload=workload, rank=rank, device=device)
