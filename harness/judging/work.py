"""What a cell's counted work says (harness.rank.work counts it per rank and step):

    cell_work(records, servers)    -> one launch's work: its training ranks' counts, summed, and what
                                      its parameter servers counted of them, by server
    launches_work(launches)        -> a cell's work over its launches, naming parts that differed
    compare_work(before, after)    -> WorkChange: what moved, e.g. "+9.1% FLOPs (aten::convolution)"
    against_baseline(stored, work) -> the same against a baseline's work counted with the same packages
    work_reading(change, kind)     -> the A/B's words: the work beside the speed's verdict

What work is, is one list (harness.rank.work.WORK): exact integers, operators, FLOPs, collectives,
memory, data and GPU kernels of one step, which do not depend on the machine's speed, so any
difference between two launches is a difference in what they did. A timed figure (a GPU's kernel
time, harness.rank.work.TIMED_FIGURES) is kept beside the work under ``timed``: compared within
:data:`KERNEL_TIME_TOLERANCE` and said beside a change, never part of it, nor of the digest.
"""
from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
from typing import Mapping, Sequence

from harness.judging.servers import served_work
from harness.rank.work import WORK_PARTS

PARTS = WORK_PARTS
"""The parts of a cell's work, in the order a change names them."""

NOTES = (
    "FLOPs: torch's by its FlopCounterMode (matrix products and convolutions; elementwise operators, batch norm "
    "and the optimizer's update have no formula and count none), split into forward, backward and the optimizer "
    "step by whether autograd's engine ran the operator; TensorFlow's by its registered statistics on the traced "
    "graphs (some elementwise operations count too); MXNet's the forward's convolutions and dense layers only",
    "memory: step_peak_bytes is torch's dispatcher's peak of the storages a step's operators created beyond what "
    "was live before it, on the rank that allocated most (what a framework allocates outside torch's operators is "
    "not seen); allocator_peak_bytes the runtime's allocator's peak over the step (CUDA's, TensorFlow's GPU allocator)",
    "collectives: per tensor, the bytes each rank contributes, summed over the ranks; a parameter server's pushes "
    "and pulls as its workers send them",
)
"""What each count misses, said wherever counts are shown."""

KERNEL_TIME_TOLERANCE = 0.03
"""A GPU's summed kernel time is timed, not counted: a move within this share is the same."""


def cell_work(records: Sequence[Mapping], server_records: Sequence[Mapping] = ()) -> dict | None:
    """One launch's work per step, from its training ranks' records: operators, FLOPs, collectives,
    data and GPU kernels summed over the ranks, memory the largest rank's. A part any rank did not
    count is under ``not_counted`` with its reason, never a partial sum. None where no rank counted
    (an older harness's records). A parameter-server cell's work holds its servers' counts too
    (``servers``, per server: the pushes, pulls or updates of the workers' step), so that a change
    in how the parameters are spread over the servers moves the work with the same totals."""
    works = [record["work"] for record in records if record.get("work")]
    if not works or len(works) != len(records):
        return None
    not_counted: dict[str, str] = {}
    for work in works:
        for part, why in work.get("not_counted", {}).items():
            not_counted.setdefault(part, why)
    counted = [part for part in PARTS if part not in not_counted and all(part in work for work in works)]
    result: dict = {"ranks": len(works)}
    if "operators" in counted:
        result["operators"] = _summed(work["operators"] for work in works)
    if "flops" in counted:
        result["flops"] = {"total": sum(work["flops"]["total"] for work in works),
                           "by_operator": _summed(work["flops"]["by_operator"] for work in works)}
        if all("by_phase" in work["flops"] for work in works):
            result["flops"]["by_phase"] = _summed(work["flops"]["by_phase"] for work in works)
        unsaid = {phase: why for work in works for phase, why in work["flops"].get("phases_not_counted", {}).items()}
        if unsaid:
            result["flops"]["phases_not_counted"] = dict(sorted(unsaid.items()))
    if "collectives" in counted:
        kinds = sorted({kind for work in works for kind in work["collectives"]})
        result["collectives"] = {kind: {field: sum(work["collectives"].get(kind, {}).get(field, 0) for work in works)
                                        for field in ("calls", "bytes")} for kind in kinds}
    if "memory" in counted:  # each peak the ranks give, the largest rank's
        result["memory"] = {key: max(work["memory"][key] for work in works)
                            for key in sorted(set.intersection(*(set(work["memory"]) for work in works)))}
    if "data" in counted:
        result["data"] = _summed(work["data"] for work in works)
    if "gpu" in counted:
        result["gpu"] = {"kernels": sum(work["gpu"]["kernels"] for work in works)}
    timed = [_timed(work) for work in works]
    if all(timed):
        result["timed"] = {name: round(sum(figures.get(name, 0.0) for figures in timed), 6)
                           for name in sorted({name for figures in timed for name in figures})}
    if served := served_counts(server_records):
        result["servers"] = served
    differ = sorted({part for work in works for part in work.get("steps_differ", ())})
    versions = records[0].get("versions")
    return {**result, "not_counted": not_counted, **({"steps_differ": differ} if differ else {}),
            "cost_s": max(work.get("cost_s", 0.0) for work in works), **({"versions": versions} if versions else {})}


def served_counts(server_records: Sequence[Mapping]) -> dict:
    """Each server's counts of the workers' step, by kind, summed over the workers; empty where no
    server counted."""
    by_server = served_work(server_records)["by_server"] if server_records else {}
    return {server: {kind: counts for kind, counts in entry.items() if kind not in ("by_worker", "by_worker_not_counted")}
            for server, entry in by_server.items()}


def _timed(work: Mapping) -> dict:
    """A rank's timed figures; a record of a harness that kept the kernel time inside ``gpu``
    gives it here too."""
    timed = dict(work.get("timed") or {})
    if "kernel_time_s" in (work.get("gpu") or {}):
        timed.setdefault("gpu_kernel_time_s", work["gpu"]["kernel_time_s"])
    return timed


def launches_work(launches: Sequence[Sequence[Mapping]],
                  servers: Sequence[Sequence[Mapping]] | None = None) -> dict | None:
    """A cell's work over its launches (each one's training records, and its server records in
    ``servers``): the first counted launch's, with ``launches_differ`` naming the parts a later
    launch counted otherwise (counts are deterministic: a part that differs says the launches did
    not do the same work)."""
    servers = servers or [()] * len(launches)
    works = [work for work in (cell_work(records, served) for records, served in zip(launches, servers)) if work]
    if not works:
        return None
    first = works[0]
    differ = sorted({moved.part for work in works[1:] for moved in compare_work(first, work).moved})
    return {**first, "launches": len(works), **({"launches_differ": differ} if differ else {})}


def against_baseline(stored: Mapping | None, work: Mapping | None) -> WorkChange | None:
    """What moved from a baseline's work to ``work``, where both were counted with the same
    packages (another torch may count otherwise); None where the baseline holds none."""
    if not stored or not work:
        return None
    if stored.get("versions") != work.get("versions"):
        was, now = stored.get("versions") or {}, work.get("versions") or {}
        moved = ", ".join(f"{name} {was.get(name)} -> {now.get(name)}" for name in sorted(set(was) | set(now))
                          if was.get(name) != now.get(name))
        return WorkChange(uncompared=(f"the baseline's work was counted with other packages ({moved})",))
    return compare_work(stored, work, before_name="the baseline", after_name="this session")


def _summed(counts) -> dict:
    total: collections.Counter = collections.Counter()
    for count in counts:
        total.update(count)
    return dict(sorted(total.items()))


def work_digest(work: Mapping | None) -> str | None:
    """A short hash of the work a launch counted: the counts of :data:`PARTS` and which of them it
    could not count (by name: a reason reworded is the same work). Timed figures, the counting's
    cost and the packages are not work: two launches that did the same work have the same digest."""
    if not work:
        return None
    counted = {part: _count(part, work[part]) if part in work else "not counted" for part in PARTS}
    if work.get("servers"):  # only a parameter-server cell's: every other cell's digest stays as it was
        counted["servers"] = work["servers"]
    return hashlib.sha256(json.dumps(counted, sort_keys=True).encode()).hexdigest()[:16]


def _count(part: str, value):
    """The count of ``part``, without a timed figure an older record kept inside it."""
    if part == "gpu":
        return {"kernels": value["kernels"]}
    return value


def work_headline(work: Mapping | None) -> dict | None:
    """What a history line keeps of a cell's counted work: its digest (:func:`work_digest`), the
    step's FLOPs and the bytes its collectives moved (null where not counted)."""
    if not work:
        return None
    collectives = work.get("collectives")
    return {"digest": work_digest(work), "flops": (work.get("flops") or {}).get("total"),
            "collective_bytes": sum(kind["bytes"] for kind in collectives.values()) if collectives is not None else None}


@dataclasses.dataclass(frozen=True, slots=True)
class Moved:
    """One part of the work that moved between two launches."""
    part: str
    text: str
    """``+9.1% FLOPs (aten::convolution)``, ``all_reduce 5 -> 3 calls``."""
    ratio: float | None = None
    """after / before, where the part has one figure."""


@dataclasses.dataclass(frozen=True, slots=True)
class WorkChange:
    moved: tuple[Moved, ...] = ()
    same: tuple[str, ...] = ()
    """The parts both sides counted, and alike."""
    uncompared: tuple[str, ...] = ()
    """The parts one side or both did not count, each with why."""
    timed: tuple[str, ...] = ()
    """Timed figures that moved beyond their tolerance, said beside the work: never a change of it."""

    @property
    def changed(self) -> bool:
        return bool(self.moved)

    @property
    def comparable(self) -> bool:
        return bool(self.moved or self.same)

    def text(self) -> str:
        return self._work_text() + (f"; timed, beside the work: {', '.join(self.timed)}" if self.timed else "")

    def _work_text(self) -> str:
        if not self.comparable:
            return "work: not compared (" + "; ".join(self.uncompared) + ")" if self.uncompared else \
                "work: not compared"
        if not self.moved:
            return "work: the same" + (f" ({', '.join(self.same)})" if self.same else "")
        said = [moved.text for moved in self.moved]
        said += [f"{part} the same" for part in self.same]
        return "work: " + ", ".join(said)

    def to_json(self) -> dict:
        return {"changed": self.changed, "comparable": self.comparable, "text": self.text(),
                "moved": [dataclasses.asdict(moved) for moved in self.moved], "same": list(self.same),
                "uncompared": list(self.uncompared), "timed": list(self.timed)}

    @classmethod
    def from_json(cls, data: Mapping) -> WorkChange:
        return cls(moved=tuple(Moved(**moved) for moved in data["moved"]),
                   same=tuple(data["same"]), uncompared=tuple(data["uncompared"]), timed=tuple(data.get("timed", ())))


def compare_work(before: Mapping | None, after: Mapping | None, *, before_name: str = "the reference",
                 after_name: str = "the current side") -> WorkChange:
    """What moved from ``before``'s work to ``after``'s (each :func:`cell_work`'s), part by part."""
    if not before or not after:
        missing = [name for name, work in ((before_name, before), (after_name, after)) if not work]
        return WorkChange(uncompared=(f"{' and '.join(missing)} counted no work (a harness without counting, "
                                      "or a launch that failed)",))
    moved: list[Moved] = []
    same: list[str] = []
    uncompared: list[str] = []
    for part in PARTS:
        missing = [(name, work.get("not_counted", {}).get(part)) for name, work in
                   ((before_name, before), (after_name, after)) if part not in work]
        if part == "gpu" and len(missing) == 2:
            continue  # CPU ranks on both sides: no kernels to compare
        if missing:
            uncompared += [f"{part}: {name} did not count it" + (f" ({why})" if why else "") for name, why in missing]
            continue
        found = _MOVES[part](before[part], after[part])
        if found:
            moved += found
        else:
            same.append(part)
    if before.get("servers") and after.get("servers"):
        moved += _servers(before["servers"], after["servers"])
    return WorkChange(moved=tuple(moved), same=tuple(same), uncompared=tuple(uncompared),
                      timed=_timed_moves(_timed(before), _timed(after)))


def _timed_moves(before: Mapping[str, float], after: Mapping[str, float]) -> tuple[str, ...]:
    moved = []
    for name in sorted(set(before) & set(after)):
        was, now = before[name], after[name]
        if was and abs(now / was - 1) > KERNEL_TIME_TOLERANCE:
            moved.append(f"{name.removesuffix('_s').replace('_', ' ')} {_percent(was, now)}")
    return tuple(moved)


def _percent(before: float, after: float) -> str:
    if before == 0:
        return f"{before:g} -> {after:g}"
    return f"{(after / before - 1) * 100:+.1f}%"


def _most_moved(before: Mapping[str, int], after: Mapping[str, int], most: int = 2) -> list[str]:
    """The keys whose values moved most, largest first."""
    keys = set(before) | set(after)
    moves = sorted(((abs(after.get(key, 0) - before.get(key, 0)), key) for key in keys), reverse=True)
    return [key for move, key in moves[:most] if move]


def _flops(before: Mapping, after: Mapping) -> list[Moved]:
    phases_before, phases_after = before.get("by_phase"), after.get("by_phase")
    phases_moved = phases_before is not None and phases_after is not None and phases_before != phases_after
    if before["total"] == after["total"] and before["by_operator"] == after["by_operator"] and not phases_moved:
        return []
    where = ", ".join(_most_moved(before["by_operator"], after["by_operator"]))
    if phases_moved:
        where += "; " + ", ".join(f"{phase} {_percent(phases_before.get(phase, 0), phases_after.get(phase, 0))}"
                                  for phase in ("forward", "backward", "optimizer")
                                  if phases_before.get(phase, 0) != phases_after.get(phase, 0))
    return [Moved("flops", f"{_percent(before['total'], after['total'])} FLOPs ({where.lstrip('; ')})",
                  after["total"] / before["total"] if before["total"] else None)]


def _operators(before: Mapping[str, int], after: Mapping[str, int]) -> list[Moved]:
    if before == after:
        return []
    calls_before, calls_after = sum(before.values()), sum(after.values())
    named = ", ".join(f"{key} {before.get(key, 0)} -> {after.get(key, 0)}" for key in _most_moved(before, after, 3))
    return [Moved("operators", f"operator calls {_percent(calls_before, calls_after)} ({named})",
                  calls_after / calls_before if calls_before else None)]


def _collectives(before: Mapping, after: Mapping) -> list[Moved]:
    moved = []
    for kind in sorted(set(before) | set(after)):
        was, now = before.get(kind, {"calls": 0, "bytes": 0}), after.get(kind, {"calls": 0, "bytes": 0})
        changes = []
        if was["bytes"] != now["bytes"]:
            changes.append(f"bytes {_percent(was['bytes'], now['bytes'])}")
        if was["calls"] != now["calls"]:
            changes.append(f"{was['calls']} -> {now['calls']} calls")
        if changes:
            moved.append(Moved("collectives", f"{kind} {', '.join(changes)}",
                               now["bytes"] / was["bytes"] if was["bytes"] else None))
    return moved


def _servers(before: Mapping, after: Mapping) -> list[Moved]:
    """What moved at each parameter server, where the workers' totals may not have (the parameters
    spread otherwise): e.g. ``push at server 1 bytes +12.0%``."""
    moved = []
    for server in sorted(set(before) | set(after), key=str):
        for found in _collectives(before.get(server, {}), after.get(server, {})):
            kind, _, change = found.text.partition(" ")
            moved.append(Moved("collectives", f"{kind} at server {server} {change}", found.ratio))
    return moved


MEMORY_FIGURES = {"step_peak_bytes": "memory", "allocator_peak_bytes": "allocator peak"}
"""What each memory figure is called in a change: the dispatcher's peak of the step's own storages
(torch), and the runtime's allocator's peak over the step (CUDA's, TensorFlow's GPU allocator)."""


def _memory(before: Mapping, after: Mapping) -> list[Moved]:
    moved = []
    for key in sorted(set(before) | set(after), key=lambda key: (key != "step_peak_bytes", key)):
        was, now, name = before.get(key), after.get(key), MEMORY_FIGURES.get(key, key)
        if was == now:
            continue
        if was is None or now is None:
            moved.append(Moved("memory", f"{name} counted by one side only"))
        else:
            moved.append(Moved("memory", f"{name} {_percent(was, now)}", now / was if was else None))
    return moved


def _data(before: Mapping, after: Mapping) -> list[Moved]:
    moved = [f"{key.replace('_', ' ')} {_percent(before.get(key, 0), after.get(key, 0))}"
             for key in sorted(set(before) | set(after)) if before.get(key) != after.get(key)]
    return [Moved("data", f"data: {', '.join(moved)}")] if moved else []


def _gpu(before: Mapping, after: Mapping) -> list[Moved]:
    if before["kernels"] == after["kernels"]:
        return []
    return [Moved("gpu", f"GPU kernels {before['kernels']} -> {after['kernels']}")]


_MOVES = {"flops": _flops, "operators": _operators, "collectives": _collectives, "memory": _memory,
          "data": _data, "gpu": _gpu}


def work_reading(change: WorkChange, speed: str | None) -> str:
    """The A/B's line on the work, beside the speed's verdict ``speed`` (``regressed``,
    ``improved``, ``same``, ``inconclusive``, or None where it has none)."""
    line = change.text()
    if not change.comparable:
        return line
    if change.changed:
        if speed == "inconclusive":
            return f"{line}: the software does other work, though the speed could not be told apart yet"
        return line
    if speed in ("regressed", "improved"):
        return (f"{line}: the speed moved while the cell does the same work, so the change is in the kernels, "
                "the environment or the machine")
    return line


def baseline_reading(change: WorkChange | None, verdict: str) -> str | None:
    """What a stored verdict's cell says of its work against its baseline's, where that tells the
    software from the system: None where nothing was compared, or the cell passed with the same work."""
    if change is None or not change.comparable:
        return None
    if change.changed:
        return f"the software does other work per step than at the baseline ({change.text()})"
    if verdict in ("pass", "no-baseline"):
        return None
    return ("the same work per step as at the baseline, counted with the same packages: what moved is the node, "
            "the kernels or the environment, not the work the cell does")
