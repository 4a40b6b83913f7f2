"""Failures injected into one rank on purpose, for the suite's own failure drills.

A spec's ``"fault": {"rank": 1, "kind": "crash", "at_step": 3}`` makes rank 1 fail at its third
timed step: ``crash`` raises, ``exit`` dies without a word (as a killed process does), ``hang``
stops making progress while its process stays alive.
"""
from __future__ import annotations

import dataclasses
import os
import signal
import time

from .trainloop import ProgressFn

KINDS = ("crash", "exit", "hang")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Fault:
    rank: int
    kind: str
    at_step: int = 1

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; valid kinds: {', '.join(KINDS)}")


class InjectedFault(RuntimeError):
    pass


def with_fault(progress: ProgressFn, fault: Fault | None, rank: int) -> ProgressFn:
    """Wrap the loop's progress callback so that ``fault`` strikes ``rank`` at its timed step."""
    if fault is None or fault.rank != rank:
        return progress

    def strike(phase: str, step: int, of: int) -> None:
        progress(phase, step, of)
        if phase != "timed" or step != fault.at_step:
            return
        if fault.kind == "crash":
            raise InjectedFault(f"injected crash on rank {rank} at timed step {step}")
        if fault.kind == "exit":
            os.kill(os.getpid(), signal.SIGKILL)
        while True:  # hang
            time.sleep(3600)

    return strike
