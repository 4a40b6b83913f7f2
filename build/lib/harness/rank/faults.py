"""Failures and slowdowns injected on purpose, for the suite's own drills and its power self-test.

A spec's ``"fault"`` names one:

- ``{"rank": 1, "kind": "crash", "at_step": 3}``: rank 1 raises at its third timed step;
  ``exit`` dies there without a word (as a killed process does); ``hang`` stops making progress
  while its process stays alive; ``stuck`` hangs and ignores SIGTERM and SIGINT too (a rank in
  uninterruptible I/O or saving a checkpoint), so that only SIGKILL ends it. These need a ``rank``.
- ``{"kind": "slow", "fraction": 0.2}``: every step of every rank (or only of ``rank``, if given)
  takes 20% longer: before fetching its batch, the rank sleeps ``fraction`` times the duration of
  its own previous step, measured without the sleep added to that one.

Where the slowdown happens: the loop calls ``progress`` between steps, outside the timed window,
so a sleep there would never reach the step times. The progress wrapper only measures the steps;
``with_fault_batches`` wraps the batch stream, whose fetch the loop times as part of the step (as
its data wait), and the sleep happens there. The slowdown therefore reaches the measured
throughput exactly as a slower input pipeline would.
"""
from __future__ import annotations

import dataclasses
import os
import signal
import time
from typing import TYPE_CHECKING, Iterable, Iterator

if TYPE_CHECKING:
    from harness.rank.trainloop import ProgressFn

KINDS = ("crash", "exit", "hang", "stuck", "slow")
_NEEDS_RANK = ("crash", "exit", "hang", "stuck")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Fault:
    kind: str
    rank: int | None = None
    """The rank struck; ``None`` (``slow`` only) strikes every rank."""
    at_step: int = 1
    """Timed step at which ``crash``, ``exit`` and ``hang`` strike."""
    fraction: float = 0.0
    """``slow`` only: extra time per step, relative to the step's own duration (0.2: 20% longer)."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; valid kinds: {', '.join(KINDS)}")
        if self.kind in _NEEDS_RANK and self.rank is None:
            raise ValueError(f"a {self.kind!r} fault needs the rank it strikes")
        if self.kind == "slow" and not self.fraction > 0:
            raise ValueError(f"a 'slow' fault needs a positive fraction (0.2: 20% longer steps), got {self.fraction}")
        if self.kind != "slow" and self.fraction:
            raise ValueError(f"fraction applies to 'slow' faults only, not {self.kind!r}")

    def strikes(self, rank: int) -> bool:
        return self.rank is None or self.rank == rank


class InjectedFault(RuntimeError):
    pass


class SlowSteps:
    """Progress wrapper that times each training step; ``batches`` adds the sleeps.

    A step runs from its batch fetch to its progress call. Its own duration is that time less the
    sleep added to it; the next step sleeps ``fraction`` times that duration before fetching, so
    the time added over a run is ``fraction`` times the time its steps took (all but the last).
    The step before the first has nothing to go by and is not slowed.
    """

    def __init__(self, progress: ProgressFn, fraction: float):
        self.progress = progress
        self.fraction = fraction
        self.injected: list[float] = []
        """Every sleep added, in order."""
        self._fetch_started: float | None = None
        self._slept = 0.0
        self._last_duration: float | None = None

    def __call__(self, phase: str, step: int, of: int) -> None:
        if phase in ("warmup", "timed") and self._fetch_started is not None:
            self._last_duration = max(0.0, time.perf_counter() - self._fetch_started - self._slept)
            self._fetch_started = None
        self.progress(phase, step, of)

    def batches(self, batches: Iterable) -> Iterator:
        stream = iter(batches)
        while True:
            self._fetch_started = time.perf_counter()
            self._slept = 0.0
            if self._last_duration is not None:
                self._slept = self.fraction * self._last_duration
                time.sleep(self._slept)
                self.injected.append(self._slept)
            try:
                item = next(stream)
            except StopIteration:
                return
            yield item


def with_fault(progress: ProgressFn, fault: Fault | None, rank: int) -> ProgressFn:
    """Wrap the loop's progress callback so that ``fault`` strikes ``rank``.

    For a ``slow`` fault the wrapper is a :class:`SlowSteps`; pass the batches through
    :func:`with_fault_batches` with it so that the sleeps land inside the timed steps.
    """
    if fault is None or not fault.strikes(rank):
        return progress
    if fault.kind == "slow":
        return SlowSteps(progress, fault.fraction)

    def strike(phase: str, step: int, of: int) -> None:
        progress(phase, step, of)
        if phase != "timed" or step != fault.at_step:
            return
        if fault.kind == "crash":
            raise InjectedFault(f"injected crash on rank {rank} at timed step {step}")
        if fault.kind == "exit":
            os.kill(os.getpid(), signal.SIGKILL)
        if fault.kind == "stuck":
            for deaf_to in (signal.SIGTERM, signal.SIGINT):
                signal.signal(deaf_to, signal.SIG_IGN)
        while True:  # hang
            time.sleep(3600)

    return strike


def with_fault_batches(batches: Iterable, progress: ProgressFn) -> Iterable:
    """The batch stream, slowed when ``progress`` came from :func:`with_fault` for a ``slow`` fault."""
    return progress.batches(batches) if isinstance(progress, SlowSteps) else batches
