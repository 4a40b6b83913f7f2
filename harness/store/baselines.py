"""Baseline files: ``baselines/<system>.json``, per cell id one entry per machine type. Reading,
validating, choosing the entry of the machine a cell ran on, the reference band of an entry's
metric, and rewriting a file atomically (judging is :mod:`harness.judging.verdicts`'s). Schema:
``baselines/README.md``.

A system's nodes come in several machine types (a cloud's VM types, a cluster's partitions bought
in different years), as asv keeps results per machine: each cell holds a list of entries, at most
one per machine type (:func:`machine_of`), and a cell is judged by the entry of the machine its ranks
ran on, stale only where the file holds none for it. Schema 1 files (one entry per cell) still read.
"""
from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any, Callable, Mapping

from harness.common.filelock import DEFAULT_TIMEOUT_S as DEFAULT_LOCK_TIMEOUT_S
from harness.common.filelock import LockTimeout, locked
from harness.common.jsonio import finite_number, write_json_atomic
from harness.judging.tunables import Tunables
from harness.judging.verdicts import Reference

SCHEMA_VERSION = 2
READABLE_SCHEMAS = (1, 2)
MACHINE_FACTS = ("cpu_id", "isa", "cores", "memory_gib", "gpu", "gpus_per_node")
"""The hardware facts of a fingerprint that name a machine type; the others (ranks, cores per rank,
...) are the cell's layout on it."""
METRICS = {"throughput": "img/s", "efficiency": "", "accuracy": ""}
"""Every metric is higher-is-better; accuracy is the accuracy cells' final validation accuracy (0-1)."""
OPTIONAL_FIELDS = {"config_hash": str, "config": dict, "fingerprint": dict, "breakdown": dict, "yardstick": dict,
                   "provenance": dict, "work": dict}
"""What an entry's other fields must be when present and not null: judging a cell reads them."""


class BaselineError(ValueError):
    pass



def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def _validate(path: Path, data: Any) -> None:
    def bad(why: str) -> BaselineError:
        return BaselineError(f"baseline file {path} is invalid: {why}")

    if not isinstance(data, dict):
        raise bad("the top level must be an object")
    if data.get("schema_version") not in READABLE_SCHEMAS:
        raise bad(f"schema_version must be one of {', '.join(map(str, READABLE_SCHEMAS))}, "
                  f"found {data.get('schema_version')!r}")
    try:
        Tunables.from_json(data.get("tunables"))
    except ValueError as error:
        raise bad(str(error)) from None
    cells = data.get("cells")
    if not isinstance(cells, dict):
        raise bad(f'"cells" must be an object keyed by cell id, found {_json_type(cells)}')
    for cell_id, entries in cells.items():
        if data["schema_version"] == 1:
            entries = [entries]
        elif not isinstance(entries, list) or not entries:
            raise bad(f"cell {cell_id!r} must be a non-empty list of entries, one per machine type, "
                      f"found {_json_type(entries)}")
        machines: dict[str, int] = {}
        for number, entry in enumerate(entries, start=1):
            _validate_entry(entry, cell_id if len(entries) == 1 else f"{cell_id}[{number}]", bad)
            machine = machine_label(entry_machine(entry))
            if machine in machines:
                raise bad(f"cell {cell_id!r} has two entries ({machines[machine]} and {number}) for one "
                          f"machine type ({machine}); keep one")
            machines[machine] = number


def _validate_entry(entry: Any, cell_id: str, bad: Callable[[str], BaselineError]) -> None:
    if not isinstance(entry, dict):
        raise bad(f"cell {cell_id!r} must be an object, found {_json_type(entry)}")
    metrics = [name for name in METRICS if name in entry]
    if not metrics:
        raise bad(f"cell {cell_id!r} has none of the metrics {', '.join(METRICS)}")
    for field, kind in OPTIONAL_FIELDS.items():
        if entry.get(field) is not None and not isinstance(entry[field], kind):
            raise bad(f"cell {cell_id!r} {field}: must be {_json_type(kind())} or null, "
                      f"found {_json_type(entry[field])}")
    for name in metrics:
        reference = entry[name]
        value = reference.get("value") if isinstance(reference, dict) else reference
        if not isinstance(reference, dict) or not finite_number(value) or value <= 0:
            raise bad(f"cell {cell_id!r} {name}: needs an object with a positive numeric \"value\", "
                      f"found {json.dumps(value)}")
        for edge, sign in (("lower", -1), ("upper", 1)):
            edge_value = reference.get(edge)
            if edge_value is not None and (not finite_number(edge_value) or edge_value * sign < 0):
                raise bad(f"cell {cell_id!r} {name}: \"{edge}\" must be a relative bound "
                          f"{'<= 0' if sign < 0 else '>= 0'} or null, found {edge_value!r}")


def machine_of(hardware: Mapping | None) -> dict[str, Any]:
    """The machine type a fingerprint's ``hardware`` names: the facts of :data:`MACHINE_FACTS` it has."""
    return {fact: hardware[fact] for fact in MACHINE_FACTS if (hardware or {}).get(fact) is not None}


def entry_machine(entry: Mapping) -> dict[str, Any]:
    """The machine type a baseline entry was recorded on; empty for an entry without a fingerprint
    (recorded before fingerprints, or written by hand), which stands for any machine."""
    return machine_of((entry.get("fingerprint") or {}).get("hardware"))


def machine_label(machine: Mapping[str, Any]) -> str:
    """A machine type as a reader names it: ``AuthenticAMD family 25 model 17 stepping 1, avx512, 2
    cores, 24 GiB``; ``any machine`` for an entry that names none."""
    if not machine:
        return "any machine"
    parts = [machine.get("cpu_id"), machine.get("isa"),
             f"{machine['cores']} cores" if "cores" in machine else None,
             f"{machine['memory_gib']} GiB" if "memory_gib" in machine else None,
             f"{machine.get('gpus_per_node', '?')} x {machine['gpu']}" if "gpu" in machine else None]
    return ", ".join(str(part) for part in parts if part)


def same_machine(entry_machine: Mapping[str, Any], machine: Mapping[str, Any]) -> bool:
    """Whether an entry's machine type is ``machine``'s: every fact both name agrees (an entry that
    predates a fact, or names none, is not told apart by it)."""
    return all(machine[fact] == value for fact, value in entry_machine.items() if fact in machine)


@dataclasses.dataclass(kw_only=True)
class BaselineFile:
    path: Path
    system: str
    data: dict

    @classmethod
    def load(cls, path: Path, system: str) -> "BaselineFile":
        """Read and validate ``path`` (a schema 1 file read as one entry per cell); a missing file is
        an empty baseline for ``system``."""
        path = Path(path)
        if not path.exists():
            return cls(path=path, system=system, data={"schema_version": SCHEMA_VERSION, "system": system, "cells": {}})
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as error:
            raise BaselineError(f"baseline file {path} is not valid JSON: {error}") from None
        _validate(path, data)
        if data["schema_version"] == 1:
            data = {**data, "schema_version": SCHEMA_VERSION,
                    "cells": {cell_id: [entry] for cell_id, entry in data["cells"].items()}}
        return cls(path=path, system=system, data=data)

    @property
    def tunables(self) -> Tunables:
        """The system's thresholds: the file's ``"tunables"`` over the defaults."""
        return Tunables.from_json(self.data.get("tunables"))

    def entries(self, cell_id: str) -> list[dict]:
        """Every machine type's entry of the cell, in the file's order."""
        return self.data["cells"].get(cell_id, [])

    def machines(self) -> dict[str, int]:
        """Each machine type the file holds entries of (:func:`machine_label`), with how many cells."""
        counts: dict[str, int] = {}
        for entries in self.data["cells"].values():
            for entry in entries:
                label = machine_label(entry_machine(entry))
                counts[label] = counts.get(label, 0) + 1
        return counts

    def entry(self, cell_id: str, hardware: Mapping | None = None) -> Mapping | None:
        """The cell's entry for the machine whose fingerprint ``hardware`` is given: the one
        recorded on that machine type, else the first (the cell is then judged stale, its
        fingerprint naming the difference). Without ``hardware``, the first entry."""
        entries = self.entries(cell_id)
        machine = machine_of(hardware)
        return next((entry for entry in entries if same_machine(entry_machine(entry), machine)),
                    entries[0] if entries else None)

    def reference(self, cell_id: str, metric: str, hardware: Mapping | None = None) -> Reference | None:
        entry = self.entry(cell_id, hardware)
        if entry is None or metric not in entry:
            return None
        raw = entry[metric]
        defaulted = raw.get("lower") is None and raw.get("upper") is None
        band = self._default_band() if defaulted else raw
        repeats = raw.get("repeats")
        return Reference(value=float(raw["value"]), lower=float(band.get("lower") or 0.0), upper=band.get("upper"),
                         unit=raw.get("unit", METRICS[metric]), defaulted=defaulted,
                         repeats=len(repeats) if isinstance(repeats, list) and not defaulted else None)

    def _default_band(self) -> dict[str, float]:
        """The relative band where an entry gives none (a hand-written entry)."""
        half = self.tunables.default_band
        return {"lower": -half, "upper": half}

    def updated(self, results: list[dict]) -> tuple[dict, list[str]]:
        """The file's content with ``results`` written in, and a line per change.

        Each result: ``{"cell": id, "metrics": {name: value}, "config_hash": str, "config": dict,
        "provenance": dict}``, its ``"fingerprint"`` where it has one, and optionally ``"bands":
        {name: {"lower", "upper", "repeats"}}`` derived from repeated runs. A result replaces the
        cell's entry for its machine type (:func:`machine_of` its fingerprint's hardware) and keeps
        the other machines' entries. Without a derived band, the band already in the file (a
        hand-edited one too) is kept: this machine's, else the cell's first entry's.
        """
        data = copy.deepcopy(self.data)
        data["system"] = self.system
        changes = []
        for result in results:
            cell_id = result["cell"]
            entries = data["cells"].setdefault(cell_id, [])
            machine = machine_of((result.get("fingerprint") or {}).get("hardware"))
            mine = next((i for i, entry in enumerate(entries) if same_machine(entry_machine(entry), machine)), None)
            old = entries[mine] if mine is not None else {}
            banded = old or (entries[0] if entries else {})
            new = {key: value for key, value in old.items() if key not in METRICS}
            for metric, value in result["metrics"].items():
                if value is None or not finite_number(value):
                    continue
                band = result.get("bands", {}).get(metric) or {
                    key: banded.get(metric, {}).get(key, default) for key, default in self._default_band().items()}
                new[metric] = {"value": round(value, 4), **band, "unit": METRICS[metric]}
                before = old.get(metric, {}).get("value")
                if before is None:
                    where = f" on {machine_label(machine)}" if entries and mine is None else ""
                    changes.append(f"{cell_id}: {metric} new {value:.4g} {METRICS[metric]}{where}".rstrip())
                else:
                    changes.append(f"{cell_id}: {metric} {before:.4g} -> {value:.4g} ({(value / before - 1):+.1%})")
            new.update(config_hash=result["config_hash"], config=result["config"], provenance=result["provenance"])
            for optional in ("fingerprint", "breakdown", "yardstick", "cpu_wait_share", "work"):
                if result.get(optional) is not None:
                    new[optional] = result[optional]
                else:  # the old one described the old figures
                    new.pop(optional, None)
            if mine is None:
                entries.append(new)
            else:
                entries[mine] = new
        return data, changes

    def update(self, results: list[dict], *, lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S) -> list[str]:
        """Write ``results`` (see :meth:`updated`) into the file as it is on disk now, under the
        file's lock: cells another session recorded since this one read the file are kept."""
        try:
            with locked(self.path, timeout_s=lock_timeout_s):
                current = BaselineFile.load(self.path, self.system)
                data, changes = current.updated(results)
                current.write(data)
        except LockTimeout as error:
            raise BaselineError(f"baselines not written: {error}") from None
        self.data = data
        return changes

    def write(self, data: dict) -> None:
        _validate(self.path, data)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.path, data)
        self.data = data
