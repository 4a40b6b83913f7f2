"""The shared training loop: warm-up steps, then timed steps, the same for every framework."""
from __future__ import annotations

import time
from typing import Callable, Iterable

import torch

from .frameworks.base import FrameworkAdapter

ProgressFn = Callable[[str, int, int], None]


def device_sync(device: torch.device) -> Callable[[], None]:
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def train(adapter: FrameworkAdapter, batches: Iterable, *, warmup_steps: int, steps: int,
          device: torch.device, progress: ProgressFn) -> dict:
    """Run ``warmup_steps`` untimed then ``steps`` timed training steps; return this rank's samples.

    Each timed step is split into the wait for the next batch and the training work, both ending
    at a device synchronisation so that asynchronous GPU work is charged to the step it belongs to.
    """
    sync = device_sync(device)
    stream = iter(batches)
    step_times: list[float] = []
    data_waits: list[float] = []
    losses: list[torch.Tensor] = []
    images_seen = 0
    for phase, count in (("warmup", warmup_steps), ("timed", steps)):
        if phase == "timed":
            adapter.barrier()  # every rank starts the timed window together
            window_start = time.perf_counter()
        for index in range(count):
            started = time.perf_counter()
            images, labels = next(stream)
            sync()  # the host-to-device copy belongs to data loading
            fetched = time.perf_counter()
            loss = adapter.forward_backward(images, labels)
            adapter.optimizer_step()
            sync()  # the step's kernels, collectives included, have finished
            finished = time.perf_counter()
            if phase == "timed":
                step_times.append(finished - started)
                data_waits.append(fetched - started)
                losses.append(loss.detach())
                images_seen += images.shape[0]
            progress(phase, index + 1, count)
    window = time.perf_counter() - window_start
    return {
        "step_times": step_times,
        "data_wait": data_waits,
        "losses": [float(value) for value in losses],
        "images": images_seen,
        "window_s": window,
    }
