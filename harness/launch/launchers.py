"""How a cell's ranks are started: one small class per launcher, each turning a launch request
into the argument list of a real launcher command (``srun``, ``mpirun``, ``torchrun``)."""
from __future__ import annotations

import abc
import copy
import dataclasses
import json
import os
import shutil
import socket
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Mapping

from harness import HARNESS_SOURCE
from harness.common.registry import Entry, Registry
from harness.machine import allocation
from harness.machine.provenance import version_text


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class LaunchRequest:
    ranks: int
    module: str
    """Python module run as each rank's program (``python -m MODULE ARGS``)."""
    args: tuple[str, ...]
    job_name: str
    master_port: int
    master_addr: str | None = None
    """None lets each rank derive it from its launcher (Slurm: first node of the step)."""
    python: str = sys.executable
    """The harness's interpreter (torch's): torchrun's agents and the clean-up sweeps run in it."""
    rank_python: str | None = None
    """The interpreter the ranks run in where it is not :attr:`python`: another runtime's environment
    (:func:`harness.rank.runtime.interpreter`)."""
    token: str = ""
    """The run token every process of the launch carries (``DLSCALE_RUN_TOKEN``)."""
    cores_per_rank: int | None = None
    """CPU cells: cores each rank owns (harness.machine.binding), bound by launchers that can."""
    share_cores: bool = False
    """More processes than the cores they were given may run, sharing them (a parameter-server
    cell's servers beside its workers): srun asks for ``--overcommit``, mpirun ``--oversubscribe``."""
    export: tuple[str, ...] = ("MASTER_ADDR", "MASTER_PORT", "DLSCALE_RUN_TOKEN", "PYTHONPATH", "PYTHONSAFEPATH",
                               "PYTHONUNBUFFERED")
    """Variables a launcher that does not forward the whole environment must pass on."""


def find_tool(name: str) -> str | None:
    """``name`` beside the running Python (a virtual environment's bin/, not always on PATH), else on PATH."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.is_file() else shutil.which(name)


class Launcher(abc.ABC):
    name: str
    executable: str

    takes_partition = False
    """Whether it can start ranks in a Slurm partition of the user's choice (``--partition``)."""

    def __init__(self, *, environment: Mapping[str, str] | None = None, unset: Iterable[str] = (),
                 partition: str | None = None, slurm_env: Mapping[str, str] | None = None):
        self.environment = dict(environment or {})
        """The launch environment (:func:`harness.machine.allocation.launch_environment`): site settings such as
        NCCL_SOCKET_IFNAME that every rank gets, set on the launcher's own command line."""
        self.unset = tuple(name for name in unset if name not in self.environment)
        """Variables no rank may have, though this process has them (an ``--against env:NAME`` reference's):
        unset on the launcher's own command line. Every launcher here passes its own environment on
        to the ranks (srun's ``--export=ALL``, mpirun's local launch and its daemons started by srun,
        torchrun's agent), so what it lacks they lack; mpirun's ``-x`` never names them."""
        self.partition = partition
        self.slurm_env = slurm_env
        """The environment the Slurm allocation is read from; None: this process's, when asked."""

    def _allocation(self) -> allocation.Allocation | None:
        return allocation.from_env(os.environ if self.slurm_env is None else self.slurm_env)

    def with_variables(self, variables: Mapping[str, str]) -> "Launcher":
        """This launcher with ``variables`` added to its launch environment (a duet side's GPUs)."""
        other = copy.copy(self)
        other.environment = {**self.environment, **variables}
        other.unset = tuple(name for name in self.unset if name not in other.environment)
        return other

    def _with_environment(self, command: list[str]) -> list[str]:
        """``command`` run under ``env -u NAME ... NAME=VALUE ...``: seen in the results, inherited by
        every launcher."""
        if not self.environment and not self.unset:
            return command
        return ["env", *(token for name in self.unset for token in ("-u", name)),
                *(f"{name}={value}" for name, value in self.environment.items()), *command]

    def unavailable_reason(self) -> str | None:
        """Why this launcher cannot be used here, or None when it can."""
        if find_tool(self.executable) is None:
            return f"{self.executable} not found beside {sys.executable} or on PATH"
        return None

    def cannot_lay_out(self, ranks: int) -> str | None:
        """Why this launcher cannot start ``ranks`` ranks here, or None when it can."""
        return None

    def start_up_delay(self) -> str | None:
        """What makes every launch here start late that the user can remove, in words, or None."""
        return None

    @abc.abstractmethod
    def command(self, request: LaunchRequest) -> list[str]: ...

    def rendezvous_host(self) -> str | None:
        """Where rank 0 will listen, when the launcher does not tell its ranks itself."""
        return self.environment.get("MASTER_ADDR") or socket.gethostname()

    def cleanup(self, request: LaunchRequest) -> dict[str, list[int]]:
        """After the launcher's process is gone and this node's processes with the token are
        swept: end what the launch may have left elsewhere, through the launcher's own mechanism,
        and check every other node it reached. The pids that had to be killed, by node."""
        return {}


def with_harness_importable(env: Mapping[str, str], source: Path = HARNESS_SOURCE.parent) -> dict[str, str]:
    """``env`` with the harness in ``source`` (this checkout's, unless a reference environment's) first
    on PYTHONPATH, for the processes a launch starts. ``python -m`` would put the working directory
    (often a checkout) before it: PYTHONSAFEPATH leaves it out."""
    return dict(env, PYTHONPATH=os.pathsep.join(filter(None, [str(source), env.get("PYTHONPATH")])),
                PYTHONSAFEPATH="1")


def inside_slurm_allocation(env=os.environ) -> bool:
    return "SLURM_JOB_ID" in env


def _spans_other_nodes(job: allocation.Allocation) -> bool:
    return job.nodes > 1 or (job.nodelist or "") not in ("", socket.gethostname(), socket.gethostname().split(".")[0])


def sweep_allocation_nodes(request: LaunchRequest, job: allocation.Allocation | None,
                           timeout_s: float = 60) -> dict[str, list[int]]:
    """Inside a Slurm allocation that reaches beyond this node: one task on every node of it kills
    whatever still carries the launch's token (``python -m harness.launch.procs sweep``). This node's
    /proc shows only this node's processes, so only such a step can see the others.

    The pids killed, by node; a node that could not be checked is named with the reason, so that
    a cell never passes as clean when it could not be looked at."""
    if job is None or not request.token or not _spans_other_nodes(job) or shutil.which("srun") is None:
        return {}
    command = ["srun", *allocation.overlapping_step(installed_slurm_version()), f"--nodes={job.nodes}",
               f"--ntasks={job.nodes}", "--ntasks-per-node=1", f"--job-name={request.job_name}-sweep", request.python,
               "-m", "harness.launch.procs", "sweep", request.token]
    try:
        done = subprocess.run(command, env=with_harness_importable(os.environ), capture_output=True, text=True,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"the sweep of the allocation's {job.nodes} nodes did not answer in {timeout_s:.0f} s") from None
    by_node: dict[str, list[int]] = {}
    alive: dict[str, list[int]] = {}
    for line in done.stdout.splitlines():
        try:
            swept = json.loads(line)
            by_node[swept["host"]] = swept["killed"]
            alive[swept["host"]] = swept["left"]
        except (ValueError, KeyError, TypeError):
            continue
    if any(alive.values()):
        raise RuntimeError("processes of the cell outlived SIGKILL: "
                           + "; ".join(f"{host}: pids {pids}" for host, pids in alive.items() if pids))
    if len(by_node) < job.nodes:
        raise RuntimeError(f"the sweep of the allocation's {job.nodes} nodes heard from {sorted(by_node) or 'none'}: "
                           f"{(done.stderr or done.stdout).strip()[-500:]}")
    return by_node


def gpus_a_job_step_sees(job: allocation.Allocation, python: str = sys.executable, timeout_s: float = 120) -> int:
    """The GPUs torch sees in a one-task job step of ``job``: where the ranks will run, which after
    ``salloc`` on a login node is not where this process runs. ``RuntimeError`` with srun's words
    where the step could not say."""
    command = ["srun", *allocation.overlapping_step(installed_slurm_version()), "--nodes=1", "--ntasks=1",
               "--job-name=dlscale-gpu-probe", python, "-c",
               "import torch; print(torch.cuda.device_count())"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError:
        raise RuntimeError("srun is not on PATH") from None
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"the probe step did not answer in {timeout_s:.0f} s") from None
    last = done.stdout.strip().splitlines()[-1:] or [""]
    if done.returncode != 0 or not last[0].isdigit():
        raise RuntimeError(f"the probe step failed: {(done.stderr or done.stdout).strip()[-500:]}")
    return int(last[0])


def _job_steps_named(job_id: str, name: str) -> list[str]:
    """The ids (``JOB.STEP``) of the job's steps called ``name``."""
    listed = subprocess.run(["squeue", "--noheader", "--steps", f"--jobs={job_id}", "--format=%i %j"],
                            capture_output=True, text=True, timeout=30, check=False)
    return [step for step, _, step_name in (line.strip().partition(" ") for line in listed.stdout.splitlines())
            if step_name.strip() == name]


class SrunLauncher(Launcher):
    """Outside an allocation srun makes a job of the cell; inside one (salloc, sbatch) the cell is a
    job step laid out by :func:`harness.machine.allocation.srun_step_options`: one rank per GPU."""

    name = "srun"
    executable = "srun"
    takes_partition = True

    def __init__(self, *, environment: Mapping[str, str] | None = None, unset: Iterable[str] = (),
                 partition: str | None = None, slurm_env: Mapping[str, str] | None = None,
                 version: tuple[int, ...] | None = None):
        super().__init__(environment=environment, unset=unset, partition=partition, slurm_env=slurm_env)
        self.version = version

    def unavailable_reason(self) -> str | None:
        return super().unavailable_reason() or (None if slurm_cluster_answers() else "no Slurm cluster answers (sinfo)")

    def rendezvous_host(self) -> str | None:
        return None  # each rank reads the step's first node from SLURM_STEP_NODELIST

    def command(self, request: LaunchRequest) -> list[str]:
        job = self._allocation()
        version = self.version or (installed_slurm_version() if job else None)
        step = allocation.srun_step_options(job, request.ranks, version)
        if request.cores_per_rank:
            step += [f"--cpus-per-task={request.cores_per_rank}", "--cpu-bind=cores"]
        elif request.share_cores:
            step.append("--overcommit")
        if self.partition and job is None:  # inside an allocation, its partition is the job's
            step.append(f"--partition={self.partition}")
        return self._with_environment(["srun", f"--ntasks={request.ranks}", *step, "--kill-on-bad-exit=1",
                                       f"--job-name={request.job_name}", request.rank_python or request.python,
                                       "-m", request.module, *request.args])

    def cleanup(self, request: LaunchRequest) -> dict[str, list[int]]:
        # Outside an allocation srun made a job of its own, named after the cell: cancel it.
        if shutil.which("scancel") is None:
            return {}
        job = self._allocation()
        if job is None:
            subprocess.run(["scancel", "--quiet", f"--name={request.job_name}"], timeout=30, check=False)
            return {}
        return cancel_step_and_sweep(request, job)


def cancel_step_and_sweep(request: LaunchRequest, job: allocation.Allocation) -> dict[str, list[int]]:
    """Inside the user's allocation, which must never be cancelled: cancel the launch's own job step
    (an srun killed by a second Ctrl-C leaves its step running on the other nodes), then sweep
    every node of the allocation."""
    if shutil.which("scancel") is not None:
        for step in _job_steps_named(job.job_id, request.job_name):
            subprocess.run(["scancel", "--quiet", step], timeout=30, check=False)
    return sweep_allocation_nodes(request, job)


def open_mpi_refusal(version_text: str | None) -> str | None:
    """Why an ``mpirun`` whose ``--version`` says ``version_text`` cannot be used, or None for
    Open MPI's: this launcher speaks Open MPI (``-x``, ``--map-by``, ``OMPI_COMM_WORLD_*``)."""
    if version_text is None or "Open MPI" in version_text or "open-mpi" in version_text:
        return None  # unreadable: let the launch itself say what is wrong
    what = "MPICH/Hydra" if "HYDRA" in version_text.upper() or "MPICH" in version_text.upper() else \
        "Intel MPI" if "Intel(R) MPI" in version_text else version_text.strip().splitlines()[0]
    return (f"mpirun is {what}, not Open MPI; dlscale's mpirun launcher speaks Open MPI only "
            "(-x, --map-by, OMPI_COMM_WORLD_*): use --launcher srun, or put Open MPI's mpirun first on PATH")


MUNGE_SOCKETS = (Path("/run/munge/munge.socket.2"), Path("/var/run/munge/munge.socket.2"))


def stopped_munge(env: Mapping[str, str], sockets: Iterable[Path] = MUNGE_SOCKETS) -> str | None:
    """Why every mpirun launch here waits for munge, or None. Open MPI's PMIx tries its munge security
    first; where munge is installed but its daemon does not answer at its socket, each rank's client
    retries with a growing back-off before it falls back: ``mpirun -np 1 true`` took 2.34 s so on a
    2-core VM, 0.09 s with ``PMIX_MCA_psec=native`` (Open MPI 4.1.4)."""
    if env.get("PMIX_MCA_psec"):
        return None
    for path in sockets:
        if not path.is_socket():
            continue
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.settimeout(1.0)
            try:
                client.connect(str(path))
            except OSError:
                return (f"munge is installed but no daemon answers at {path}: each mpirun launch waits about 2 s for "
                        "PMIx's munge security to give up; start munged, or export PMIX_MCA_psec=native")
        return None
    return None


class MpirunLauncher(Launcher):
    name = "mpirun"
    executable = "mpirun"

    def unavailable_reason(self) -> str | None:
        if reason := super().unavailable_reason():
            return reason
        return open_mpi_refusal(version_text(find_tool(self.executable)))

    def start_up_delay(self) -> str | None:
        return stopped_munge({**os.environ, **self.environment})

    def command(self, request: LaunchRequest) -> list[str]:
        if request.cores_per_rank:
            binding = ["--map-by", f"slot:PE={request.cores_per_rank}", "--bind-to", "core"]
        else:
            binding = ["--bind-to", "none", *(["--oversubscribe"] if request.share_cores else [])]
        command = ["mpirun", "-np", str(request.ranks), *binding]
        if os.geteuid() == 0:
            command.append("--allow-run-as-root")
        for name in dict.fromkeys([*request.export, *self.environment]):
            if name not in self.unset:
                command += ["-x", name]
        return self._with_environment(command + [request.rank_python or request.python, "-m", request.module,
                                                 *request.args])

    def cleanup(self, request: LaunchRequest) -> dict[str, list[int]]:
        # SIGTERM to mpirun is Open MPI's own teardown (it ends its daemons and their ranks on
        # every node); inside a Slurm allocation every node is then checked.
        return sweep_allocation_nodes(request, self._allocation())


class TorchrunLauncher(Launcher):
    """torchrun's elastic agent. Outside a Slurm allocation: one agent on this node, static
    rendezvous. Inside one, the form multi-node PyTorch jobs take on Slurm: srun starts one agent
    per node as a job step, each with the same number of ranks (:func:`allocation.agents_layout`),
    and they meet at a c10d rendezvous on the step's first node (:mod:`harness.launch.agent`)."""

    name = "torchrun"
    executable = "torchrun"

    def unavailable_reason(self) -> str | None:
        if self._allocation() is not None and shutil.which("srun") is None:
            return "inside a Slurm allocation its agents are started by srun, which is not on PATH"
        return None  # run as ``python -m torch.distributed.run``: present wherever torch is

    def cannot_lay_out(self, ranks: int) -> str | None:
        job = self._allocation()
        if job is not None:
            try:
                allocation.agents_layout(job, ranks)
            except ValueError as error:
                return str(error)
        return None

    def rendezvous_host(self) -> str | None:
        # Alone, the agent and its ranks share this host; on Slurm, the agents choose it.
        return "127.0.0.1" if self._allocation() is None else None

    def command(self, request: LaunchRequest) -> list[str]:
        # torchrun itself needs torch; ranks in another runtime's interpreter start as a program of
        # their own (--no-python)
        program = (["--no-python", request.rank_python, "-m", request.module] if request.rank_python
                   else ["-m", request.module])
        agent = ["--max-restarts=0", *program, *request.args]
        job = self._allocation()
        if job is None:
            return self._with_environment([
                request.python, "-m", "torch.distributed.run", "--nnodes=1", f"--nproc-per-node={request.ranks}",
                f"--master-addr={request.master_addr or '127.0.0.1'}", f"--master-port={request.master_port}",
                *agent])
        nodes, per_node = allocation.agents_layout(job, request.ranks)
        step = [f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1",
                *allocation.exclusive_steps(installed_slurm_version())]
        # One task per node holds the node's ranks: it needs their cores (Slurm gives a task one
        # by default) and every GPU the job has there (undoing an inherited per-task binding).
        cores = request.cores_per_rank * per_node if request.cores_per_rank else min(job.cpus_per_node, default=0)
        if cores:
            step.append(f"--cpus-per-task={cores}")
        if job.gpus_per_node:
            step.append("--gpu-bind=none")
        return self._with_environment([
            "srun", *step, "--kill-on-bad-exit=1", f"--job-name={request.job_name}", request.python, "-m",
            "harness.launch.agent", f"--nnodes={nodes}", f"--nproc-per-node={per_node}",
            f"--rdzv-id={request.job_name}", *agent])

    def cleanup(self, request: LaunchRequest) -> dict[str, list[int]]:
        job = self._allocation()
        return {} if job is None else cancel_step_and_sweep(request, job)


class HorovodrunLauncher(Launcher):
    """``horovodrun --gloo``: Horovod's own launcher with its Gloo controller (no MPI involved)."""

    name = "horovodrun"
    executable = "horovodrun"

    def rendezvous_host(self) -> str | None:
        return "127.0.0.1"

    def command(self, request: LaunchRequest) -> list[str]:
        return self._with_environment([find_tool("horovodrun") or "horovodrun", "--gloo", "-np", str(request.ranks),
                                       "-H", f"localhost:{request.ranks}", request.rank_python or request.python,
                                       "-m", request.module, *request.args])


class DeepspeedLauncher(Launcher):
    """DeepSpeed's own launcher, one node. ``--no_local_rank`` keeps argv free of ``--local_rank``."""

    name = "deepspeed"
    executable = "deepspeed"

    def rendezvous_host(self) -> str | None:
        return "127.0.0.1"

    def command(self, request: LaunchRequest) -> list[str]:
        return self._with_environment([find_tool("deepspeed") or "deepspeed", f"--num_gpus={request.ranks}",
                                       "--no_local_rank", f"--master_addr={request.master_addr or '127.0.0.1'}",
                                       f"--master_port={request.master_port}", "--module", request.module,
                                       *request.args])


LAUNCHERS = Registry("launcher", {
    "srun": Entry("harness.launch.launchers:SrunLauncher"),
    "mpirun": Entry("harness.launch.launchers:MpirunLauncher"),
    "torchrun": Entry("harness.launch.launchers:TorchrunLauncher"),
    "horovodrun": Entry("harness.launch.launchers:HorovodrunLauncher"),
    "deepspeed": Entry("harness.launch.launchers:DeepspeedLauncher"),
})


def slurm_cluster_answers(timeout_s: float = 10) -> bool:
    if shutil.which("sinfo") is None:
        return False
    try:
        result = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return False
    return result.returncode == 0 and bool(result.stdout.strip())


@lru_cache(maxsize=1)
def installed_slurm_version() -> tuple[int, ...] | None:
    """``srun --version`` as numbers, or None when it does not answer."""
    try:
        out = subprocess.run(["srun", "--version"], capture_output=True, text=True, timeout=10)
        return allocation.slurm_version(out.stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


def default_launcher_name() -> str:
    """srun inside an allocation or when a cluster answers, else torchrun."""
    if inside_slurm_allocation() or slurm_cluster_answers():
        return "srun"
    return "torchrun"
