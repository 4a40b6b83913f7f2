"""What this machine or allocation offers: its name for baseline files, and how many ranks fit."""
from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess

from harness.machine import allocation


def slurm_cluster_name(env=os.environ) -> str | None:
    if env.get("SLURM_CLUSTER_NAME"):
        return env["SLURM_CLUSTER_NAME"]
    if shutil.which("scontrol") is None:
        return None
    try:
        out = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=10)
    except subprocess.TimeoutExpired:
        return None
    match = re.search(r"^ClusterName\s*=\s*(\S+)", out.stdout, re.MULTILINE)
    return match.group(1) if out.returncode == 0 and match else None


def detect_system(explicit: str | None, partition: str | None = None, env=os.environ) -> str:
    """--system, else $DLSCALE_SYSTEM, else the Slurm cluster's name, else the host name; for the
    last two, ``:<partition>`` as ReFrame names them where a partition is known (``--partition``, or
    the allocation's), since a site's partitions (booster, develop) are machines of their own."""
    name = explicit or env.get("DLSCALE_SYSTEM")
    source = "--system" if explicit else "DLSCALE_SYSTEM" if name else None
    if not name:
        name = slurm_cluster_name(env) or socket.gethostname().split(".")[0]
        if partition := partition or env.get("SLURM_JOB_PARTITION"):
            name = f"{name}:{partition}"
    if not re.fullmatch(r"[A-Za-z0-9_.-]+(:[A-Za-z0-9_.-]+)?", name):
        named = f"{source} {name!r}" if source else f"the detected system name {name!r}"
        raise ValueError(f"{named} is not usable as a file name (letters, digits, '_', '.', '-', and one ':' before "
                         "a partition)" + ("" if source else "; pass --system NAME"))
    return name


def rank_capacity(uses_gpus: bool, env=os.environ) -> tuple[int, str]:
    """How many ranks fit, and in words where that number comes from: the Slurm allocation's tasks,
    GPUs (one rank per GPU) or CPUs inside one, else this machine's GPUs or cores."""
    slurm_allocation = allocation.from_env(env)
    if slurm_allocation is not None:
        return slurm_allocation.capacity(uses_gpus)
    if uses_gpus:
        import torch

        count = torch.cuda.device_count()
        return count, f"this machine has {count} GPU(s)"
    cores = len(os.sched_getaffinity(0))
    return cores, f"this machine offers {cores} CPU core(s) and no GPU"
