"""Host instructions per step (``--count-instructions``): what each side's launch under callgrind
counted (:mod:`harness.rank.instructions`), compared, and the functions whose counts moved most.

Pure functions on the ranks' records and on ``callgrind_annotate``'s listing; reading a dump file
is :func:`function_counts`'s only input from outside. A count is exact for the paths the rank took,
yet a launch's steps differ by a little (the allocator's and the interpreter's state move on from
step to step): a difference within :data:`SAME_WITHIN`, or within three times the larger of the two
sides' own step-to-step spread, is "the same". The ranks count every thread; each thread kind (the
rank's own, communication, transport, loader, other: :mod:`harness.rank.callgrind_threads`) is
compared too, against its own spread, so that a change that moves only the collectives' threads is
named though the total hardly moves. Two kinds are shown and never judged (:data:`NOT_JUDGED`):
their counts follow timing, not the code.
"""
from __future__ import annotations

import dataclasses
import re
import subprocess
from pathlib import Path
from typing import Mapping, Sequence

from harness.rank.callgrind_threads import KINDS, RANK

SAME_WITHIN = 0.001
"""Relative difference below which two launches' counts are the same: A/As on a 2-core VM differed
by at most 0.02% (docs/measurements.md, "Host instructions")."""

NOT_JUDGED = {
    "transport": "its count follows when the peers' bytes arrive and how long the ranks wait for them",
    "other": "helper threads whose wake-ups follow timing",
}
"""Thread kinds whose counts are shown and never make a change, and why: in A/As of a 2-rank DDP cell a
rank's TCP loop counted 19 thousand to 476 thousand instructions a step, and the interpreter's helper
threads 0 to 726 (docs/measurements.md, "Host instructions on every thread")."""

KIND_SAME_WITHIN = {"communication": 0.05}
"""A thread kind's own floor beside :data:`SAME_WITHIN`: gloo's run loops wait for their peers, and
between launches of the same code their count moved by up to 1.3% for the cell (3.4% for one rank's
step), more than three times a launch's own step-to-step spread (0.24-0.74%) would allow
(docs/measurements.md, "Host instructions on every thread"); a change of the collectives moved it
by 98%."""

TOP_FUNCTIONS = 5
NAME_CHARS = 160
"""A function's name in a line of the summary (C++ templates run to hundreds of characters; the
results file keeps them whole)."""
JIT_CODE = "code generated at run time (oneDNN's JIT kernels: no symbol)"
"""Where callgrind names a function by its bare address in an anonymous mapping: one entry for all
of them, since their addresses move from launch to launch."""

_LINE = re.compile(r"^\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(.+?)(?: \[(.*)\])?$")
_BARE_ADDRESS = re.compile(r"^\?\?\?:0x[0-9a-f]+$")
_THREAD_OF_FILE = re.compile(r"-(\d+)$")


def cell_instructions(records: Sequence[Mapping]) -> dict | None:
    """The cell's instructions per step: the training ranks' counts summed, each rank's, and the
    largest step-to-step spread of a rank; per thread kind where the ranks counted each thread
    (``kinds``: the last step's, summed over the ranks; ``kind_spreads``: the spread of that sum
    between the steps); None where no rank counted any."""
    counted = [record for record in records if (record.get("instructions") or {}).get("per_step")]
    if not counted:
        return None
    spreads = [_spread(record["instructions"]["steps"]) for record in counted]
    cell = {"per_step": sum(record["instructions"]["per_step"] for record in counted),
            "ranks": {str(record["rank"]): record["instructions"]["per_step"] for record in counted},
            "step_spread": max(spreads), "files": {str(record["rank"]): _dump_files(record["instructions"])
                                                   for record in counted}}
    if all(record["instructions"].get("kinds") for record in counted):
        steps_by_kind = _kinds_summed([record["instructions"]["kinds"] for record in counted])
        cell["kind_steps"] = steps_by_kind
        cell["kinds"] = {kind: steps[-1] for kind, steps in steps_by_kind.items()}
        cell["kind_spreads"] = {kind: _spread(steps) for kind, steps in steps_by_kind.items()}
        cell["kind_files"] = {str(record["rank"]): _files_by_kind(record["instructions"]) for record in counted}
    return cell


def _files_by_kind(counted: Mapping) -> dict[str, list[str]]:
    """The last step's dump files by their threads' kind (a file's name ends in its thread's id)."""
    kinds = {thread["thread"]: thread["kind"] for thread in counted.get("threads") or ()}
    files: dict[str, list[str]] = {}
    for name in counted.get("thread_files") or ():
        thread = _THREAD_OF_FILE.search(name)
        if thread and int(thread.group(1)) in kinds:
            files.setdefault(kinds[int(thread.group(1))], []).append(name)
    return files


def _dump_files(counted: Mapping) -> list[str]:
    """The last step's dump files: every thread's, or the one an older rank wrote."""
    return list(counted.get("thread_files") or [counted["files"][-1]])


def _kinds_summed(ranks: Sequence[Mapping[str, Sequence[int]]]) -> dict[str, list[int]]:
    """Each kind's count per step, summed over the ranks."""
    kinds = sorted({kind for rank in ranks for kind in rank}, key=_kind_order)
    return {kind: [sum(step) for step in zip(*(rank.get(kind) or [0] for rank in ranks))] for kind in kinds}


def _kind_order(kind: str) -> tuple[int, str]:
    return (KINDS.index(kind) if kind in KINDS else len(KINDS), kind)


def _spread(steps: Sequence[int]) -> float:
    return (max(steps) - min(steps)) / max(steps) if len(steps) > 1 and max(steps) else 0.0


@dataclasses.dataclass(frozen=True)
class KindChange:
    """One thread kind's count, the reference's against the current one's."""
    kind: str
    reference: int
    current: int
    tolerance: float
    moved: tuple[tuple[str, int, int], ...] = ()
    """The functions of this kind's threads whose counts moved most, where the kind moved."""

    @property
    def judged(self) -> bool:
        return self.kind not in NOT_JUDGED

    @property
    def changed(self) -> bool:
        if not self.judged:
            return False
        if not self.reference:
            return self.current != 0
        return abs(self.current / self.reference - 1) > self.tolerance

    def text(self) -> str:
        counts = f"{self.current:,} against {self.reference:,}"
        if not self.judged:
            return f"{self.kind} {counts} (not judged: {NOT_JUDGED[self.kind]})"
        if not self.changed:
            return f"{self.kind} the same ({counts}, within {self.tolerance:.1%})"
        return f"{self.kind} {_relative(self.reference, self.current)} ({counts})"

    def to_json(self) -> dict:
        return {"kind": self.kind, "reference": self.reference, "current": self.current,
                "tolerance": self.tolerance, "judged": self.judged, "changed": self.changed,
                "moved": [{"function": name, "reference": reference, "current": current}
                          for name, reference, current in self.moved]}


def compare_kinds(reference: Mapping, current: Mapping) -> tuple[KindChange, ...]:
    """Each thread kind either side counted, against its own tolerance: :data:`SAME_WITHIN` (or the
    kind's :data:`KIND_SAME_WITHIN`), or three times the larger of the sides' step-to-step spreads of
    that kind; () where a side did not count
    by kind (an older harness)."""
    if "kinds" not in reference or "kinds" not in current:
        return ()
    kinds = sorted(set(reference["kinds"]) | set(current["kinds"]), key=_kind_order)
    changes = []
    for kind in kinds:
        counts = reference["kinds"].get(kind, 0), current["kinds"].get(kind, 0)
        if not any(counts):
            continue  # no thread of this kind on either side
        spread = max(reference["kind_spreads"].get(kind, 0.0), current["kind_spreads"].get(kind, 0.0))
        changes.append(KindChange(kind, *counts, tolerance=max(KIND_SAME_WITHIN.get(kind, SAME_WITHIN), 3 * spread)))
    return tuple(changes)


@dataclasses.dataclass(frozen=True, kw_only=True)
class InstructionChange:
    reference: int
    current: int
    tolerance: float
    """The relative difference within which the two are the same."""
    moved: tuple[tuple[str, int, int], ...] = ()
    """The functions whose counts moved most: (name, reference's, current's)."""
    kinds: tuple[KindChange, ...] = ()
    """Each thread kind's counts (:func:`compare_kinds`)."""
    judged_threads: bool = False
    """The counts are the judged thread kinds' (those of :data:`NOT_JUDGED` aside)."""

    @property
    def ratio(self) -> float:
        return self.current / self.reference

    @property
    def total_changed(self) -> bool:
        return abs(self.ratio - 1) > self.tolerance

    @property
    def changed(self) -> bool:
        """The total moved beyond its tolerance, or a thread kind beyond its own."""
        return self.total_changed or any(kind.changed for kind in self.kinds)

    def text(self) -> str:
        counts = f"{self.current:,} against {self.reference:,} a step{', judged threads' if self.judged_threads else ''}"
        total = (f"instructions: {self.ratio - 1:+.2%} ({counts})" if self.total_changed else
                 f"instructions: the same ({counts}, within {self.tolerance:.2%})")
        if not self.kinds:
            return total
        return f"{total}; by thread: {', '.join(kind.text() for kind in self.kinds)}"

    def moved_lines(self) -> list[str]:
        """The functions that moved most, then those of each thread kind that moved on its own."""
        return [_moved_line(*moved) for moved in self.moved] + [
            f"in the {kind.kind} threads: {_moved_line(*moved)}" for kind in self.kinds for moved in kind.moved]

    def to_json(self) -> dict:
        return {"reference": self.reference, "current": self.current, "ratio": round(self.ratio, 6),
                "tolerance": self.tolerance, "changed": self.changed, "judged_threads": self.judged_threads,
                "kinds": [kind.to_json() for kind in self.kinds],
                "moved": [{"function": name, "reference": reference, "current": current}
                          for name, reference, current in self.moved]}


def _moved_line(name: str, reference: int, current: int) -> str:
    return f"{current - reference:+,} ({_relative(reference, current)}) {_shortened(name)}"


def _shortened(name: str, most: int = NAME_CHARS) -> str:
    return name if len(name) <= most else f"{name[:most - 3]}..."


def _relative(reference: int, current: int) -> str:
    return f"{current / reference - 1:+.1%}" if reference else "new"


def compare_instructions(reference: Mapping, current: Mapping,
                         functions: tuple[Mapping[str, int], Mapping[str, int]] | None = None,
                         top: int = TOP_FUNCTIONS,
                         kind_functions: Mapping[str, tuple[Mapping[str, int], Mapping[str, int]]] | None = None
                         ) -> InstructionChange:
    """What moved from the reference's count (:func:`cell_instructions`) to the current one's;
    ``functions``: each side's counts by function (:func:`function_counts`), whose largest moves
    are kept where the counts differ; ``kind_functions``: the same of a thread kind's threads,
    kept where that kind moved (the rank thread's dominate the whole's). Where both sides counted by
    thread kind, the totals compared are the judged kinds' (:data:`NOT_JUDGED`'s counts follow timing);
    a side whose ranks counted their own thread only (a harness from before every thread was counted)
    is compared with the other side's rank threads."""
    kinds = compare_kinds(reference, current)
    reference, current = _comparable_totals(reference, current)
    tolerance = max(SAME_WITHIN, 3 * max(reference["step_spread"], current["step_spread"]))
    change = InstructionChange(reference=reference["per_step"], current=current["per_step"], tolerance=tolerance,
                               kinds=kinds, judged_threads="judged_threads" in reference)
    if kind_functions:
        change = dataclasses.replace(change, kinds=tuple(
            dataclasses.replace(kind, moved=most_moved(*kind_functions[kind.kind], top=top))
            if kind.changed and kind.kind in kind_functions else kind for kind in change.kinds))
    if functions is None or not change.changed:
        return change
    return dataclasses.replace(change, moved=most_moved(*functions, top=top))


def _comparable_totals(reference: Mapping, current: Mapping) -> tuple[Mapping, Mapping]:
    if "kind_steps" in reference and "kind_steps" in current:
        return _judged_threads(reference), _judged_threads(current)
    if ("kinds" in reference) == ("kinds" in current):
        return reference, current

    def rank_threads(side: Mapping) -> Mapping:
        if "kinds" not in side:
            return side
        return {"per_step": side["kinds"].get(RANK, 0), "step_spread": side["kind_spreads"].get(RANK, 0.0)}

    return rank_threads(reference), rank_threads(current)


def _judged_threads(side: Mapping) -> Mapping:
    """A side's count of its judged thread kinds, each step's, and their spread."""
    judged = [steps for kind, steps in side["kind_steps"].items() if kind not in NOT_JUDGED]
    steps = [sum(step) for step in zip(*judged)] if judged else [0]
    return {"per_step": steps[-1], "step_spread": _spread(steps), "judged_threads": True}


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


def threads_function_counts(dumps: Sequence[Path]) -> dict[str, int]:
    """Instructions by function over a step's dump files, one a thread, summed."""
    counts: dict[str, int] = {}
    for dump in dumps:
        for name, count in function_counts(dump).items():
            counts[name] = counts.get(name, 0) + count
    return counts
