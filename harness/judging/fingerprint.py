"""What a cell's figure was measured with: software stack, hardware and configuration.

A baseline stores the fingerprint of the run that recorded it. A later run on other hardware (the
CPU as its kernels see it: vendor, family, model, stepping and the ISA extensions torch and oneDNN
dispatch on; cores, memory; the GPU model, core, GPU or node count) or with another workload is
judged against a *stale* baseline, and :func:`stale_differences` names what changed. A change of
software on the same hardware (torch, DeepSpeed, Horovod, DALI, MPI, CUDA, NCCL, the driver) is
what a regression suite exists to judge: the figure is judged against the old baseline and
:func:`stack_changes` names the upgrade in the verdict. Host names and dates are kept for the
reader but never make a baseline stale: the same hardware under another name measures the same.
A hardware fact that a baseline predates (recorded before dlscale read it) is unknown there, not a
difference. One stack fact makes a baseline stale too: the huge pages the ranks' heaps were in, as they
measured them (``huge_pages``: ``thp`` or ``pool``, absent for none; :func:`huge_pages_of`), a condition
the session launches its ranks in rather than an upgrade to judge. A baseline recorded before
dlscale set them has none, and reads stale against a run with them.

Versions the ranks ran with and the hardware of their nodes come from their records (``versions``,
:func:`harness.machine.provenance.package_versions`; ``node``, :func:`harness.machine.node.node_facts`:
CPU, cores, memory, GPU, CUDA, NCCL, driver), so they describe the job's nodes rather than the
node the pytest process runs on, which after ``salloc`` may be a login node. The MPI library is
read in the pytest process: it is the ``mpirun`` that launches the job.

Only what the cell uses is part of its stack: what its framework's and loader's registry entries
name (:attr:`harness.common.registry.Entry.stack`: DeepSpeed, Horovod, DALI), MPI when the ranks were
started by Open MPI or the framework talks through it, CUDA, NCCL and the driver when the ranks ran
on GPUs. An upgrade
of a package a cell never loads leaves its baseline valid.
"""
from __future__ import annotations

import functools
import hashlib
import json
import re
import shutil
import sys
from typing import Any, Iterable, Mapping

from harness.common.commands import command_output
from harness.config.cells import config_hash as cell_config_hash
from harness.config.cells import measured_config, numerics_of, scaling_cell
from harness.machine.huge_pages import VARIABLE as TUNABLES_VARIABLE
from harness.machine.huge_pages import mode_of
from harness.machine.node import node_facts
from harness.machine.provenance import version_text
from harness.rank.frameworks import FRAMEWORKS
from harness.rank.loaders import LOADERS

NOT_STALE = frozenset({"hardware.hosts"})
"""Fingerprint fields reported but never making a baseline stale."""
STALE_STACK = {"stack.huge_pages": "with other huge pages"}
"""Stack facts that make a baseline stale, each with how the stale verdict says it: conditions the
session launches the ranks in, not software to judge. Absent from a fingerprint, each reads
:data:`OFF`, so a baseline recorded before the fact existed differs from a run where it is set."""
ABSENT = "(none)"
OFF = "off"


def fingerprint(records: list[dict], workload: Mapping[str, Any], cell_id: str, *,
                config_hash: str | None = None) -> dict:
    """The fingerprint of one measured cell.

    ``records`` are the ranks' records of the run (each with ``host``, ``device``, ``versions``,
    ``threads`` and ``source``); ``workload`` is ``dataclasses.asdict(Workload)``, of which the
    fingerprint keeps what the cell measures (:func:`harness.config.cells.measured_config`). The
    config hash is :func:`harness.config.cells.config_hash` of the cell unless given (an accuracy
    cell has its own).
    Values are strings or ints; a value the ranks disagree on is their distinct values joined by
    ``" / "`` (itself a difference from any baseline where they agreed).
    """
    cell = scaling_cell(cell_id)
    gpu = any(str(r.get("device", "")).startswith("cuda") for r in records)
    nodes = _nodes_facts(records, gpu)
    config = {**measured_config(workload, cell), **(numerics_of(cell) if cell else {})}
    if config_hash is None:
        if cell is None:
            raise ValueError(f"cannot derive the config hash of {cell_id!r}: pass config_hash")
        config_hash = cell_config_hash(workload, cell)

    stack: dict[str, Any] = {}
    versions = [r.get("versions", {}) for r in records]
    for key in ("python", "torch", "torchvision"):
        stack[key] = _agreed(v.get(key) for v in versions)
    backends = [registry.entry(name) for registry, name in ((FRAMEWORKS, cell.framework), (LOADERS, cell.loader))
                if name in registry.names()] if cell else []
    for backend in backends:
        for fact, distribution in backend.stack.items():
            stack[fact] = _agreed(_version(v, distribution) for v in versions)
    if any(backend.uses_mpi for backend in backends) or any(r.get("source") == "openmpi" for r in records):
        stack["mpi"] = mpi_library_version()
        stack["mpi4py"] = _agreed(v.get("mpi4py") for v in versions)
    if gpu:
        for key in ("cuda", "nccl", "driver"):
            stack[key] = nodes.get(key)
    huge_pages = _agreed(huge_pages_of(r) for r in records)
    stack["huge_pages"] = huge_pages if huge_pages != OFF else None

    hosts = sorted({str(r["host"]) for r in records if r.get("host")})
    hardware: dict[str, Any] = {
        "cpu": nodes.get("cpu"),
        "cpu_id": nodes.get("cpu_id"),
        "isa": nodes.get("isa"),
        "memory_gib": nodes.get("memory_gib"),
        "cores": nodes.get("cores"),
        "nodes": len(hosts),
        "hosts": ", ".join(hosts),
        "ranks": len(records),
        "device": _agreed(str(r.get("device", "")).split(":")[0] or None for r in records),
        "threads_per_rank": _agreed(r.get("threads") for r in records),
        "cores_per_rank": _agreed(len(r["cores"]) if r.get("cores") else None for r in records),
        "processes_per_node": _agreed(r.get("local_world_size") for r in records),
    }
    cores = nodes.get("cores")
    if not gpu and isinstance(cores, int) and any((r.get("local_world_size") or 0) > cores for r in records):
        hardware["oversubscribed"] = "more processes than cores on a node: they share them"
    if gpu:
        hardware["gpu"] = nodes.get("gpu")
        hardware["gpus_per_node"] = nodes.get("gpus_per_node")
    return {"stack": _drop_none(stack), "hardware": _drop_none(hardware), "config_hash": config_hash,
            "config": config}


def huge_pages_of(record: Mapping) -> str:
    """The huge pages a rank's heap was in, as the rank measured them at its window's end
    (:mod:`harness.rank.launch_facts`): ``pool`` where memory of the reserved pool was mapped,
    ``thp`` where transparent huge pages back its memory or the kernel gives them to every mapping
    (``always``), else :data:`OFF`. A record without those facts is read by the ``GLIBC_TUNABLES``
    it was launched with (its launch facts' variables, else its launch environment's)."""
    facts = record.get("launch_facts") or {}
    if facts.get("hugetlb_kib") is not None or facts.get("anon_huge_kib") is not None:
        if (facts.get("hugetlb_kib") or 0) > 0:
            return "pool"
        if facts.get("thp") == "always" or (facts.get("anon_huge_kib") or 0) > 0:
            return "thp"
        return OFF
    seen = {**(record.get("launch_environment") or {}), **(facts.get("variables") or {})}
    return mode_of(seen.get(TUNABLES_VARIABLE)) or OFF


def stale_differences(baseline_fp: Mapping | None, current_fp: Mapping) -> list[str]:
    """The differences that make a baseline stale, one line each: the hardware's
    (``"hardware.nodes: 1 -> 2"``) and the stack facts of :data:`STALE_STACK`
    (``"stack.huge_pages: off -> thp"``).

    Empty when the baseline has no fingerprint (recorded before fingerprints existed) or only its
    host names (:data:`NOT_STALE`) or its software (:func:`stack_changes`) differ. A field present
    on one side only shows as ``(none)``, except a hardware fact the baseline predates, which is
    left out, and a fact of :data:`STALE_STACK`, which shows as ``off``. The workload is not
    compared here: :func:`harness.judging.verdicts.config_change` judges it, over the fields the
    cell measures.
    """
    return [line for key, line in _differences(baseline_fp, current_fp)
            if key.startswith("hardware.") or key in STALE_STACK]


def stale_words(differences: list[str]) -> str:
    """What :func:`stale_differences`' lines say the baseline was measured with, e.g. ``on other
    hardware``, ``with other huge pages``, or both joined by ``and``."""
    kinds = ["on other hardware" if any(line.startswith("hardware.") for line in differences) else None,
             *(words for key, words in STALE_STACK.items() if any(line.startswith(f"{key}:") for line in differences))]
    return " and ".join(kind for kind in kinds if kind)


def stack_changes(baseline_fp: Mapping | None, current_fp: Mapping) -> list[str]:
    """The software that changed since the baseline, one item each: ``"torch 2.13.1 -> 2.14.1"``."""
    return [line.removeprefix("stack.").replace(":", "", 1) for key, line in _differences(baseline_fp, current_fp)
            if key.startswith("stack.") and key not in STALE_STACK]


def _differences(baseline_fp: Mapping | None, current_fp: Mapping) -> list[tuple[str, str]]:
    if not baseline_fp:
        return []
    old, new = _flatten(baseline_fp), _flatten(current_fp)
    predates = {key for key in set(new) - set(old) if key.startswith("hardware.")}
    return [(key, f"{key}: {_shown(old, key)} -> {_shown(new, key)}")
            for key in sorted((set(old) | set(new)) - predates)
            if key not in NOT_STALE and _shown(old, key) != _shown(new, key)]


def _shown(fields: Mapping[str, Any], key: str) -> Any:
    """A flattened fingerprint's field as a difference shows it: absent, ``(none)``, or ``off``
    for a fact of :data:`STALE_STACK`."""
    return fields.get(key, OFF if key in STALE_STACK else ABSENT)


def fingerprint_hash(fp: Mapping) -> str:
    """16 hex digits over the fields that make a baseline stale: equal hashes, nothing to re-record."""
    stale_relevant = {key: value for key, value in _flatten(fp).items() if key not in NOT_STALE}
    return hashlib.sha256(json.dumps(stale_relevant, sort_keys=True, default=str).encode()).hexdigest()[:16]


# --- facts of the nodes: the ranks', and the launching node's MPI ------------------------------------

def _nodes_facts(records: list[dict], gpu: bool) -> dict[str, Any]:
    """The hardware the ranks reported of their own nodes (``node`` in their records), agreed over
    them; the launching node's for records that carry none."""
    reported = [r["node"] for r in records if r.get("node")]
    if not reported:
        return node_facts(gpu)
    return {key: _agreed(facts.get(key) for facts in reported) for key in dict.fromkeys(k for f in reported for k in f)}


@functools.lru_cache(maxsize=1)
def mpi_library_version() -> str | None:
    """``"Open MPI 4.1.6"`` from ``mpirun --version``, else mpi4py's ``MPI.Get_library_version()``
    (asked in a child process, so that this one never initialises MPI), else None."""
    mpirun = shutil.which("mpirun")
    if mpirun is not None:
        text = version_text(mpirun)
        if text:
            match = re.search(r"\(Open MPI\)\s+(\S+)", text)
            return f"Open MPI {match.group(1)}" if match else text.splitlines()[0].strip()
    text = command_output([sys.executable, "-c", "import mpi4py; mpi4py.rc.initialize = False; from mpi4py import MPI; "
                                          "print(MPI.Get_library_version().splitlines()[0])"])
    if not text:
        return None
    match = re.search(r"Open MPI v(\S+?),", text)
    return f"Open MPI {match.group(1)}" if match else text.splitlines()[0].strip()


# --- helpers -------------------------------------------------------------------------------------------


def _version(versions: Mapping[str, str], distribution: str) -> str | None:
    """A distribution's version as a rank reported it; for a ``prefix*`` pattern, the first match
    and its name (``"2.4.0 (nvidia-dali-cuda130)"``: the wheel names the CUDA it was built for)."""
    if not distribution.endswith("*"):
        return versions.get(distribution)
    for key in sorted(versions):
        if key.startswith(distribution[:-1]):
            return f"{versions[key]} ({key})"
    return None


def _agreed(values: Iterable[Any]) -> Any:
    distinct = sorted({value for value in values if value is not None}, key=str)
    if not distinct:
        return None
    return distinct[0] if len(distinct) == 1 else " / ".join(str(value) for value in distinct)


def _drop_none(fields: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in fields.items() if value is not None}


def _flatten(fp: Mapping, prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in fp.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, name + "."))
        else:
            flat[name] = value
    return flat
