"""Which CPU cores a rank owns, so that E_G means what the study means.

On a GPU node each rank owns a GPU. On a CPU node each rank of every cell of a session owns the
same number of cores (``--cores-per-rank``), so that 2 ranks bring twice the resources of 1 and the
ideal E_G is 1.0; left to the operating system, a 1-rank cell would take every core and the
2-rank cells share them, making the ideal 0.5.

Launchers that can bind do (srun ``--cpus-per-task``/``--cpu-bind=cores``, mpirun ``--map-by
slot:PE=N --bind-to core``); a rank whose launcher gave it exactly its share keeps it. Otherwise
(torchrun, a Slurm without a task affinity plugin) the rank takes the ``local_rank``-th block of
the cores it is allowed, so that the ranks of one node never share a core.

A GPU rank binds to the cores nearest its GPU: those of the GPU's NUMA node (the PCI device's
``local_cpulist`` in sysfs), shared evenly with the node's other ranks whose GPUs hang off the same
cores. Its data loading and launch overheads then never cross the socket link.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
"""Thread pools a rank's libraries (and its DataLoader workers) size from the environment."""


def cores_for(allowed: Sequence[int], local_rank: int, cores_per_rank: int) -> list[int]:
    """The cores a rank owns, out of the ``allowed`` ones it started with."""
    allowed = sorted(allowed)
    if cores_per_rank < 1:
        raise ValueError(f"cores per rank must be at least 1, got {cores_per_rank}")
    if len(allowed) == cores_per_rank:
        return allowed  # the launcher bound it
    start = local_rank * cores_per_rank
    if start + cores_per_rank > len(allowed):
        raise ValueError(f"local rank {local_rank} needs cores {start}-{start + cores_per_rank - 1} of the "
                         f"{len(allowed)} it may use ({_ranges(allowed)}) at {cores_per_rank} core(s) per rank: "
                         f"lower --cores-per-rank or the rank count")
    return allowed[start:start + cores_per_rank]


def bind(local_rank: int, cores_per_rank: int, within: Sequence[int] | None = None) -> list[int]:
    """Bind this CPU rank to its ``cores_per_rank`` cores (:func:`cores_for`), out of ``within``
    where given (a duet's half of the node) rather than the cores it was started with."""
    allowed = sorted(within) if within else os.sched_getaffinity(0)
    if within and len(allowed) == cores_per_rank and local_rank > 0:
        raise ValueError(f"local rank {local_rank} has no cores of its own in {_ranges(allowed)}")
    return pin(cores_for(allowed, local_rank, cores_per_rank))


def physical_cores(cpus: Sequence[int], sysfs: Path = Path("/sys/devices/system/cpu")) -> list[list[int]]:
    """``cpus`` grouped by the physical core they are hardware threads of (SMT siblings, from sysfs's
    ``thread_siblings_list``); a CPU whose siblings are unknown is a core of its own."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for cpu in sorted(cpus):
        try:
            siblings = tuple(parse_cpulist((sysfs / f"cpu{cpu}" / "topology" / "thread_siblings_list").read_text()))
        except (OSError, ValueError):
            siblings = (cpu,)
        groups.setdefault(siblings, []).append(cpu)
    return list(groups.values())


def halves(cpus: Sequence[int], sysfs: Path = Path("/sys/devices/system/cpu")) -> tuple[list[int], list[int]]:
    """The node's ``cpus`` in two halves of whole physical cores, the lower half first; ValueError
    where they cannot be split so (an odd number of cores, or SMT siblings that would land in both)."""
    cores = physical_cores(cpus, sysfs)
    if len(cores) < 2 or len(cores) % 2:
        shared = [group for group in cores if len(group) > 1]
        raise ValueError(f"the {len(cpus)} CPU(s) {_ranges(sorted(cpus))} are {len(cores)} physical core(s)"
                         + (f" (hardware threads {', '.join(_ranges(group) for group in shared)} share one)"
                            if shared else "")
                         + ": they cannot be split into two halves that share no physical core")
    middle = len(cores) // 2
    return (sorted(cpu for group in cores[:middle] for cpu in group),
            sorted(cpu for group in cores[middle:] for cpu in group))


def cores_near_gpu(allowed: Sequence[int], gpu_cores: Sequence[Sequence[int] | None], local_rank: int) -> list[int] | None:
    """The cores of the rank that drives GPU ``local_rank``: the cores local to that GPU
    (``gpu_cores[i]``: GPU ``i``'s, ``None`` where unknown) that it may use, split evenly among the
    ranks whose GPUs are local to the same cores; a rank its launcher bound to part of them keeps
    that part. ``None`` where they are unknown, none of them is allowed, or there are fewer of them
    than ranks sharing them (then the rank is left as started)."""
    mine = gpu_cores[local_rank]
    if mine is None:
        return None
    usable = sorted(set(mine) & set(allowed))
    if len(usable) == len(set(allowed)) < len(set(mine)):
        return usable  # its launcher already bound it to part of its GPU's cores
    sharing = [index for index, cores in enumerate(gpu_cores) if cores is not None and sorted(cores) == sorted(mine)]
    per_rank = len(usable) // len(sharing)
    if per_rank == 0:
        return None
    start = sharing.index(local_rank) * per_rank
    return usable[start:start + per_rank]


def gpu_local_cores(domain: int, bus: int, device: int, sysfs: Path = Path("/sys/bus/pci/devices")) -> list[int] | None:
    """The cores local to the PCI device ``domain:bus:device.0`` (its ``local_cpulist``), or ``None``."""
    try:
        return parse_cpulist((sysfs / f"{domain:04x}:{bus:02x}:{device:02x}.0" / "local_cpulist").read_text())
    except (OSError, ValueError):
        return None


def bind_near_gpu(local_rank: int, local_world_size: int) -> list[int] | None:
    """Bind this GPU rank to the cores nearest its GPU (``cuda:local_rank``), where sysfs says which."""
    import torch

    gpus = [torch.cuda.get_device_properties(index) for index in range(min(local_world_size, torch.cuda.device_count()))]
    gpu_cores = [gpu_local_cores(gpu.pci_domain_id, gpu.pci_bus_id, gpu.pci_device_id) for gpu in gpus]
    if local_rank >= len(gpu_cores):
        return None
    cores = cores_near_gpu(sorted(os.sched_getaffinity(0)), gpu_cores, local_rank)
    return pin(cores) if cores else None


def pin(cores: Sequence[int]) -> list[int]:
    """Bind every thread of this process to ``cores``, and size the thread pools to match."""
    cores = list(cores)
    for thread in os.listdir("/proc/self/task"):  # sched_setaffinity binds one thread at a time
        try:
            os.sched_setaffinity(int(thread), cores)
        except (ProcessLookupError, PermissionError):
            continue
    for name in THREAD_VARIABLES:
        os.environ[name] = str(len(cores))
    return cores


def parse_cpulist(text: str) -> list[int]:
    """``"0-2,5"`` -> ``[0, 1, 2, 5]``, as /proc and sysfs write CPU lists."""
    cores: list[int] = []
    for part in text.strip().split(","):
        if part:
            first, _, last = part.partition("-")
            cores += range(int(first), int(last or first) + 1)
    return cores


def _ranges(cores: Sequence[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2,5"``, as /proc and taskset write CPU lists."""
    parts, start = [], None
    for index, core in enumerate(cores):
        if start is None:
            start = core
        if index + 1 == len(cores) or cores[index + 1] != core + 1:
            parts.append(str(start) if start == core else f"{start}-{core}")
            start = None
    return ",".join(parts)
