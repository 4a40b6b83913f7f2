"""Horovod: gradients all-reduced by a background thread, MPI or Gloo controller.

The controller follows the launcher: ``mpirun`` and ``srun`` give the MPI controller,
``horovodrun --gloo`` the Gloo one. Horovod is imported on first use, never at module import.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import torch

from harness.rank.frameworks.base import LossFn, Trainer
from harness.rank.frameworks.horovod_common import HorovodKnobs, horovod_settings, import_horovod, init_checked
from harness.rank.rankenv import RankInfo
from harness.rank.torch_numerics import LossScaling

INSTALL = "ci/install_frameworks.sh .venv"

COLLECTIVES = {"_allreduce_async": "all_reduce", "_grouped_allreduce_async": "all_reduce",
               "_allgather_async": "all_gather", "_grouped_allgather_async": "all_gather",
               "_broadcast_async": "broadcast", "_alltoall_async": "all_to_all",
               "_reducescatter_async": "reduce_scatter", "_grouped_reducescatter_async": "reduce_scatter"}
"""The functions of ``horovod.torch.mpi_ops`` every collective of its API ends in, by kind."""


class HorovodAdapter(Trainer):
    name = "horovod"

    def __init__(self, *, fusion_threshold_mb: float | None = None, cycle_time_ms: float | None = None):
        self.knobs = HorovodKnobs(fusion_threshold_mb=fusion_threshold_mb, cycle_time_ms=cycle_time_ms)

    def setup(self, rank: RankInfo, device: torch.device) -> None:
        hvd = self.hvd = import_horovod("horovod.torch", INSTALL)
        self.knobs.export()
        init_checked(hvd, rank, INSTALL)
        if device.type == "cuda":
            torch.cuda.set_device(hvd.local_rank())
        self.device = device

    def wrap(self, model, optimizer, loss_fn: LossFn) -> None:
        hvd = self.hvd
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        # A new optimizer has no state to send, and Horovod would create it by taking one optimizer
        # step with zero gradients, which weight decay turns into a real update: only broadcast
        # state that exists (a resumed optimizer's).
        if optimizer.state:
            hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        self.optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                                  op=hvd.Average)
        self.model = model
        self.loss_fn = loss_fn
        self.scaling = LossScaling(self.numerics, self.device)

    def forward_backward(self, images, labels):
        loss = self.loss_fn(self.model(images), labels)
        self.scaling.backward(loss)  # each gradient's all-reduce starts, asynchronously, as soon as it is ready
        self.optimizer.synchronize()  # wait for them: the step's communication ends here, as in DDP
        return loss.detach()

    def optimizer_step(self) -> None:
        with self.optimizer.skip_synchronize():  # synchronised at the end of forward_backward
            self.scaling.step(self.optimizer)  # fp16: unscaled (the averaged gradients) before the step
        self.optimizer.zero_grad()

    def average(self, tensor):
        return self.hvd.allreduce(tensor.detach(), op=self.hvd.Average, name="dlscale.average")

    @contextlib.contextmanager
    def counting_collectives(self, tally) -> Iterator[None]:
        """Horovod's collectives run on its background thread, out of torch's dispatcher: each is
        counted where its API hands the tensors over, per tensor, before the cycle fuses them (a
        fusion that depends on timing)."""
        from horovod.torch import mpi_ops

        originals = {name: getattr(mpi_ops, name) for name in COLLECTIVES}

        def counted(name: str):
            def collective(tensors, *args, **kwargs):
                for tensor in tensors if isinstance(tensors, (list, tuple)) else [tensors]:
                    tally.add(COLLECTIVES[name], tensor.nbytes)
                return originals[name](tensors, *args, **kwargs)
            return collective

        try:
            for name in COLLECTIVES:
                setattr(mpi_ops, name, counted(name))
            yield
        finally:
            for name, original in originals.items():
                setattr(mpi_ops, name, original)

    def barrier(self) -> None:
        self.hvd.barrier()

    def shutdown(self) -> None:
        if getattr(self, "hvd", None) is not None and self.hvd.is_initialized():
            self.hvd.shutdown()

    def settings(self) -> dict:
        return {**horovod_settings(self.hvd), **self.scaling.settings()}
