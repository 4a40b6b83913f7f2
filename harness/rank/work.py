"""Counted work: what a training step did, counted rather than timed, so that a change in the
software shows in one launch whatever the machine's speed (docs/verdicts.md, "Counted work").

After its timed window a rank runs :data:`COUNTED_STEPS` more steps, the same lines of the training
loop as its timed steps, under its runtime's :class:`WorkCounter`: counting never slows a timed
step. The rank's record then holds ``work``, per step: the operators the step ran (calls by name),
their FLOPs, the collectives by kind (calls and bytes), the peak of the memory the step allocated,
the data its batch took to make, and on a GPU the kernels and their device time. What could not be
counted is named under ``not_counted`` with the reason: an absent count never means zero, and a
zero is a count.
"""
from __future__ import annotations

import collections
import dataclasses
import time
from typing import Callable, Mapping

COUNTED_STEPS = 1
"""Steps counted after the timed window. Once the optimizer's state exists a step's operators,
FLOPs, collectives, memory and data are the same integers step after step."""



@dataclasses.dataclass(frozen=True, slots=True)
class Count:
    """One part of what work is: a count of a step, an exact integer or integers."""
    part: str
    what: str
    tells_software: bool
    """With the same packages and workload, a move of this count says the software changed (not
    the node, nor the data)."""
    gpu_only: bool = False


WORK = (
    Count("flops", "FLOPs in total, by operator and by phase (forward, backward, optimizer)", True),
    Count("operators", "operator calls by name", True),
    Count("collectives", "collective calls and the bytes this rank contributes, by kind", True),
    Count("memory", "the step's peak of allocated bytes, named by what gives it", True),
    Count("data", "images in the batch, images decoded and bytes read to make it", False),
    Count("gpu", "GPU kernels launched (which kernels the libraries pick depends on the GPU)", False, gpu_only=True),
)
"""What work is: the one list the rank's record, the work digest, ``--confirm``'s reading
(harness.judging.confirmation.software_by_work) and docs/verdicts.md's table follow, in the order a
change names them. Nothing timed is in it: timed figures are :data:`TIMED_FIGURES`, kept beside."""

WORK_PARTS = tuple(count.part for count in WORK)
SOFTWARE_PARTS = tuple(count.part for count in WORK if count.tells_software)
COUNTED_PARTS = tuple(count.part for count in WORK if not count.gpu_only)
"""What every rank's ``work`` holds or names under ``not_counted``."""

TIMED_FIGURES = {"gpu_kernel_time_s": "the sum of the step's GPU kernels' device time (NCCL's waits for peers in it)"}
"""Figures a counted step times rather than counts: under ``work["timed"]``, shown beside the work,
never part of it (a slower or power-capped GPU moves them with the same work)."""


CPU_RANK_KERNELS = "a CPU rank runs no GPU kernels"


def kernels_not_counted(runtime: str, gpu: bool) -> str:
    """Why a rank's ``gpu`` part is missing where its runtime's profiler is not read."""
    return f"{runtime}'s kernels are not read from its profiler" if gpu else CPU_RANK_KERNELS


class NotCounted(Exception):
    """A count that cannot be had here; its message says why."""


class CollectiveTally:
    """Collective calls and the bytes this rank contributes to them, by kind (``all_reduce``,
    ``broadcast``, ``all_gather``, ``push``, ``pull``...), counted per tensor."""

    def __init__(self):
        self.calls: collections.Counter = collections.Counter()
        self.bytes: collections.Counter = collections.Counter()

    def add(self, kind: str, nbytes: int, calls: int = 1) -> None:
        self.calls[kind] += calls
        self.bytes[kind] += int(nbytes)

    def to_json(self) -> dict:
        return {kind: {"calls": self.calls[kind], "bytes": self.bytes[kind]} for kind in sorted(self.calls)}


class WorkCounter:
    """Counts a runtime's training steps: :meth:`start` before a step, :meth:`stop` after it, which
    returns the record's ``work`` fields it counted, with ``not_counted`` naming the parts it
    could not count."""

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> dict:
        raise NotImplementedError


def uncounted(why: str) -> dict:
    """The ``work`` of a rank that counted none: each part named with ``why``."""
    return {"not_counted": {part: why for part in COUNTED_PARTS}}


class StepCounting:
    """The counted steps of a training loop, each between :meth:`start` (its batch taken) and
    :meth:`stop` (its optimizer step done); ``batch_data`` says what the batch took to make.

    A count that fails is named in :meth:`work` and ends the counting, never the launch: the steps
    go on uncounted and the timed figures stand."""

    steps = COUNTED_STEPS

    def __init__(self, counter: WorkCounter, batch_data: Callable[[], Mapping] | None = None):
        self.counter = counter
        self.batch_data = batch_data
        self.counts: list[dict] = []
        self.cost_s = 0.0
        self.failed: str | None = None
        self.started: float | None = None
        """When the step being counted started (None: none is)."""

    def start(self) -> None:
        if self.failed:
            return
        self.started = time.perf_counter()
        try:
            self.counter.start()
        except Exception as error:  # noqa: BLE001 - a failed count never fails the launch
            self.failed = counting_failure(error)
            self.started = None

    def stop(self, images: int) -> None:
        if self.started is None:
            return
        try:
            work = self.counter.stop()
            data = self.batch_data() if self.batch_data else \
                {"not_counted": {"data": "this loader does not say what it read"}}
        except Exception as error:  # noqa: BLE001
            self.failed = counting_failure(error)
        else:
            self.counts.append({**work, "data": {"images": int(images), **data.get("data", {})},
                                "not_counted": {**work.get("not_counted", {}), **data.get("not_counted", {})}})
        self.cost_s += time.perf_counter() - self.started  # the counted step, as it added to the launch
        self.started = None

    def work(self) -> dict:
        """One step's ``work`` for the rank's record, with what the counted steps added to the
        launch's time (``cost_s``)."""
        counted = uncounted(self.failed) if self.failed else per_step(self.counts)
        return {**counted, "cost_s": round(self.cost_s, 3)}


def counting_failure(error: Exception) -> str:
    return str(error) if isinstance(error, NotCounted) else f"counting failed: {type(error).__name__}: {error}"


def per_step(counts: list[dict]) -> dict:
    """One step's ``work`` from each counted step's: the last step's, with ``steps`` and, where the
    steps did not count alike, ``steps_differ`` naming the parts that differed."""
    if not counts:
        return {}
    last = counts[-1]
    differ = sorted(part for part in WORK_PARTS if part in last
                    and any(earlier.get(part) != last[part] for earlier in counts[:-1]))
    return {**last, "steps": len(counts), **({"steps_differ": differ} if differ else {})}
