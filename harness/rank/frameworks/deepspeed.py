"""DeepSpeed's engine, ZeRO stage 0, 1 or 2; the registry's ``deepspeed_zero<N>`` entries preset the
stage. A bf16 or fp16 cell trains with DeepSpeed's own bf16 or fp16 (weights in that dtype, float32
master weights in its optimizer, fp16's dynamic loss scale), not autocast.

DeepSpeed is imported on first use, never at module import.
"""
from __future__ import annotations

import copy
import datetime
import os
from typing import Any, Mapping

import torch

from harness.rank.frameworks.base import LossFn, Trainer
from harness.rank.rankenv import RankInfo

INSTALL_HINT = "DeepSpeed is not installed: run `bash ci/install_frameworks.sh .venv` (installs deepspeed 0.19.8)"

# The worker's loader yields one workload batch per step and optimizer_step() must apply it.
WORKLOAD_KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")


def import_deepspeed(device: torch.device) -> Any:
    # Chosen once, when DeepSpeed is first imported: follow the harness's device rather than
    # DeepSpeed's guess, so that a CPU cell on a GPU node stays on the CPU (gloo).
    os.environ.setdefault("DS_ACCELERATOR", "cuda" if device.type == "cuda" else "cpu")
    try:
        import deepspeed
    except ImportError as error:
        raise ImportError(f"{INSTALL_HINT}; import failed with: {error}") from error
    return deepspeed


def merged(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict:
    """``base`` updated by ``overrides``, nested tables merged key by key."""
    result = copy.deepcopy(dict(base))
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(result.get(key), Mapping):
            result[key] = merged(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result


class DeepSpeedAdapter(Trainer):
    name = "deepspeed"
    keeps_weights_in_dtype = True

    def __init__(self, *, zero_stage: int = 0, config_overrides: Mapping[str, Any] | None = None,
                 timeout_s: int = 300):
        if zero_stage not in (0, 1, 2):
            raise ValueError(f"zero_stage must be 0, 1 or 2 (stage 3 shards parameters: not measured), got {zero_stage}")
        overrides = dict(config_overrides or {})
        clashing = [key for key in WORKLOAD_KEYS if key in overrides]
        if clashing:
            raise ValueError(f"config_overrides may not set {', '.join(clashing)}: the workload's batch size "
                             "is the micro-batch, one per optimizer step")
        self.zero_stage = zero_stage
        self.config_overrides = overrides
        self.timeout_s = timeout_s
        self.batch_size: int | None = None

    def configure(self, *, batch_size: int, workdir=None) -> None:
        self.batch_size = batch_size

    def setup(self, rank: RankInfo, device: torch.device) -> None:
        deepspeed = self.deepspeed = import_deepspeed(device)
        # DeepSpeed reads these, not RankInfo: without all of them init_distributed falls back to
        # MPI discovery, which needs mpi4py and replaces the worker's MASTER_ADDR/PORT by its own.
        os.environ.update(RANK=str(rank.rank), WORLD_SIZE=str(rank.world_size),
                          LOCAL_RANK=str(rank.local_rank), LOCAL_WORLD_SIZE=str(rank.local_world_size))
        deepspeed.init_distributed(
            dist_backend="nccl" if device.type == "cuda" else "gloo", auto_mpi_discovery=False,
            timeout=datetime.timedelta(seconds=self.timeout_s), verbose=False)
        self.dist = deepspeed.comm
        self.device = device

    def config(self) -> dict:
        if self.batch_size is None:
            raise RuntimeError("DeepSpeedAdapter.configure(batch_size=...) must be called before wrap(): "
                               "DeepSpeed's config needs the micro-batch size")
        return merged({
            "train_micro_batch_size_per_gpu": self.batch_size,
            "gradient_accumulation_steps": 1,
            "zero_optimization": {"stage": self.zero_stage},
            "zero_allow_untested_optimizer": True,  # ZeRO 1/2 with the worker's torch SGD
            "gradient_clipping": 0.0,  # DeepSpeed's default clips to norm 1.0; DDP and Horovod do not clip
            "fp16": {"enabled": self.numerics.dtype == "fp16"},
            "bf16": {"enabled": self.numerics.dtype == "bf16"},
            "steps_per_print": 2**31 - 1,  # no progress lines in the cell's output
        }, self.config_overrides)

    def wrap(self, model, optimizer, loss_fn: LossFn) -> None:
        self.written_config = self.config()
        self.engine, _, _, _ = self.deepspeed.initialize(
            model=model, optimizer=optimizer, config=self.written_config, dist_init_required=False)
        self.loss_fn = loss_fn

    def forward_backward(self, images, labels):
        loss = self.loss_fn(self.engine(images), labels)
        self.engine.backward(loss)  # gradients are averaged over ranks (reduced, for ZeRO) before it returns
        return loss.detach()

    def optimizer_step(self) -> None:
        self.engine.step()  # applies the update and clears the gradients (and, for ZeRO, gathers parameters)

    def average(self, tensor):
        tensor = tensor.detach().clone()
        self.dist.all_reduce(tensor)
        return tensor / self.dist.get_world_size()

    def barrier(self) -> None:
        self.dist.barrier()

    def shutdown(self) -> None:
        engine = getattr(self, "engine", None)
        if engine is not None:
            engine.destroy()
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()

    def settings(self) -> dict:
        import deepspeed

        return {
            "version": deepspeed.__version__,
            "zero_stage": self.engine.zero_optimization_stage(),
            "backend": torch.distributed.get_backend(),
            "config": getattr(self, "written_config", None),
        }
