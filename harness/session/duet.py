"""Duet pairs (``--duet``): an A/B's two launches of a pair at once, each on half of the node.

Launches of unchanged code on a shared VM spread widely, and part of that spread is the node's over
time: what the hypervisor and the neighbours do while a launch runs. Two launches back to back see
different moments; two at once on disjoint cores see the same one (Bulej et al., "Duet
benchmarking: improving measurement accuracy in the cloud", ICPE 2020). Each side takes one half of
the node's physical cores (or GPUs), which half is balanced and random over the pairs, and the two
launches' first ranks meet at a gate before their timed windows (:mod:`harness.rank.gate`), so that
the windows start together. A cell fits a duet where it needs at most half the node; halves that
would share a physical core (SMT siblings) are refused, as their two sides would slow each other.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Sequence

from harness.machine.binding import halves as core_halves
from harness.rank.cell import Cell

GATE_OPTIONS = ("core_set", "window_gate")
"""The rank options a duet's launches need their worker to know."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class DuetPlan:
    """The node's two halves: CPU cores for CPU cells, GPU indices for GPU cells."""
    cores: tuple[tuple[int, ...], tuple[int, ...]] | None = None
    gpus: tuple[tuple[int, ...], tuple[int, ...]] | None = None

    @property
    def size(self) -> int:
        """Cores (or GPUs) in each half."""
        return len((self.gpus or self.cores)[0])

    def describe(self) -> str:
        kind, (first, second) = ("GPUs", self.gpus) if self.gpus else ("cores", self.cores)
        return f"{kind} {','.join(map(str, first))} | {','.join(map(str, second))}"

    def environment(self, half: int) -> dict[str, str]:
        """What a side's ranks get in their environment to keep to its half."""
        return {"CUDA_VISIBLE_DEVICES": ",".join(map(str, self.gpus[half]))} if self.gpus else {}

    def core_set(self, half: int) -> tuple[int, ...] | None:
        return self.cores[half] if self.cores else None


def plan(uses_gpus: bool, gpus: int = 0, cpus: Sequence[int] | None = None) -> DuetPlan:
    """The node's halves; ValueError saying why it cannot hold a duet."""
    if uses_gpus:
        if gpus < 2 or gpus % 2:
            raise ValueError(f"--duet needs an even number of GPUs on the node to halve, it has {gpus}")
        return DuetPlan(gpus=(tuple(range(gpus // 2)), tuple(range(gpus // 2, gpus))))
    first, second = core_halves(sorted(cpus if cpus is not None else os.sched_getaffinity(0)))
    return DuetPlan(cores=(tuple(first), tuple(second)))


def does_not_fit(duet: DuetPlan, cell: Cell, processes: int, cores_per_rank: int | None) -> str | None:
    """Why ``cell`` (``processes`` on its node, its servers included) cannot run twice at once on the
    node's halves, or None."""
    needs = processes if duet.gpus else processes * (cores_per_rank or 1)
    if needs > duet.size:
        unit = "GPU(s)" if duet.gpus else "core(s)"
        return (f"{cell.id} needs {needs} {unit} and each half of the node for --duet has {duet.size}: "
                "a duet is for cells that fit in half a node; run it without --duet")
    return None


def worker_lacks(known_options: frozenset[str] | None) -> list[str]:
    """The duet options a side's worker does not know (an older commit's harness): its launches
    would neither keep to their half nor meet the other side."""
    return [] if known_options is None else [name for name in GATE_OPTIONS if name not in known_options]
