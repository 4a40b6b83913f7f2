"""The MXNet runtime: a rank's device, threads, Gluon model, optimizer, loss and loaders.

MXNet sizes its OpenMP pool once, when its library loads, from ``OMP_NUM_THREADS`` (unset: half the
cores it may use, taking them for hyper-threads). The worker imports this module before it binds
the rank to its cores, so MXNet is loaded only by :meth:`MXNetRuntime.set_threads`, after it has
set that variable to the rank's threads; :meth:`MXNetRuntime.pick_device` loads it earlier only on a
node with NVIDIA GPUs, where the pool then follows the launcher's environment.
"""
from __future__ import annotations

import os
import random
from pathlib import Path

from harness.rank.loaders import LOADERS
from harness.rank.models import MODELS
from harness.rank.runtime import Device, RankRuntime, Sync
from harness.rank.work import NotCounted

NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")


def nvidia_gpus_present(listing: Path = NVIDIA_GPUS) -> bool:
    """Whether the node's NVIDIA driver lists a GPU: asked without loading MXNet."""
    return listing.is_dir() and any(listing.iterdir())


class MXNetRuntime(RankRuntime):
    name = "mxnet"

    def work_counter(self, adapter, device):
        from harness.rank.frameworks.traced import TracedCalls

        if why := adapter.work_not_counted():
            raise NotCounted(why)
        if not isinstance(adapter, TracedCalls):
            raise NotCounted(f"{adapter.name}'s steps are not calls the harness can count")
        from harness.rank.mx_work import MXWorkCounter

        return MXWorkCounter(adapter, device)

    def __init__(self):
        self._fresh_model = None

    def pick_device(self, requested: str, local_rank: int) -> Device:
        if requested == "cpu" or (requested == "auto" and not nvidia_gpus_present()):
            return Device("cpu")
        import mxnet as mx

        gpus = mx.context.num_gpus()
        if requested == "auto" and not gpus:
            return Device("cpu")
        if local_rank >= gpus:
            raise RuntimeError(f"local rank {local_rank} has no GPU: MXNet {mx.__version__} sees {gpus} on this node "
                               f"(a CPU-only build sees none)")
        return Device("cuda", local_rank)

    def set_threads(self, threads: int) -> None:
        os.environ["OMP_NUM_THREADS"] = str(threads)  # also read by the parameter server's processes
        import mxnet  # noqa: F401 - loads the library, which sizes its OpenMP pool now

    def seed(self, seed: int) -> None:
        import mxnet as mx
        import numpy as np

        random.seed(seed)
        np.random.seed(seed)
        mx.random.seed(seed)

    def build(self, adapter, model: str, workload, world_size: int, device, numerics=None):
        import mxnet as mx

        from harness.rank.gluon.training import SmoothedCrossEntropy, hybridized, initialize

        def fresh_model():
            return initialize(MODELS.create_in("mxnet", model, image_size=workload.image_size,
                                               num_classes=workload.num_classes), device)
        self._fresh_model = fresh_model
        # MXNet's SGD: torch's update (weight decay added to the gradient, then momentum) for a fixed rate
        optimizer = mx.optimizer.SGD(learning_rate=workload.base_lr * world_size, momentum=workload.momentum,
                                     wd=workload.weight_decay)
        loss = hybridized(SmoothedCrossEntropy(workload.num_classes, workload.label_smoothing))
        return fresh_model(), optimizer, loss

    def probe(self, model, loss_fn, device):
        """A model built again from the same entry, as the TensorFlow probe clones its Keras model
        (Gluon blocks do not deep-copy): the step's cost does not depend on the weights' values."""
        from harness.rank.gluon.training import GluonProbe, hybridized

        return GluonProbe(hybridized(self._fresh_model()), loss_fn)

    def sync(self, device) -> Sync:
        import mxnet as mx

        return mx.nd.waitall

    def loader(self, name: str, workload, rank, device):
        from harness.rank.gluon.training import OnDevice, context_of

        return OnDevice(LOADERS.create_in("mxnet", name, workload=workload, rank=rank), context_of(device))
