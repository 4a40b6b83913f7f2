"""What the run's environment was, for the report: where it ran (Slurm job, step, nodes), with which
software environment (modules, conda or venv, MPI and Slurm versions), with which communication
settings in effect (NCCL_*, GLOO_*, OMPI_*, UCX_*, ...), and how the GPUs are connected
(``nvidia-smi topo -m``).

    python -m harness.machine.environment        # prints capture() as JSON

:func:`capture` never fails: a tool that is missing or does not answer leaves its field None.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from typing import Callable, Mapping, Sequence

COMMUNICATION_PREFIXES = ("NCCL_", "TORCH_NCCL_", "TORCH_DISTRIBUTED_", "GLOO_", "OMPI_", "PMIX_", "UCX_", "FI_",
                          "HOROVOD_", "CUDA_VISIBLE_DEVICES", "MASTER_ADDR", "MASTER_PORT")
_OMPI_PER_RANK = ("OMPI_COMM_WORLD_", "OMPI_FIRST_RANKS", "OMPI_APP_CTX_", "OMPI_MCA_orte_", "OMPI_MCA_ess_",
                  "OMPI_MCA_pmix", "OMPI_FILE_LOCATION", "OMPI_UNIVERSE_SIZE", "OMPI_ARGV", "OMPI_COMMAND")
"""Open MPI's own per-launch bookkeeping, not settings anybody chose: left out."""
_SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "KEY")
MASKED = "***"
"""A secret's value, as the capture writes it."""
COMPUTE_PREFIXES = ("OMP_", "GOMP_", "KMP_", "MKL_", "OPENBLAS_", "ATEN_", "DNNL_", "ONEDNN_", "PYTORCH_",
                    "TORCH_", "TF_", "XLA_", "MXNET_", "DALI_", "CUDA_", "NVIDIA_", "MALLOC_", "LD_PRELOAD",
                    "GLIBC_TUNABLES")
"""Variables a rank's compute reads (threads, kernels, allocators and glibc's tunables: its huge pages,
harness.machine.huge_pages), beside the communication ones."""
_PER_ALLOCATION = ("CUDA_VISIBLE_DEVICES", "MASTER_ADDR", "MASTER_PORT", "PMIX_")
"""Set by the batch system or the harness for each job: where it ran, not a setting anybody chose."""

Run = Callable[[Sequence[str]], "str | None"]


def run_tool(command: Sequence[str], timeout_s: float = 10.0) -> str | None:
    """Standard output of ``command``, or None when it is missing, fails or does not answer in time."""
    if shutil.which(command[0]) is None:
        return None
    try:
        out = subprocess.run(list(command), capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def communication_variables(env: Mapping[str, str]) -> dict[str, str]:
    """The variables that steer the collectives and launchers, sorted; secrets are masked."""
    chosen = {}
    for name in sorted(env):
        if not name.startswith(COMMUNICATION_PREFIXES) or name.startswith(_OMPI_PER_RANK):
            continue
        secret = any(word in name.upper() for word in _SECRET_WORDS)
        chosen[name] = MASKED if secret else env[name]
    return chosen


def rank_settings(env: Mapping[str, str], table: Mapping[str, str]) -> dict[str, str]:
    """The settings a cell's ranks run with, as a baseline records them to be rebuilt: the variables
    of the shell they inherit that steer their communication or compute (secrets masked, per-job
    bookkeeping left out), with the launch environment ``table`` (``--launch-env``) over them."""
    prefixes = COMMUNICATION_PREFIXES + COMPUTE_PREFIXES
    inherited = {name: value for name, value in env.items()
                 if name.startswith(prefixes) and not name.startswith(_OMPI_PER_RANK + _PER_ALLOCATION)}
    return {name: MASKED if any(word in name.upper() for word in _SECRET_WORDS) else value
            for name, value in sorted({**inherited, **table}.items())}


def slurm(env: Mapping[str, str]) -> dict | None:
    """The Slurm job and step this process belongs to, or None outside Slurm."""
    job = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    if not job:
        return None
    return {
        "cluster": env.get("SLURM_CLUSTER_NAME"), "job_id": job, "job_name": env.get("SLURM_JOB_NAME"),
        "partition": env.get("SLURM_JOB_PARTITION"), "account": env.get("SLURM_JOB_ACCOUNT"),
        "step_id": env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID"),
        "nodes": env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES"),
        "nodelist": env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST"),
        "step_nodelist": env.get("SLURM_STEP_NODELIST"),
        "tasks": env.get("SLURM_NTASKS"), "tasks_per_node": env.get("SLURM_TASKS_PER_NODE"),
        "cpus_per_node": env.get("SLURM_JOB_CPUS_PER_NODE"),
        "gpus": {name: env[name] for name in ("SLURM_GPUS_ON_NODE", "SLURM_JOB_GPUS", "SLURM_GPUS_PER_NODE",
                                              "SLURM_GPUS", "SLURM_GPUS_PER_TASK") if env.get(name)},
    }


def modules(env: Mapping[str, str]) -> list[str]:
    """Environment modules loaded (Lmod and Tcl modules both keep ``$LOADEDMODULES``)."""
    return [name for name in env.get("LOADEDMODULES", "").split(":") if name]


def python_environment(env: Mapping[str, str], prefix: str = sys.prefix, base_prefix: str = sys.base_prefix) -> dict:
    """Which Python environment: a conda environment, a virtual environment, or the system's."""
    info = {"python": sys.version.split()[0], "executable": sys.executable, "prefix": prefix}
    if env.get("CONDA_PREFIX"):
        info.update(kind="conda", name=env.get("CONDA_DEFAULT_ENV"), path=env["CONDA_PREFIX"])
    if prefix != base_prefix or env.get("VIRTUAL_ENV"):
        info.update(kind="venv", path=env.get("VIRTUAL_ENV") or prefix)
    info.setdefault("kind", "system")
    return info


def first_line(text: str | None) -> str | None:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[0] if lines else None


def mpi_version(run: Run = run_tool) -> str | None:
    """``mpirun --version``'s first line, e.g. ``mpirun (Open MPI) 4.1.4``."""
    return first_line(run(["mpirun", "--version"]))


def gpu_topology(run: Run = run_tool) -> dict | None:
    """GPU names and the interconnect matrix from ``nvidia-smi``; None where there is none."""
    gpus = run(["nvidia-smi", "--query-gpu=index,name,pci.bus_id,driver_version,memory.total",
                "--format=csv,noheader"])
    if gpus is None:
        return None
    return {"gpus": [line.strip() for line in gpus.splitlines() if line.strip()],
            "topology": run(["nvidia-smi", "topo", "-m"])}


def local_address(peer_host: str, peer_port: int = 9) -> str | None:
    """The address this host uses to reach ``peer_host`` (a rank's own address toward its master).

    A UDP socket's ``connect`` only picks the route and source address: nothing is sent.
    """
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((peer_host, peer_port))
            return probe.getsockname()[0]
    except OSError:
        return None


def capture(env: Mapping[str, str] | None = None, run: Run = run_tool) -> dict:
    """The run's environment as a JSON-ready dict (see the module docstring)."""
    env = os.environ if env is None else env
    return {
        "host": socket.gethostname(),
        "slurm": slurm(env),
        "slurm_version": first_line(run(["srun", "--version"])),
        "modules": modules(env),
        "python_environment": python_environment(env),
        "mpi_version": mpi_version(run),
        "communication_variables": communication_variables(env),
        "gpu_topology": gpu_topology(run),
    }


if __name__ == "__main__":
    json.dump(capture(), sys.stdout, indent=2)
    sys.stdout.write("\n")
