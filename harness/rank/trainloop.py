"""The shared training loop: warm-up steps, then timed steps, the same for every framework.

Each timed step is timed in three back-to-back parts, each ending where the device has finished
it (:mod:`harness.rank.clocks`): the wait for the batch (``data_wait``), the adapter's
``forward_backward`` (``fwd_bwd``: local compute plus whatever gradient communication it does not
hide) and its ``optimizer_step`` (``optimizer``). Once a step is issued, the rank reads how long its
threads waited for a CPU during the step (``cpu_wait``, :mod:`harness.rank.contention`) and, on cores
it owns, how much of their time work outside its process tree took (``outside_cpu``): on a CPU the
step is over by then, and on a GPU the reads overlap its kernels instead of lengthening the step. A :class:`ComputeProbe` times
forward+backward of a private copy of the model with no communication at all (``compute_probe``),
before and after the timed window; harness.judging.breakdown splits ``fwd_bwd`` into compute and exposed
communication with it. What could set the launch's speed is read over the window
(``launch_facts``, :mod:`harness.rank.launch_facts`). After the window and its probes, the loop
runs :data:`~harness.rank.work.COUNTED_STEPS` more steps, the same lines as the timed ones, under a
:class:`~harness.rank.work.WorkCounter` (``work``, :mod:`harness.rank.work`), or, in a rank under
callgrind, :data:`~harness.rank.instructions.INSTRUCTION_STEPS` steps whose host instructions are
counted (``instructions``, :mod:`harness.rank.instructions`).
"""
from __future__ import annotations

import copy
import time
from typing import TYPE_CHECKING, Callable, Collection, Iterable, Iterator

from harness.rank.clocks import HostClock, StepClock, Sync
from harness.rank.contention import OutsideWork, RunQueueWait
from harness.rank.launch_facts import LaunchFacts
from harness.rank.frameworks.base import LossFn, Trainer
from harness.rank.work import StepCounting, WorkCounter

if TYPE_CHECKING:  # the loop itself runs in every runtime, torch's or not
    import torch

    from harness.rank.instructions import InstructionCounting

ProgressFn = Callable[[str, int, int], None]

PROBE_STEPS = 3
"""Probe steps before and after the timed window (each side)."""


def device_sync(device: torch.device) -> Sync:
    if device.type == "cuda":
        import torch

        return lambda: torch.cuda.synchronize(device)
    return lambda: None


class ComputeProbe:
    """Forward and backward of a private copy of the (unwrapped) model on this rank alone.

    Built from the model before the adapter wraps it, so no framework hook, bucket or collective
    touches it: every framework's compute is measured the same way. The copy is never updated (the
    step's cost does not depend on the weights' values) and is freed by :meth:`close`.
    """

    def __init__(self, model: torch.nn.Module, loss_fn: LossFn):
        self.model: torch.nn.Module | None = copy.deepcopy(model)
        self.loss_fn = loss_fn

    def __call__(self, images: torch.Tensor, labels: torch.Tensor, sync: Sync) -> float:
        assert self.model is not None, "probe used after close()"
        sync()
        started = time.perf_counter()
        loss = self.loss_fn(self.model(images), labels)
        loss.backward()
        sync()  # the probe's kernels have finished
        elapsed = time.perf_counter() - started
        self.model.zero_grad(set_to_none=True)  # as the adapters' optimizer steps leave the gradients
        return elapsed

    def close(self) -> None:
        self.model = None


class GraphProbe:
    """A compute probe for runtimes whose step is a graph built (traced, hybridised) on its first
    call: that call runs untimed, then each call times :meth:`step` between two device syncs."""

    def __init__(self):
        self._built = False

    def step(self, images, labels) -> None:
        """Forward and backward of the probe's own model copy."""
        raise NotImplementedError

    def __call__(self, images, labels, sync: Sync) -> float:
        if not self._built:
            self.step(images, labels)
            self._built = True
        sync()
        started = time.perf_counter()
        self.step(images, labels)
        sync()
        return time.perf_counter() - started

    def close(self) -> None:
        self.model = None


class DelayedBatches:
    """``batches`` with ``seconds`` of sleep before each batch: a data-loading slowdown on purpose,
    for the breakdown's own drills (the sleep lands in ``data_wait`` as a slow loader's would)."""

    def __init__(self, batches: Iterable, seconds: float):
        if seconds < 0:
            raise ValueError(f"a data delay must be >= 0 s, got {seconds}")
        self.batches = batches
        self.seconds = seconds

    def __iter__(self) -> Iterator:
        for batch in self.batches:
            time.sleep(self.seconds)
            yield batch


def run_probes(probe: ComputeProbe, batch, count: int, sync: Sync) -> list[float]:
    images, labels = batch
    return [probe(images, labels, sync) for _ in range(count)]


def train(adapter: Trainer, batches: Iterable, *, warmup_steps: int, steps: int,
          device: torch.device, progress: ProgressFn, probe: ComputeProbe | None = None,
          probe_steps: int = PROBE_STEPS, own_cores: Collection[int] | None = None,
          sync: Sync | None = None, clock: StepClock | None = None, gate: Callable[[], float] | None = None,
          counter: WorkCounter | None = None, batch_data: Callable[[], dict] | None = None,
          instructions: InstructionCounting | None = None) -> dict:
    """Run ``warmup_steps`` untimed then ``steps`` timed training steps; return this rank's samples.

    With a ``probe``, ``probe_steps`` local compute probes run on the last warm-up batch just before
    the timed window and on the last timed batch just after it (outside ``window_s``), so that a
    drift in the machine's speed during the window shows as a spread of the probes. The probes never
    take a batch of their own: every step sees the batches it would see without them.

    ``own_cores``: the cores this rank owns alone (bound to them), whose time taken by work outside
    its process tree is recorded per step. ``sync`` waits for the device (default: torch's);
    ``clock`` times the steps (default: a :class:`HostClock` on ``sync``). ``gate``: where this rank
    waits for another launch before its window (a duet's, :mod:`harness.rank.gate`). ``counter``:
    counts the work of the steps after the window (``work``); ``batch_data`` says what the last
    batch taken took to make (the loader's :meth:`~harness.rank.loaders.base.Loader.batch_data`).
    ``instructions``: counts the host instructions of the steps after the window instead
    (``instructions``, a rank under callgrind: :mod:`harness.rank.instructions`).
    """
    sync = sync or device_sync(device)
    clock = clock or HostClock(sync)
    stream = iter(batches)
    step_times: list[float] = []
    data_waits: list[float] = []
    fwd_bwd: list[float] = []
    optimizer: list[float] = []
    losses: list = []
    probes: list[float] = []
    cpu_waits: list[float] = []
    outside: list[float | None] = []
    outside_work = None
    run_queue = None
    images_seen = 0
    batch = None
    if counter is not None and instructions is not None:
        raise ValueError("a launch counts its steps' work or their instructions, not both (the one would count the other)")
    counting = StepCounting(counter, batch_data) if counter is not None else instructions
    for phase, count in (("warmup", warmup_steps), ("timed", steps), ("counted", counting.steps if counting else 0)):
        if phase == "timed":
            if probe is not None and batch is not None:  # without warm-up, only after the window
                probes += run_probes(probe, batch, probe_steps, sync)
            if gate is not None:
                gate()
            adapter.barrier()  # every rank starts the timed window together
            adapter.window_starts()
            run_queue = RunQueueWait()
            outside_work = OutsideWork(own_cores) if own_cores else None
            facts = LaunchFacts()
            window_epoch = time.time()
            window_start = time.perf_counter()
        if phase == "counted":  # the window is over
            window, launch_facts = time.perf_counter() - window_start, facts.finish()
            if probe is not None and batch is not None:
                probes += run_probes(probe, batch, probe_steps, sync)
        for index in range(count):
            clock.start()
            batch = images, labels = next(stream)
            clock.mark()  # the host-to-device copy belongs to data loading
            if phase == "counted":
                counting.start()  # the very step the timed ones are, counted
            loss = adapter.forward_backward(images, labels)
            clock.mark()  # backward's kernels and the gradient collectives it waits for
            adapter.optimizer_step()
            clock.mark()  # the update's kernels (and, for ZeRO, its parameter gather)
            if phase == "counted":
                counting.stop(images.shape[0])
            if phase == "timed":
                if run_queue is not None:
                    waited = run_queue.read()
                    if waited is None:
                        cpu_waits.clear()  # schedstat went away: record nothing rather than a part
                        run_queue = None
                    else:
                        cpu_waits.append(waited)
                if outside_work is not None:
                    outside.append(outside_work.read())
            data_wait, compute, update = clock.finish()
            if phase == "timed":
                facts.step()
                step_times.append(data_wait + compute + update)
                data_waits.append(data_wait)
                fwd_bwd.append(compute)
                optimizer.append(update)
                losses.append(loss)  # detached by the adapter; read once the window is over
                images_seen += images.shape[0]
            progress(phase, index + 1, count)
    samples = {
        "step_times": step_times,
        "data_wait": data_waits,
        "losses": [float(value) for value in losses],
        "images": images_seen,
        "window_s": window,
        "window_start_epoch": window_epoch,
        "fwd_bwd": fwd_bwd,
        "optimizer": optimizer,
        "launch_facts": launch_facts,
    }
    if len(cpu_waits) == len(step_times):
        samples["cpu_wait"] = cpu_waits
    if outside and None not in outside:
        samples["outside_cpu"] = outside
    if probe is not None:
        probe.close()
        samples["compute_probe"] = probes
    if instructions is not None:
        samples["instructions"] = instructions.result()
    elif counting is not None:
        samples["work"] = counting.work()
    return samples
