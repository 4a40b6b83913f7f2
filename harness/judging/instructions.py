"""Host instructions per step (``--count-instructions``): what each side's launch under callgrind
counted (:mod:`harness.rank.instructions`), compared, and the functions whose counts moved most.

Pure functions on the ranks' records and on ``callgrind_annotate``'s listing; reading a dump file
is :func:`function_counts`'s only input from outside. A count is exact for the paths the rank took,
yet a launch's steps differ by a little (the allocator's and the interpreter's state move on from
step to step): a difference within :data:`SAME_WITHIN`, or within three times the larger of the two
sides' own step-to-step spread, is "the same".
"""
from __future__ import annotations

import dataclasses
import re
import subprocess
from pathlib import Path
from typing import Mapping, Sequence

SAME_WITHIN = 0.001
"""Relative difference below which two launches' counts are the same: A/As on a 2-core VM differed
by at most 0.02% (docs/measurements.md, "Host instructions")."""

TOP_FUNCTIONS = 5
NAME_CHARS = 160
"""A function's name in a line of the summary (C++ templates run to hundreds of characters; the
results file keeps them whole)."""
JIT_CODE = "code generated at run time (oneDNN's JIT kernels: no symbol)"
"""Where callgrind names a function by its bare address in an anonymous mapping: one entry for all
of them, since their addresses move from launch to launch."""

_LINE = re.compile(r"^\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(.+?)(?: \[(.*)\])?$")
_BARE_ADDRESS = re.compile(r"^\?\?\?:0x[0-9a-f]+$")


def cell_instructions(records: Sequence[Mapping]) -> dict | None:
    """The cell's instructions per step: the training ranks' counts summed, each rank's, and the
    largest step-to-step spread of a rank; None where no rank counted any."""
    counted = [record for record in records if (record.get("instructions") or {}).get("per_step")]
    if not counted:
        return None
    spreads = [_spread(record["instructions"]["steps"]) for record in counted]
    return {"per_step": sum(record["instructions"]["per_step"] for record in counted),
            "ranks": {str(record["rank"]): record["instructions"]["per_step"] for record in counted},
            "step_spread": max(spreads), "files": {str(record["rank"]): record["instructions"]["files"][-1]
                                                   for record in counted}}


def _spread(steps: Sequence[int]) -> float:
    return (max(steps) - min(steps)) / max(steps) if len(steps) > 1 and max(steps) else 0.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class InstructionChange:
    reference: int
    current: int
    tolerance: float
    """The relative difference within which the two are the same."""
    moved: tuple[tuple[str, int, int], ...] = ()
    """The functions whose counts moved most: (name, reference's, current's)."""

    @property
    def ratio(self) -> float:
        return self.current / self.reference

    @property
    def changed(self) -> bool:
        return abs(self.ratio - 1) > self.tolerance

    def text(self) -> str:
        counts = f"{self.current:,} against {self.reference:,} a step"
        if not self.changed:
            return f"instructions: the same ({counts}, within {self.tolerance:.2%})"
        return f"instructions: {self.ratio - 1:+.2%} ({counts})"

    def moved_lines(self) -> list[str]:
        return [f"{current - reference:+,} ({_relative(reference, current)}) {_shortened(name)}"
                for name, reference, current in self.moved]

    def to_json(self) -> dict:
        return {"reference": self.reference, "current": self.current, "ratio": round(self.ratio, 6),
                "tolerance": self.tolerance, "changed": self.changed,
                "moved": [{"function": name, "reference": reference, "current": current}
                          for name, reference, current in self.moved]}


def _shortened(name: str, most: int = NAME_CHARS) -> str:
    return name if len(name) <= most else f"{name[:most - 3]}..."


def _relative(reference: int, current: int) -> str:
    return f"{current / reference - 1:+.1%}" if reference else "new"


def compare_instructions(reference: Mapping, current: Mapping,
                         functions: tuple[Mapping[str, int], Mapping[str, int]] | None = None,
                         top: int = TOP_FUNCTIONS) -> InstructionChange:
    """What moved from the reference's count (:func:`cell_instructions`) to the current one's;
    ``functions``: each side's counts by function (:func:`function_counts`), whose largest moves
    are kept where the counts differ."""
    tolerance = max(SAME_WITHIN, 3 * max(reference["step_spread"], current["step_spread"]))
    change = InstructionChange(reference=reference["per_step"], current=current["per_step"], tolerance=tolerance)
    if functions is None or not change.changed:
        return change
    return dataclasses.replace(change, moved=most_moved(*functions, top=top))


def most_moved(reference: Mapping[str, int], current: Mapping[str, int], top: int = TOP_FUNCTIONS
               ) -> tuple[tuple[str, int, int], ...]:
    """The ``top`` functions whose counts differ most between the sides, largest difference first."""
    names = set(reference) | set(current)
    moved = sorted(names, key=lambda name: -abs(current.get(name, 0) - reference.get(name, 0)))
    return tuple((name, reference.get(name, 0), current.get(name, 0)) for name in moved[:top]
                 if current.get(name, 0) != reference.get(name, 0))


def annotated_counts(listing: str) -> dict[str, int]:
    """Instructions by function from ``callgrind_annotate --threshold=100``'s listing; code without
    a symbol counted under :data:`JIT_CODE`."""
    counts: dict[str, int] = {}
    in_functions = False
    for line in listing.splitlines():
        if line.strip().endswith("file:function"):
            in_functions = True
            continue
        if not in_functions or not (found := _LINE.match(line)):
            continue
        count, name, _ = found.groups()
        name = JIT_CODE if _BARE_ADDRESS.match(name) else _without_directory(name.removeprefix("???:"))
        counts[name] = counts.get(name, 0) + int(count.replace(",", ""))
    return counts


def _without_directory(name: str) -> str:
    """``ceval.c:_PyEval_EvalFrameDefault`` for ``/tmp/python-build.../Python/ceval.c:_PyEval_EvalFrameDefault``:
    the build's directory differs from one machine's interpreter to another's."""
    where, colon, function = name.partition(":")
    return f"{where.rsplit('/', 1)[-1]}:{function}" if colon and "/" in where and not where.endswith(":") else name


def function_counts(dump: Path) -> dict[str, int]:
    """Instructions by function in a callgrind dump file, as ``callgrind_annotate`` lists them."""
    listing = subprocess.run(["callgrind_annotate", "--threshold=100", "--auto=no", "--show-percs=no", str(dump)],
                             capture_output=True, text=True, check=True).stdout
    return annotated_counts(listing)
