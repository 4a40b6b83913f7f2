"""A cell's numerics (:mod:`harness.rank.numerics`) in a torch rank: the math mode, the model as the
cell trains it, and fp16's gradient scaler.

The model is wrapped before the compute probe copies it and before the framework adapter sees it,
so that the probe, DDP, Horovod and DeepSpeed all run the same forward: the batch converted to
channels-last (and, where DeepSpeed keeps the weights in bf16 or fp16, to that dtype), the network
under ``torch.autocast`` for bf16 and fp16, the logits back in float32 for the loss. Backward runs
outside autocast, as torch's AMP recipe has it.
"""
from __future__ import annotations

import torch

from harness.rank.numerics import Numerics

LOW_PRECISION = {"bf16": torch.bfloat16, "fp16": torch.float16}


def set_math_mode(numerics: Numerics) -> None:
    """TF32 on for ``tf32`` and off otherwise (torch leaves cuDNN's on by default), so that ``fp32``
    means float32."""
    tf32 = numerics.dtype == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")


class AsTrained(torch.nn.Module):
    """``module`` fed and run as the cell trains it; its logits in float32."""

    def __init__(self, module: torch.nn.Module, *, autocast: torch.dtype | None, inputs: torch.dtype | None,
                 channels_last: bool):
        super().__init__()
        self.module, self.autocast, self.inputs, self.channels_last = module, autocast, inputs, channels_last

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if self.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        if self.inputs is not None:
            images = images.to(self.inputs)
        if self.autocast is None:
            return self.module(images).float()
        with torch.autocast(images.device.type, dtype=self.autocast):
            return self.module(images).float()


def as_trained(model: torch.nn.Module, numerics: Numerics, device: torch.device, *,
               keeps_weights_in_dtype: bool = False) -> torch.nn.Module:
    """``model`` as a cell in ``numerics`` trains it on ``device``; itself at the default numerics.
    ``keeps_weights_in_dtype``: the framework holds a bf16 or fp16 cell's weights in that dtype
    (DeepSpeed), so they are converted here instead of autocast. Whether the rank's device runs
    the dtype at all, the worker has checked."""
    set_math_mode(numerics)
    low = LOW_PRECISION.get(numerics.dtype)
    if numerics.channels_last:
        model = model.to(memory_format=torch.channels_last)
    if keeps_weights_in_dtype and low is not None:
        model = model.to(low)
    if low is not None or numerics.channels_last:
        model = AsTrained(model, autocast=None if keeps_weights_in_dtype else low,
                          inputs=low if keeps_weights_in_dtype else None, channels_last=numerics.channels_last)
    return torch.compile(model) if numerics.compiled else model


class LossScaling:
    """fp16's gradient scaler (``torch.amp.GradScaler``) for an adapter that steps the optimizer
    itself; at other dtypes, a plain backward and step."""

    def __init__(self, numerics: Numerics, device: torch.device):
        self.scaler = torch.amp.GradScaler(device.type) if numerics.dtype == "fp16" else None

    def backward(self, loss: torch.Tensor) -> None:
        (loss if self.scaler is None else self.scaler.scale(loss)).backward()

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        """The optimizer's step; with the scaler, skipped where a gradient overflowed, and the scale updated."""
        if self.scaler is None:
            optimizer.step()
        else:
            self.scaler.step(optimizer)
            self.scaler.update()

    def settings(self) -> dict:
        return {} if self.scaler is None else {"loss_scale": self.scaler.get_scale()}
