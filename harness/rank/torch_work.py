"""Counted work of a torch rank's step (:mod:`harness.rank.work`), at torch's dispatcher.

One dispatch mode sees every ATen operator the step runs, the forward's on this thread and the
backward's on autograd's, and the collectives that go through torch's ``c10d`` operators (DDP's
buckets, DeepSpeed's calls: their sizes do not depend on timing). Beside it torch's own
``FlopCounterMode`` gives the FLOPs. A framework whose collectives bypass the dispatcher counts them
itself (:meth:`harness.rank.frameworks.base.Trainer.counting_collectives`). On a GPU the profiler
counts the kernels and sums their device time. What each count misses: harness.judging.work.NOTES.
"""
from __future__ import annotations

import collections
import contextlib
import weakref
from typing import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import FlopCounterMode

from harness.rank.work import CPU_RANK_KERNELS, CollectiveTally, WorkCounter

COLLECTIVE_KINDS = {
    "allreduce_": "all_reduce", "allreduce_coalesced_": "all_reduce",
    "broadcast_": "broadcast",
    "allgather_": "all_gather", "_allgather_base_": "all_gather", "allgather_coalesced_": "all_gather",
    "allgather_into_tensor_coalesced_": "all_gather",
    "reduce_scatter_": "reduce_scatter", "_reduce_scatter_base_": "reduce_scatter",
    "reduce_scatter_tensor_coalesced_": "reduce_scatter",
    "alltoall_": "all_to_all", "alltoall_base_": "all_to_all",
    "send": "send", "recv_": "recv", "reduce_": "reduce", "gather_": "gather", "scatter_": "scatter",
    "barrier": "barrier",
}
"""torch's ``c10d`` operators by the kind of collective they are."""


def operator_name(func) -> str:
    """``aten::convolution`` for ``aten.convolution.default``: overloads of an operator count as one."""
    return f"{func.namespace}::{func._opname}"


def collective_bytes(func, args, kwargs) -> int:
    """The bytes this rank contributes to a ``c10d`` collective: its input tensors (a barrier's
    placeholder tensor carries no data)."""
    if func._opname == "barrier":
        return 0
    named = dict(zip((argument.name for argument in func._schema.arguments), args)) | dict(kwargs)
    given = next((named[name] for name in ("input_tensors", "input_tensor", "input", "tensors") if name in named), ())
    return sum(tensor.nbytes for tensor in tree_leaves(given) if isinstance(tensor, torch.Tensor))


def current_phase(backward_seen: bool) -> str:
    """The phase of the step an operator runs in: ``backward`` inside autograd's engine, ``forward``
    before it, ``optimizer`` after it (the update, and any wait for gradients after backward)."""
    if torch._C._current_graph_task_id() != -1:
        return "backward"
    return "optimizer" if backward_seen else "forward"


class PhaseSplit:
    """A running total (FlopCounterMode's) split by the phase of the step it grew in: :meth:`see`
    before each operator runs, :meth:`close` after the step."""

    def __init__(self, total: Callable[[], int]):
        self.total = total
        self.phase: str | None = None
        self.backward_seen = False
        self.at_phase_start = 0
        self.by_phase: collections.Counter = collections.Counter()

    def see(self) -> None:
        phase = current_phase(self.backward_seen)
        if phase != self.phase:
            self.close()
            self.phase = phase
            self.backward_seen |= phase == "backward"

    def close(self) -> None:
        now = self.total()
        if self.phase is not None:
            self.by_phase[self.phase] += now - self.at_phase_start
        self.at_phase_start = now

    def to_json(self) -> dict:
        """Forward's and backward's FLOPs (counts, zero included), the optimizer's where its update
        ran an operator with a formula (SGD's and Adam's are elementwise: none, so not said)."""
        split = {"forward": self.by_phase["forward"], "backward": self.by_phase["backward"]}
        return {**split, **({"optimizer": self.by_phase["optimizer"]} if self.by_phase["optimizer"] else {})}


class StepCountingMode(TorchDispatchMode):
    """Operators by name, ``c10d`` collectives into a tally, the phase each operator ran in, and the
    peak of the bytes the step's operators allocated: a storage an operator returns that none of its
    inputs had is new, and counts until it is freed."""

    def __init__(self, tally: CollectiveTally, phases: PhaseSplit | None = None):
        super().__init__()
        self.phases = phases
        self.operators: collections.Counter = collections.Counter()
        self.tally = tally
        self.live: dict[int, int] = {}
        self.live_bytes = 0
        self.peak_bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.phases is not None:
            self.phases.see()  # before the FLOP counter (the next mode down) counts this operator
        self.operators[operator_name(func)] += 1
        if func.namespace == "c10d" and func._opname in COLLECTIVE_KINDS:
            self.tally.add(COLLECTIVE_KINDS[func._opname], collective_bytes(func, args, kwargs))
        out = func(*args, **kwargs)
        given = {tensor.untyped_storage().data_ptr() for tensor in tree_leaves((args, kwargs))
                 if isinstance(tensor, torch.Tensor)}
        for tensor in tree_leaves(out):
            if isinstance(tensor, torch.Tensor):
                self._allocated(tensor.untyped_storage(), given)
        return out

    def _allocated(self, storage, given: set[int]) -> None:
        key = id(storage)
        if key in self.live or storage.data_ptr() in given or storage.nbytes() == 0:
            return
        self.live[key] = storage.nbytes()
        self.live_bytes += storage.nbytes()
        self.peak_bytes = max(self.peak_bytes, self.live_bytes)
        weakref.finalize(storage, self._freed, key)

    def _freed(self, key: int) -> None:
        self.live_bytes -= self.live.pop(key, 0)


class TorchWorkCounter(WorkCounter):
    """Counts a torch rank's step on ``device``; ``collectives`` is the adapter's own count of the
    collectives that bypass torch's dispatcher, or None where they all pass through it."""

    def __init__(self, device: torch.device,
                 collectives: Callable[[CollectiveTally], contextlib.AbstractContextManager] | None = None):
        self.device = device
        self.collectives = collectives

    def start(self) -> None:
        self.tally = CollectiveTally()
        self.flops = FlopCounterMode(display=False)
        self.phases = PhaseSplit(self.flops.get_total_flops)
        self.counting = StepCountingMode(self.tally, self.phases)
        self.kernels = KernelCount(self.device) if self.device.type == "cuda" else None
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        with contextlib.ExitStack() as stack:  # unwound at once where a part cannot start
            for part in (self.kernels, self.collectives(self.tally) if self.collectives else None,
                         self.flops, self.counting):
                if part is not None:
                    stack.enter_context(part)
            self.stack = stack.pop_all()

    def stop(self) -> dict:
        self.stack.close()
        self.phases.close()
        by_operator = {operator_name_of_packet(packet): int(value)
                       for packet, value in self.flops.get_flop_counts().get("Global", {}).items()}
        work = {
            "operators": dict(sorted(self.counting.operators.items())),
            "flops": {"total": int(self.flops.get_total_flops()), "by_operator": dict(sorted(by_operator.items())),
                      "by_phase": self.phases.to_json()},
            "collectives": self.tally.to_json(),
            "memory": {"step_peak_bytes": self.counting.peak_bytes,  # the dispatcher's, named so
                       **({"allocator_peak_bytes": int(torch.cuda.max_memory_allocated(self.device))}
                          if self.device.type == "cuda" else {})},
            "not_counted": {},
        }
        if self.kernels is not None:
            work["gpu"] = {"kernels": self.kernels.kernels}
            work["timed"] = {"gpu_kernel_time_s": self.kernels.kernel_time_s}
        else:
            work["not_counted"]["gpu"] = CPU_RANK_KERNELS
        return work


def operator_name_of_packet(packet) -> str:
    """``aten::convolution`` for FlopCounterMode's key ``aten.convolution``."""
    namespace, _, name = str(packet).partition(".")
    return f"{namespace}::{name}" if name else str(packet)


class KernelCount:
    """The GPU kernels a step launched (a count) and the sum of their device time (timed: kept
    beside the work, :data:`harness.rank.work.TIMED_FIGURES`), by torch's profiler."""

    def __init__(self, device: torch.device):
        self.device = device
        self.kernels = 0
        self.kernel_time_us = 0.0

    def __enter__(self) -> KernelCount:
        from torch.profiler import ProfilerActivity, profile

        torch.cuda.synchronize(self.device)
        self.profile = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
        self.profile.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        torch.cuda.synchronize(self.device)
        self.profile.__exit__(*exc)
        if exc[0] is None:
            self.kernels, self.kernel_time_us = kernel_totals(self.profile.events())

    @property
    def kernel_time_s(self) -> float:
        return round(self.kernel_time_us / 1e6, 6)


def kernel_totals(events) -> tuple[int, float]:
    """The kernels among a profile's ``events`` and their summed device time (microseconds)."""
    from torch.autograd import DeviceType

    kernels = [event for event in events if event.device_type == DeviceType.CUDA]
    return len(kernels), sum(getattr(event, "device_time", 0.0) for event in kernels)
