"""The facts of the node a process runs on: its CPU as kernels see it (model, vendor, family,
model number, stepping, the ISA extensions torch and oneDNN dispatch on), cores and memory, and
with GPUs their model and count, CUDA, NCCL and the driver. Each rank reports its own node's
(:mod:`harness.rank.worker`), so that a baseline's fingerprint describes the nodes the job ran on."""
from __future__ import annotations

import functools
import os
import platform
import shutil
from pathlib import Path
from typing import Any

from harness.common.commands import command_output

ISA_EXTENSIONS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8")
"""CPU flags that choose torch's and oneDNN's kernels: a machine without one runs other code."""


@functools.lru_cache(maxsize=2)
def node_facts(gpu: bool) -> dict[str, Any]:
    """This node's hardware, and with ``gpu`` its GPUs and their software, read once per process."""
    facts: dict[str, Any] = {"cpu": cpu_model(), "cores": os.cpu_count(), **cpu_identity(), "memory_gib": memory_gib()}
    if gpu:
        facts.update(_cuda_facts())
    return facts


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def cpu_identity(cpuinfo: str | None = None) -> dict[str, str]:
    """``cpu_id`` (``"AuthenticAMD family 25 model 17 stepping 1"``) and ``isa`` (the
    :data:`ISA_EXTENSIONS` the CPU has, or ``"none of ..."``) from ``/proc/cpuinfo``; empty where
    it cannot be read (not Linux)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return {}
    first = cpuinfo.split("\n\n", 1)[0]
    fields = dict((key.strip(), value.strip()) for key, _, value in
                  (line.partition(":") for line in first.splitlines()) if key.strip())
    identity: dict[str, str] = {}
    numbers = [f"{name} {fields[key]}" for name, key in (("family", "cpu family"), ("model", "model"),
                                                          ("stepping", "stepping")) if key in fields]
    if "vendor_id" in fields or numbers:
        identity["cpu_id"] = " ".join([fields.get("vendor_id", "unknown vendor"), *numbers])
    if "flags" in fields:
        flags = set(fields["flags"].split())
        present = [flag for flag in ISA_EXTENSIONS if flag in flags]
        identity["isa"] = " ".join(present) or f"none of {' '.join(ISA_EXTENSIONS)}"
    return identity


def memory_gib() -> int | None:
    """The node's memory in whole GiB (``MemTotal``); None where it cannot be read."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20)
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cuda_facts() -> dict[str, Any]:
    facts: dict[str, Any] = {}
    try:
        import torch
    except ImportError:
        return facts
    facts["cuda"] = torch.version.cuda
    try:
        nccl = torch.cuda.nccl.version()
        facts["nccl"] = ".".join(str(part) for part in nccl) if isinstance(nccl, tuple) else str(nccl)
    except (AttributeError, RuntimeError):
        pass
    if torch.cuda.is_available():
        facts["gpu"] = torch.cuda.get_device_name(0)
        facts["gpus_per_node"] = torch.cuda.device_count()
    facts["driver"] = _nvidia_driver()
    return facts


def _nvidia_driver() -> str | None:
    if shutil.which("nvidia-smi") is None:
        return None
    text = command_output(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    return text.splitlines()[0].strip() if text else None
