"""Which rank am I? Read rank, world size, local rank and rendezvous address from whichever
launcher started this process: torchrun (and launchers that imitate it), Open MPI, or Slurm."""
from __future__ import annotations

import dataclasses
import random
import socket
from pathlib import Path
from typing import Mapping

from harness.machine.allocation import first_host


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RankInfo:
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int
    source: str
    """Which launcher's variables were read: "torchrun" (also the deepspeed launcher), "horovodrun",
    "openmpi" or "slurm"."""


class RankEnvironmentError(RuntimeError):
    pass


def read_rank_info(env: Mapping[str, str]) -> RankInfo:
    """Map a launcher's environment to a :class:`RankInfo`.

    Order matters: torchrun-style and horovodrun's variables are explicit; Open MPI's are checked
    before Slurm's because ``mpirun`` inside an ``sbatch`` allocation inherits the batch step's
    ``SLURM_PROCID``.
    """
    addr = env.get("MASTER_ADDR")
    port = env.get("MASTER_PORT")
    if "RANK" in env and "WORLD_SIZE" in env:
        source = "torchrun"
        rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
        local_rank = int(env.get("LOCAL_RANK", rank))
        # deepspeed's launcher says LOCAL_SIZE where torchrun says LOCAL_WORLD_SIZE
        local_world = int(env.get("LOCAL_WORLD_SIZE") or env.get("LOCAL_SIZE") or world)
    elif "HOROVOD_RANK" in env and "HOROVOD_SIZE" in env:
        # horovodrun --gloo (its MPI mode goes through mpirun and gives Open MPI's variables)
        source = "horovodrun"
        rank, world = int(env["HOROVOD_RANK"]), int(env["HOROVOD_SIZE"])
        local_rank = int(env.get("HOROVOD_LOCAL_RANK", rank))
        local_world = int(env.get("HOROVOD_LOCAL_SIZE", world))
        addr = addr or env.get("HOROVOD_GLOO_RENDEZVOUS_ADDR")
    elif "OMPI_COMM_WORLD_RANK" in env:
        source = "openmpi"
        rank, world = int(env["OMPI_COMM_WORLD_RANK"]), int(env["OMPI_COMM_WORLD_SIZE"])
        local_rank = int(env["OMPI_COMM_WORLD_LOCAL_RANK"])
        local_world = int(env["OMPI_COMM_WORLD_LOCAL_SIZE"])
    elif "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        source = "slurm"
        rank, world = int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"])
        local_rank = int(env.get("SLURM_LOCALID", 0))
        tasks_per_node = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE", "1")
        local_world = int(tasks_per_node.split("(")[0].split(",")[0])
        if addr is None:
            nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST")
            addr = first_host(nodelist) if nodelist else None
    else:
        raise RankEnvironmentError(
            "no launcher variables found: expected torchrun's RANK/WORLD_SIZE, Open MPI's "
            "OMPI_COMM_WORLD_RANK/SIZE or Slurm's SLURM_PROCID/SLURM_NTASKS; start the worker "
            "through srun, mpirun or torchrun"
        )
    if world < 1 or not 0 <= rank < world:
        raise RankEnvironmentError(f"{source} gave rank {rank} of world size {world}")
    if addr is None or port is None:
        missing = [name for name, value in (("MASTER_ADDR", addr), ("MASTER_PORT", port)) if value is None]
        raise RankEnvironmentError(f"rendezvous address incomplete: {', '.join(missing)} not set ({source} launch)")
    return RankInfo(rank=rank, world_size=world, local_rank=local_rank, local_world_size=local_world,
                    master_addr=addr, master_port=int(port), source=source)


def free_port() -> int:
    """A TCP port no process listens on now, for a rendezvous this process sets up."""
    with socket.socket() as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


PORTS_ABOVE_MASTER = 2
"""The framework adapters derive ports from ``MASTER_PORT`` up to ``MASTER_PORT + ranks + 2``
(ps-lite's scheduler, its workers and the server beside rank 0; TensorFlow's tasks and its
parameter-server chief; the RPC agent)."""


def own_port(rank: RankInfo) -> int:
    """The port this rank serves on in its launch's block (:func:`launch_port_block`): one per rank."""
    return rank.master_port + 1 + rank.rank


def spare_port(rank: RankInfo) -> int:
    """A port of the launch's block that no rank's :func:`own_port` takes, for rank 0's helper process."""
    return rank.master_port + rank.world_size + 1


EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_PORT = 10000


def launch_port_block(ranks: int, attempts: int = 200) -> int:
    """A ``MASTER_PORT`` whose derived ports (:data:`PORTS_ABOVE_MASTER`) no process listens on
    now, outside the kernel's ephemeral range where it can: a port in that range may be taken by any
    connection this machine opens between the check and the framework's own bind (ps-lite's
    scheduler once failed so, 'bind failed', in about 30 launches). A random block, so that
    concurrent sessions rarely try the same one; the ephemeral range where no block fits beside it."""
    size = ranks + PORTS_ABOVE_MASTER + 1
    for low, high in port_ranges_outside(ephemeral_range(), size):
        for _ in range(attempts):
            base = random.randint(low, high)
            if all(bindable(port) for port in range(base, base + size)):
                return base
    return free_port()


def ephemeral_range(path: Path = EPHEMERAL_RANGE_FILE) -> tuple[int, int]:
    try:
        low, high = path.read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def port_ranges_outside(ephemeral: tuple[int, int], size: int) -> list[tuple[int, int]]:
    """Where a block of ``size`` ports may start without reaching into ``ephemeral``: below it,
    above it, or nowhere."""
    low, high = ephemeral
    ranges = [(LOWEST_PORT, low - size), (high + 1, 65536 - size)]
    return [(first, last) for first, last in ranges if first <= last]


def bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("", port))
        except OSError:
            return False
    return True


def address_toward(host: str, port: int) -> str | None:
    """This rank's own address on the route to ``host``: the interface its traffic to the rendezvous
    leaves by. A UDP connect only picks the route; nothing is sent. None when there is no route."""
    try:
        family, _, _, _, target = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect(target)
            return probe.getsockname()[0]
    except OSError:
        return None
