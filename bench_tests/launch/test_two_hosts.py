"""A 2-rank DDP cell split over two hosts: two network namespaces on this machine (ci/netns.sh), each
with its own address, host name and interface. Started by one torchrun agent per host (--nnodes 2),
and as a two-node job step of a real two-node Slurm cluster (ci/netns-slurm.sh). Network settings
reach the ranks as a launch environment (GLOO_SOCKET_IFNAME), not as code."""
import os
import shlex
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from harness.launch.launchers import LaunchRequest, Launcher, SrunLauncher
from harness.launch.procs import processes_with_token
from harness.launch.runner import RunLimits, run_cell
from harness.rank.cell import Cell

from ..components import needs
from ..workloads import TEST_MODEL, TINY

pytestmark = pytest.mark.launch
NETNS = Path(__file__).resolve().parents[2] / "ci" / "netns.sh"
NETNS_SLURM = NETNS.with_name("netns-slurm.sh")
SUBNET, IFNAME = "10.231.0", "dls0"
CELL = Cell(framework="ddp", loader="synthetic", model=TEST_MODEL, ranks=2)


def netns_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None or shutil.which("unshare") is None:
        return "ip (iproute2) or unshare (util-linux) not found"
    if subprocess.run(["ip", "netns", "list"], capture_output=True).returncode != 0:
        return "'ip netns' does not work here"
    return None


@pytest.fixture(scope="module")
def hosts():
    """Two fresh namespaces, named for this run so that concurrent runs do not meet; removed after."""
    needs("two-hosts", netns_unavailable())
    env = dict(os.environ, DLSCALE_NETNS_PREFIX=f"dls{uuid.uuid4().hex[:6]}-h", DLSCALE_NETNS_SUBNET=SUBNET,
               DLSCALE_NETNS_IFNAME=IFNAME)
    up = subprocess.run([str(NETNS), "up"], env=env, capture_output=True, text=True, timeout=60)
    needs("two-hosts", f"ci/netns.sh up failed: {up.stderr.strip()}" if up.returncode else None)
    yield env
    subprocess.run([str(NETNS), "down"], env=env, check=True, timeout=60)


@pytest.fixture(scope="module")
def two_node_slurm(hosts, tmp_path_factory):
    """A two-node Slurm cluster on the two hosts; yields its slurm.conf."""
    for tool in ("slurmctld", "slurmd", "srun", "munge"):
        needs("slurm", f"{tool} not found (Debian packages slurm-wlm and munge)" if shutil.which(tool) is None else None)
    env = dict(hosts, DLSCALE_NETNS_SLURM_STATE=str(tmp_path_factory.mktemp("netns-slurm")))
    up = subprocess.run([str(NETNS_SLURM), "up"], env=env, capture_output=True, text=True, timeout=90)
    needs("two-hosts", f"ci/netns-slurm.sh up failed: {up.stderr.strip()[-2000:]}" if up.returncode else None)
    yield up.stdout.strip()
    subprocess.run([str(NETNS_SLURM), "down"], env=env, check=True, timeout=60)


class TwoNodeSrun(SrunLauncher):
    """srun on host 0 of the namespaced two-node cluster, one task per node (each has one CPU)."""

    name = "srun-2nodes"

    def __init__(self, netns_env: dict, slurm_conf: str):
        super().__init__(environment={"GLOO_SOCKET_IFNAME": IFNAME}, slurm_env={})
        self.prefix = [*_netns_settings(netns_env), str(NETNS), "exec", "0", "env", f"SLURM_CONF={slurm_conf}"]

    def unavailable_reason(self) -> str | None:
        return None

    def command(self, request: LaunchRequest) -> list[str]:
        command = super().command(request)
        at = command.index("srun") + 1
        return [*self.prefix, *command[:at], "--nodes=2", *command[at:]]

    def cleanup(self, request: LaunchRequest) -> dict[str, list[int]]:
        subprocess.run([*self.prefix, "scancel", "--quiet", f"--name={request.job_name}"], timeout=30, check=False)
        return {}


def _netns_settings(netns_env: dict) -> list[str]:
    return ["env", *(f"{k}={v}" for k, v in netns_env.items() if k.startswith("DLSCALE_NETNS_"))]


class TwoHostTorchrun(Launcher):
    """One torchrun agent per namespace, ``--nnodes 2``, rendezvous at host 0's address. Each agent
    runs under ``ci/netns.sh exec N`` with the launch environment; the launcher's exit status is
    the first failing agent's."""

    name = "torchrun-2hosts"
    executable = "torchrun"

    def __init__(self, netns_env: dict, *, node_ranks=(0, 1), master_addr: str = f"{SUBNET}.1",
                 rendezvous_timeout_s: int = 60, environment: dict | None = None):
        super().__init__(environment=environment if environment is not None else {"GLOO_SOCKET_IFNAME": IFNAME})
        self.netns_env = netns_env
        self.node_ranks = node_ranks
        self.master_addr = master_addr
        self.rendezvous_timeout_s = rendezvous_timeout_s

    def rendezvous_host(self) -> str | None:
        return self.master_addr

    def command(self, request: LaunchRequest) -> list[str]:
        assert request.ranks % 2 == 0, "ranks are split evenly over the two hosts"
        agents = []
        for node in self.node_ranks:
            agent = self._with_environment([
                request.python, "-m", "torch.distributed.run", "--nnodes=2", f"--node-rank={node}",
                f"--nproc-per-node={request.ranks // 2}", f"--master-addr={request.master_addr}",
                f"--master-port={request.master_port}", "--max-restarts=0",
                f"--rdzv-conf=timeout={self.rendezvous_timeout_s}", "-m", request.module, *request.args])
            agents.append(shlex.join([str(NETNS), "exec", str(node), *agent]))
        script = "pids=(); " + " ".join(f"{agent} & pids+=($!);" for agent in agents)
        script += ' rc=0; for p in "${pids[@]}"; do wait "$p" || rc=$?; done; exit $rc'
        return [*_netns_settings(self.netns_env), "bash", "-c", script]


def test_a_ddp_cell_runs_across_two_hosts(hosts, tmp_path):
    prefix = hosts["DLSCALE_NETNS_PREFIX"]
    run = run_cell(CELL, TINY, TwoHostTorchrun(hosts), workdir=tmp_path,
                   limits=RunLimits(timeout_s=300, heartbeat_s=90))
    assert run.ok, run.error
    records = sorted(run.records, key=lambda r: r["rank"])
    assert [r["rank"] for r in records] == [0, 1]
    assert [r["host"] for r in records] == [f"{prefix}0", f"{prefix}1"]
    assert {r["master_addr"] for r in records} == {f"{SUBNET}.1"}
    assert [r["local_rank"] for r in records] == [0, 0] and {r["world_size"] for r in records} == {2}
    assert [r["addr"] for r in records] == [f"{SUBNET}.1", f"{SUBNET}.2"]  # each rank's own address
    assert all(r["images"] > 0 for r in records)
    assert processes_with_token(run.token) == []
    for node in (0, 1):
        assert _pids_in(f"{prefix}{node}") == [], "a process is left inside a namespace"


def test_a_ddp_cell_runs_as_a_two_node_slurm_job_step(hosts, two_node_slurm, tmp_path):
    prefix = hosts["DLSCALE_NETNS_PREFIX"]
    run = run_cell(CELL, TINY, TwoNodeSrun(hosts, two_node_slurm), workdir=tmp_path,
                   limits=RunLimits(timeout_s=300, heartbeat_s=90))
    assert run.ok, run.error
    records = sorted(run.records, key=lambda r: r["rank"])
    assert [(r["rank"], r["source"], r["host"]) for r in records] == [(0, "slurm", f"{prefix}0"),
                                                                       (1, "slurm", f"{prefix}1")]
    # The rendezvous address is the step's first node, as on a real cluster (rankenv).
    assert {r["master_addr"] for r in records} == {f"{prefix}0"}
    assert [r["addr"] for r in records] == [f"{SUBNET}.1", f"{SUBNET}.2"]
    assert processes_with_token(run.token) == []
    # Slurm's daemons stay; slurmstepd ends within moments of its step.
    deadline = time.monotonic() + 15
    while (left := [_comm(pid) for node in (0, 1) for pid in _pids_in(f"{prefix}{node}")
                    if _comm(pid) not in ("slurmctld", "slurmscriptd", "slurmd", None)]):
        assert time.monotonic() < deadline, f"left inside the hosts: {left}"
        time.sleep(0.5)


def _comm(pid: str) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def test_a_wrong_interface_setting_fails_the_cell_with_its_name(hosts, tmp_path):
    """The launch environment is what the ranks use: a GLOO_SOCKET_IFNAME that names no interface
    fails the cell quickly, names the interface, and leaves nothing behind."""
    launcher = TwoHostTorchrun(hosts, environment={"GLOO_SOCKET_IFNAME": "no-such-if0"})
    run = run_cell(CELL, TINY, launcher, workdir=tmp_path, limits=RunLimits(timeout_s=120, heartbeat_s=45))
    assert run.status == "failed", run.error
    assert "no-such-if0" in run.error
    assert processes_with_token(run.token) == []


def _pids_in(namespace: str) -> list[str]:
    """Processes in a host's network namespace, but for the host's init (ci/netns.sh) and its parent."""
    out = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True)
    return [pid for pid in out.stdout.split() if pid not in _host_init(namespace)]


def _host_init(namespace: str) -> set[str]:
    try:
        init = Path(f"/run/netns/{namespace}.init").read_text().strip()
        status = Path(f"/proc/{init}/status").read_text()
    except OSError:
        return set()
    parent = next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:"))
    return {init, parent}
