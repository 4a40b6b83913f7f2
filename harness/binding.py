"""Which CPU cores a rank owns, so that E_G means what the study means.

On a GPU node each rank owns a GPU. On a CPU node each rank of every cell of a session owns the
same number of cores (``--cores-per-rank``), so that 2 ranks bring twice the resources of 1 and the
ideal E_G is 1.0; left to the operating system, a 1-rank cell would take every core and the
2-rank cells share them, making the ideal 0.5.

Launchers that can bind do (srun ``--cpus-per-task``/``--cpu-bind=cores``, mpirun ``--map-by
slot:PE=N --bind-to core``); a rank whose launcher gave it exactly its share keeps it. Otherwise
(torchrun, a Slurm without a task affinity plugin) the rank takes the ``local_rank``-th block of
the cores it is allowed, so that the ranks of one node never share a core.
"""
from __future__ import annotations

import os
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


def bind(local_rank: int, cores_per_rank: int) -> list[int]:
    """Bind every thread of this process to its cores, and size the thread pools to match."""
    cores = cores_for(os.sched_getaffinity(0), local_rank, cores_per_rank)
    for thread in os.listdir("/proc/self/task"):  # sched_setaffinity binds one thread at a time
        try:
            os.sched_setaffinity(int(thread), cores)
        except (ProcessLookupError, PermissionError):
            continue
    for name in THREAD_VARIABLES:
        os.environ[name] = str(cores_per_rank)
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
