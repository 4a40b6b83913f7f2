"""The Slurm allocation a session runs in, and the launch environment a site sets for every cell.

Inside ``salloc`` or ``sbatch`` the ``SLURM_*`` variables say how many nodes, tasks and GPUs the
allocation holds. :func:`from_env` reads them into an :class:`Allocation`, which answers how many
ranks a cell may have (:meth:`Allocation.capacity`) and how ``srun`` lays a cell's ranks out as a
job step (:func:`srun_step_options`): one rank per GPU, bound by its local rank.

The launch environment holds network settings that differ between sites and never belong in code:
``NCCL_SOCKET_IFNAME``, ``GLOO_SOCKET_IFNAME``, ``NCCL_IB_HCA``, a ``MASTER_ADDR`` that names the
fast interface, ... :func:`launch_environment` reads them from an env file (``--launch-env-file``
or ``$DLSCALE_ENV_FILE``) and ``--launch-env KEY=VALUE`` options, the latter winning.

Everything here is a pure function of an environment mapping, so tests use fake ones.
"""
from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path
from typing import Iterable, Mapping

GPU_OVERRIDE = "DLSCALE_GPUS_PER_NODE"
"""Site override for the GPUs per node, for Slurm set-ups whose variables do not say."""
ENV_FILE_VARIABLE = "DLSCALE_ENV_FILE"
RESERVED = frozenset({"DLSCALE_RUN_TOKEN", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                      "PYTHONPATH"})
"""Variables the harness sets per cell or per rank; a launch environment may not override them."""
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def expand_counts(value: str) -> list[int]:
    """Slurm's compressed per-node counts: ``"2(x3),1"`` -> ``[2, 2, 2, 1]``."""
    counts = []
    for part in filter(None, value.split(",")):
        match = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if not match:
            raise ValueError(f"not a Slurm per-node count list: {value!r}")
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts


def count_gres(value: str) -> int:
    """GPUs in a ``[type:]count`` list as ``--gpus-per-node`` takes it: ``"a100:2,v100:1"`` -> 3, ``"4"`` -> 4."""
    total = 0
    for part in filter(None, value.split(",")):
        count = part.rsplit(":", 1)[-1]
        if not count.isdigit():
            raise ValueError(f"not a GPU count list: {value!r}")
        total += int(count)
    return total


def slurm_version(text: str) -> tuple[int, ...]:
    """``srun --version`` output (``"slurm-wlm 22.05.8"``, ``"slurm 23.11.4"``) -> ``(22, 5, 8)``."""
    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not match:
        raise ValueError(f"no Slurm version in {text!r}")
    return tuple(int(part) for part in match.groups() if part is not None)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Allocation:
    job_id: str
    nodes: int
    nodelist: str | None
    tasks: int | None
    """``SLURM_NTASKS``: set only when the job asked for a task count (``-n``, ``--ntasks-per-node``)."""
    tasks_per_node: int | None
    """``SLURM_NTASKS_PER_NODE``: set only when the job asked for it."""
    cpus_per_node: tuple[int, ...]
    """CPUs of each node, from ``SLURM_JOB_CPUS_PER_NODE``; empty when not set."""
    gpus_per_node: int
    """0 when the allocation holds no GPU."""
    gpu_source: str
    """Which variable the GPU count came from, in words for skip reasons."""

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.nodes

    @property
    def ranks_per_node(self) -> int:
        """Ranks a GPU cell may put on one node: one per GPU, fewer if the job fixed fewer tasks per node."""
        return min(self.gpus_per_node, self.tasks_per_node or self.gpus_per_node)

    def capacity(self, uses_gpus: bool) -> tuple[int, str]:
        """How many ranks a cell may have here, and in words where that number comes from."""
        where = f"the Slurm allocation {self.job_id} ({self.nodes} node(s)"
        if uses_gpus:
            if self.gpus_per_node == 0:
                return 0, (f"{where}) holds no GPU ({self.gpu_source}); ask for GPUs (--gpus-per-node) or run "
                           f"with --rank-device cpu; set {GPU_OVERRIDE} if it does hold GPUs")
            capacity = self.nodes * self.ranks_per_node
            words = f"{where}, {self.gpus_per_node} GPU(s) per node from {self.gpu_source}"
            if self.ranks_per_node < self.gpus_per_node:
                words += f", {self.tasks_per_node} task(s) per node"
            if self.tasks is not None and self.tasks < capacity:
                capacity, words = self.tasks, words + f", {self.tasks} task(s)"
            return capacity, f"{words}) offers {capacity} rank(s), one per GPU"
        if self.tasks is not None:
            return self.tasks, f"{where}) holds {self.tasks} task(s)"
        if self.cpus_per_node:
            cpus = sum(self.cpus_per_node)
            return cpus, f"{where}) holds {cpus} CPU(s) and no task count"
        return self.nodes, f"{where}) gives no task or CPU count: one rank per node"


def _gpus_per_node(env: Mapping[str, str], nodes: int, tasks_per_node: int | None) -> tuple[int, str]:
    """GPUs on each node of the allocation: the first variable that says, in the order they are most
    direct (this node's count, this job's GPU ids, then what the job asked for)."""
    if env.get(GPU_OVERRIDE):
        return int(env[GPU_OVERRIDE]), f"{GPU_OVERRIDE}={env[GPU_OVERRIDE]}"
    if env.get("SLURM_GPUS_ON_NODE"):
        return int(env["SLURM_GPUS_ON_NODE"]), f"SLURM_GPUS_ON_NODE={env['SLURM_GPUS_ON_NODE']}"
    for name in ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS"):
        if env.get(name):  # global GPU ids of this node: "0,1,2,3"
            return len([i for i in env[name].split(",") if i.strip()]), f"{name}={env[name]}"
    if env.get("SLURM_GPUS_PER_NODE"):
        return count_gres(env["SLURM_GPUS_PER_NODE"]), f"SLURM_GPUS_PER_NODE={env['SLURM_GPUS_PER_NODE']}"
    if env.get("SLURM_GPUS"):  # the job's total; spread over its nodes
        return count_gres(env["SLURM_GPUS"]) // max(1, nodes), f"SLURM_GPUS={env['SLURM_GPUS']} over {nodes} node(s)"
    if env.get("SLURM_GPUS_PER_TASK") and tasks_per_node:
        per_task = count_gres(env["SLURM_GPUS_PER_TASK"])
        return per_task * tasks_per_node, f"SLURM_GPUS_PER_TASK={env['SLURM_GPUS_PER_TASK']}"
    if env.get("CUDA_VISIBLE_DEVICES") and env["CUDA_VISIBLE_DEVICES"] not in ("-1", "NoDevFiles"):
        ids = [i for i in env["CUDA_VISIBLE_DEVICES"].split(",") if i.strip()]
        return len(ids), f"CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']}"
    return 0, "none of SLURM_GPUS_ON_NODE, SLURM_JOB_GPUS, SLURM_GPUS_PER_NODE, SLURM_GPUS is set"


def from_env(env: Mapping[str, str]) -> Allocation | None:
    """The allocation this process runs in, or None outside ``salloc``/``sbatch``."""
    job_id = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    if not job_id:
        return None
    nodes = int(env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES") or 1)
    tasks = env.get("SLURM_NTASKS") or env.get("SLURM_NPROCS")
    per_node = env.get("SLURM_NTASKS_PER_NODE")
    cpus = expand_counts(env["SLURM_JOB_CPUS_PER_NODE"]) if env.get("SLURM_JOB_CPUS_PER_NODE") else []
    tasks_per_node = int(per_node) if per_node else None
    if tasks_per_node is None and tasks and env.get("SLURM_TASKS_PER_NODE"):
        # With a task count, Slurm's spread of it bounds how many ranks fit on one node.
        tasks_per_node = max(expand_counts(env["SLURM_TASKS_PER_NODE"]))
    gpus_per_node, gpu_source = _gpus_per_node(env, nodes, tasks_per_node)
    return Allocation(job_id=job_id, nodes=nodes, nodelist=env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST"),
                      tasks=int(tasks) if tasks else None, tasks_per_node=tasks_per_node,
                      cpus_per_node=tuple(cpus), gpus_per_node=gpus_per_node, gpu_source=gpu_source)


def srun_step_options(allocation: Allocation | None, ranks: int, version: tuple[int, ...] | None) -> list[str]:
    """Options that make ``srun`` start a cell as one job step of ``allocation``.

    - Slurm before 20.11 lets job steps share CPUs unless asked otherwise: ``--exclusive`` keeps a
      step still being ended, or any other step, off the measured cell's cores. From 20.11 steps do
      not share CPUs by default. ``--exact`` is not used there: it would shrink each rank to
      ``--cpus-per-task`` CPUs, one unless repeated (22.05 to 23.02 no longer pass the allocation's
      value on to srun), while the worker shares the node's cores among its local ranks itself.
    - With GPUs, one rank per GPU: at most :attr:`Allocation.ranks_per_node` ranks on each node, on
      as few nodes as hold them. The step gets every GPU of the job on its nodes (Slurm's default
      for job steps) and each rank takes ``cuda:LOCAL_RANK``. ``--gpu-bind=none`` undoes the
      per-task binding an inherited ``SLURM_GPUS_PER_TASK`` would impose: a rank that sees only its
      own GPU breaks the local-rank binding, and NCCL cannot use peer-to-peer paths between GPUs
      that a process cannot see.
    """
    if allocation is None:
        return []
    options = exclusive_steps(version)
    if allocation.gpus_per_node:
        per_node = allocation.ranks_per_node
        nodes = math.ceil(ranks / per_node)
        if nodes <= allocation.nodes:
            options += [f"--nodes={nodes}", f"--ntasks-per-node={min(ranks, per_node)}", "--gpu-bind=none"]
    return options


def exclusive_steps(version: tuple[int, ...] | None) -> list[str]:
    """``--exclusive`` where Slurm (before 20.11) lets job steps share CPUs by default."""
    return ["--exclusive"] if version is not None and version < (20, 11) else []


def overlapping_step(version: tuple[int, ...] | None) -> list[str]:
    """``--overlap`` for a short step that must run beside the cell's (Slurm 20.11 on, or unknown)."""
    return ["--overlap"] if version is None or version >= (20, 11) else []


def agents_layout(allocation: Allocation, ranks: int) -> tuple[int, int]:
    """``(nodes, ranks per node)`` for a launcher that starts one agent per node with the same
    number of ranks under each (torchrun): with GPUs as :func:`srun_step_options` lays them out,
    one rank per GPU on as few nodes as hold them; without, over as many of the job's nodes as
    there are ranks, or its fixed tasks per node. ``ValueError`` where the ranks do not split
    evenly or do not fit."""
    if allocation.gpus_per_node:
        per_node = allocation.ranks_per_node
        nodes = math.ceil(ranks / per_node)
    elif allocation.tasks_per_node:
        nodes = math.ceil(ranks / allocation.tasks_per_node)
    else:
        nodes = min(allocation.nodes, ranks)
    if nodes > allocation.nodes:
        raise ValueError(f"{ranks} rank(s) need {nodes} node(s) and the Slurm allocation {allocation.job_id} "
                         f"holds {allocation.nodes}")
    if ranks % nodes:
        raise ValueError(f"torchrun starts the same number of ranks on every node: {ranks} rank(s) do not split "
                         f"evenly over the {nodes} node(s) they need in the Slurm allocation {allocation.job_id}")
    return nodes, ranks // nodes


def first_host(nodelist: str) -> str:
    """First host of a Slurm node list such as ``node[03-05,07],gpu1`` -> ``node03``."""
    prefix, bracket, rest = nodelist.partition("[")
    if "," in prefix:  # the first entry has no bracket
        return prefix.split(",")[0]
    if not bracket:
        return prefix
    first_range = rest.split("]")[0].split(",")[0]
    return prefix + first_range.split("-")[0]


# -- launch environment ------------------------------------------------------------------------

def parse_assignment(text: str, where: str = "--launch-env") -> tuple[str, str]:
    name, equals, value = text.partition("=")
    name = name.strip()
    if not equals or not _NAME.fullmatch(name):
        raise ValueError(f"{where}: expected NAME=VALUE, got {text!r}")
    if name in RESERVED:
        raise ValueError(f"{where}: {name} is set by the harness for each cell and cannot be overridden")
    return name, value


def read_env_file(path: Path | str) -> dict[str, str]:
    """``NAME=VALUE`` lines; blank lines, ``#`` comments and a leading ``export`` are allowed, and
    one pair of quotes around a value is removed. Values are taken literally (no ``$`` expansion)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise ValueError(f"launch environment file {path}: {error.strerror}") from None
    table = {}
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        line = line.removeprefix("export ").lstrip()
        name, value = parse_assignment(line, f"{path}:{number}")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        table[name] = value
    return table


def launch_environment(assignments: Iterable[str] = (), env_file: Path | str | None = None,
                       env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables every cell's ranks get: ``env_file`` (else ``$DLSCALE_ENV_FILE``), then
    ``assignments`` (``NAME=VALUE``), later ones winning. Raises ``ValueError`` naming a bad entry."""
    env = env if env is not None else {}
    env_file = env_file or env.get(ENV_FILE_VARIABLE) or None
    table = read_env_file(env_file) if env_file else {}
    for text in assignments:
        name, value = parse_assignment(text)
        table[name] = value
    return table
