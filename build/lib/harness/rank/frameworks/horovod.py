"""Horovod: gradients all-reduced by a background thread, MPI or Gloo controller.

The controller follows the launcher: ``mpirun`` and ``srun`` give the MPI controller,
``horovodrun --gloo`` the Gloo one. Horovod is imported on first use, never at module import.
"""
from __future__ import annotations

import os
from typing import Any, Mapping

import torch

from harness.rank.frameworks.base import FrameworkAdapter, LossFn
from harness.rank.rankenv import RankInfo

# Horovod 0.28's values when the environment sets none (horovod/common/operations.cc).
DEFAULT_FUSION_THRESHOLD_BYTES = 128 * 1024 * 1024
DEFAULT_CYCLE_TIME_MS = 1.0
INSTALL_HINT = ("Horovod is not installed: run `bash ci/install_frameworks.sh .venv` "
                "(builds horovod 0.28.1 against the installed torch, then caches the wheel)")


def import_horovod() -> Any:
    try:
        import horovod.torch as hvd
    except ImportError as error:
        raise ImportError(f"{INSTALL_HINT}; import failed with: {error}") from error
    return hvd


def controller_wanted(env: Mapping[str, str]) -> str:
    """The controller this launch needs: horovodrun --gloo leaves a rendezvous address, others need MPI."""
    return "gloo" if "HOROVOD_GLOO_RENDEZVOUS_ADDR" in env else "mpi"


class HorovodAdapter(FrameworkAdapter):
    name = "horovod"

    def __init__(self, *, fusion_threshold_mb: float | None = None, cycle_time_ms: float | None = None):
        """``None`` keeps Horovod's own default (or what the launcher exported)."""
        if fusion_threshold_mb is not None and fusion_threshold_mb < 0:
            raise ValueError(f"fusion_threshold_mb must be >= 0, got {fusion_threshold_mb}")
        if cycle_time_ms is not None and cycle_time_ms <= 0:
            raise ValueError(f"cycle_time_ms must be > 0, got {cycle_time_ms}")
        self.fusion_threshold_mb = fusion_threshold_mb
        self.cycle_time_ms = cycle_time_ms

    def setup(self, rank: RankInfo, device: torch.device) -> None:
        hvd = self.hvd = import_horovod()
        # Horovod reads its tuning knobs from the environment once, in hvd.init().
        if self.fusion_threshold_mb is not None:
            os.environ["HOROVOD_FUSION_THRESHOLD"] = str(int(self.fusion_threshold_mb * 1024 * 1024))
        if self.cycle_time_ms is not None:
            os.environ["HOROVOD_CYCLE_TIME"] = str(self.cycle_time_ms)
        wanted = controller_wanted(os.environ)
        label = {"mpi": "MPI", "gloo": "Gloo"}[wanted]
        built = {"mpi": hvd.mpi_built(), "gloo": hvd.gloo_built()}
        if not built[wanted]:
            raise RuntimeError(
                f"this launch ({rank.source}) needs Horovod's {label} controller but Horovod was built "
                f"without {label}; rebuild it with HOROVOD_WITH_{wanted.upper()}=1 "
                f"(ci/install_frameworks.sh does) or launch with "
                f"{'mpirun or srun' if wanted == 'gloo' else 'horovodrun --gloo'}")
        if wanted == "mpi" and rank.source == "torchrun" and rank.world_size > 1:
            # (a world of one is fine: MPI starts as a singleton)
            raise RuntimeError("Horovod cannot start under torchrun (no MPI and no Gloo rendezvous): "
                               "launch Horovod cells with mpirun, srun or horovodrun")
        hvd.init()
        if (hvd.rank(), hvd.size()) != (rank.rank, rank.world_size):
            raise RuntimeError(
                f"Horovod's {label} controller sees rank {hvd.rank()} of {hvd.size()} but the "
                f"launcher ({rank.source}) started rank {rank.rank} of {rank.world_size}")
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

    def forward_backward(self, images, labels):
        loss = self.loss_fn(self.model(images), labels)
        loss.backward()  # each gradient's all-reduce starts, asynchronously, as soon as it is ready
        self.optimizer.synchronize()  # wait for them: the step's communication ends here, as in DDP
        return loss

    def optimizer_step(self) -> None:
        with self.optimizer.skip_synchronize():  # synchronised at the end of forward_backward
            self.optimizer.step()
        self.optimizer.zero_grad()

    def average(self, tensor):
        return self.hvd.allreduce(tensor.detach(), op=self.hvd.Average, name="dlscale.average")

    def barrier(self) -> None:
        self.hvd.barrier()

    def shutdown(self) -> None:
        if getattr(self, "hvd", None) is not None and self.hvd.is_initialized():
            self.hvd.shutdown()

    def settings(self) -> dict:
        import horovod

        hvd = self.hvd
        env = os.environ  # what hvd.init() read, whether this adapter or the launcher set it
        return {
            "version": horovod.__version__,
            "controller": "mpi" if hvd.mpi_enabled() else "gloo" if hvd.gloo_enabled() else None,
            "built": {"mpi": hvd.mpi_built(), "gloo": hvd.gloo_built(), "nccl": bool(hvd.nccl_built())},
            "fusion_threshold_bytes": int(env.get("HOROVOD_FUSION_THRESHOLD", DEFAULT_FUSION_THRESHOLD_BYTES)),
            "cycle_time_ms": float(env.get("HOROVOD_CYCLE_TIME", DEFAULT_CYCLE_TIME_MS)),
            "autotune": env.get("HOROVOD_AUTOTUNE", "0") not in ("", "0"),
        }
