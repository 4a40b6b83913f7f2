"""Failure drills across two nodes: a rank killed, a rank hung, Ctrl-C once and twice, for a cell
with one rank on each host of the two-node namespace Slurm cluster, started by srun (a job step),
by mpirun (Open MPI inside the allocation, its daemons started through Slurm) and by torchrun (one
agent per node, started by srun, meeting at a c10d rendezvous on the first).

Each host has its own PID namespace, as two real nodes have, and the runner runs on host 0
(bench_tests/launch/node_drill.py inside ``salloc -N2``): its own /proc shows nothing of host 1, so
only the launcher's cross-node clean-up can pass these drills. This test, outside both hosts, sees
every process and times per node: the fault, the runner's decision, the last process gone, and the
processes still there when the runner returned (must be none).
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.common.interrupts import FIRST_NOTICE

from .node_drill import CELL
from .test_drills import Sampler, last_progress, report
from .test_two_hosts import NETNS, hosts, two_node_slurm  # noqa: F401 - fixtures

pytestmark = pytest.mark.launch
REPO = Path(__file__).resolve().parents[2]
TOKEN = b"DLSCALE_RUN_TOKEN="
FIRST_NOTICE_START = FIRST_NOTICE.split("(")[0]


class NodeWatch(Sampler):
    """Every process carrying a run token, by token and by the host whose PID namespace it lives
    in, with the rank of each worker."""

    def __init__(self, namespaces: dict[str, str]):
        super().__init__()
        self.namespaces = namespaces
        """PID namespace (as /proc/PID/ns/pid reads) -> host name."""
        self.seen: dict[tuple[str, int], dict] = {}

    def sample(self, now: float) -> None:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                environ = (entry / "environ").read_bytes().split(b"\0")
                namespace = os.readlink(entry / "ns" / "pid")
            except OSError:
                continue
            token = next((item[len(TOKEN):].decode() for item in environ if item.startswith(TOKEN)), None)
            if token is None or namespace not in self.namespaces:
                continue
            process = self.seen.setdefault((token, int(entry.name)), {"node": self.namespaces[namespace], "first": now,
                                                                      "rank": None})
            if process["rank"] is None:  # first seen between fork and exec, a rank is not a worker yet
                process["rank"] = _rank_of(entry, environ)
            process["last"] = now

    def of(self, token: str) -> list[dict]:
        return [process for (seen_token, _), process in self.seen.items() if seen_token == token]


def _rank_of(entry: Path, environ: list[bytes]) -> int | None:
    """A worker's rank (torchrun's, Open MPI's, else Slurm's: under mpirun or torchrun in an
    allocation a rank also inherits the SLURM_PROCID of the daemon's or agent's step); None for
    launchers and daemons."""
    try:
        cmdline = (entry / "cmdline").read_bytes()
    except OSError:
        return None
    if b"harness.rank.worker" not in cmdline or not cmdline.startswith(sys.executable.encode()):
        return None
    values = dict(item.split(b"=", 1) for item in environ if b"=" in item)
    value = values.get(b"RANK") or values.get(b"OMPI_COMM_WORLD_RANK") or values.get(b"SLURM_PROCID")
    return int(value) if value is not None else None


def _holder_namespace(prefix: str, node: int) -> str:
    holder = Path(f"/run/netns/{prefix}{node}.init").read_text().strip()
    return os.readlink(f"/proc/{holder}/ns/pid")


def _driver_pid(result: Path) -> int | None:
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmdline[:1] == [sys.executable.encode()] and b"bench_tests.launch.node_drill" in cmdline \
                and str(result).encode() in cmdline:
            return int(entry.name)
    return None


def _drill(hosts: dict, slurm_conf: str, launcher_name: str, cells: Path, result: Path,
           *flags: str) -> tuple[list[str], dict]:
    """The command and environment that run node_drill on host 0 inside an allocation of both hosts."""
    command = [str(NETNS), "exec", "0", "env", f"SLURM_CONF={slurm_conf}", "salloc", "--quiet", "--nodes=2",
               "--ntasks-per-node=1", sys.executable, "-m", "bench_tests.launch.node_drill", launcher_name, str(cells),
               str(result), *flags]
    return command, dict(hosts, PATH=os.environ["PATH"], PYTHONPATH=str(REPO))


def test_torchrun_agents_started_by_srun_train_one_cell_across_both_nodes(hosts, two_node_slurm, tmp_path):
    """Multi-node torchrun as users run it on Slurm: inside ``salloc -N2`` the torchrun launcher starts
    one agent per node as a job step; they meet at a c10d rendezvous on the step's first node."""
    result = tmp_path / "result.json"
    command, env = _drill(hosts, two_node_slurm, "torchrun", tmp_path / "cells", result)
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert result.exists(), (done.stdout + done.stderr)[-3000:]
    outcome = json.loads(result.read_text())
    assert outcome["status"] == "ok", outcome["error"]
    prefix = hosts["DLSCALE_NETNS_PREFIX"]
    assert [rank for rank, _, _ in outcome["ranks"]] == [0, 1]
    assert sorted(host for _, host, _ in outcome["ranks"]) == [f"{prefix}0", f"{prefix}1"]
    assert {source for _, _, source in outcome["ranks"]} == {"torchrun"}


DRILLS = {"killed": ["--fault", "exit"], "hung": ["--fault", "hang", "--heartbeat", "20"],
          # Ctrl-C pressed at a job whose rank on host 1 is stuck (what users press it for): deaf to
          # SIGTERM, it outlives a launcher that is killed, so only a SIGKILL on host 1 can end it.
          "ctrl-c": ["--fault", "stuck", "--heartbeat", "300"], "ctrl-c-twice": ["--fault", "stuck", "--heartbeat", "300"]}


CI_DRILLS = {("killed", "srun"), ("killed", "mpirun"), ("killed", "torchrun"), ("hung", "srun"),
             ("ctrl-c", "torchrun"), ("ctrl-c-twice", "mpirun")}
"""CI's share: a killed rank under every launcher, and each other drill under one (the one where its
clean-up has most to do: mpirun's second press finds processes left on host 1); ci/test --full runs
every drill under every launcher."""


@pytest.mark.parametrize("drill, launcher_name", [
    pytest.param(drill, launcher, marks=() if (drill, launcher) in CI_DRILLS else pytest.mark.full)
    for drill in DRILLS for launcher in ("srun", "mpirun", "torchrun")])
def test_a_failed_or_interrupted_cell_leaves_nothing_on_either_node(hosts, two_node_slurm, tmp_path, request,
                                                                    launcher_name, drill):
    prefix = hosts["DLSCALE_NETNS_PREFIX"]
    nodes = [f"{prefix}{n}" for n in (0, 1)]
    namespaces = {_holder_namespace(prefix, n): nodes[n] for n in (0, 1)}
    result, cells = tmp_path / "result.json", tmp_path / "cells"
    command, env = _drill(hosts, two_node_slurm, launcher_name, cells, result, *DRILLS[drill])
    log_path = tmp_path / "drill.log"
    outdir = cells / CELL.id
    with NodeWatch(namespaces) as watch, open(log_path, "wb") as log:
        driver = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True)
        try:
            pressed = None
            if drill.startswith("ctrl-c"):
                pressed = _press_when_both_ranks_train(driver, outdir, result, log_path, twice=drill == "ctrl-c-twice")
            driver.wait(timeout=300)
        finally:
            if driver.poll() is None:
                os.killpg(driver.pid, signal.SIGKILL)
        time.sleep(0.3)
    output = log_path.read_text(errors="replace")
    assert result.exists(), output[-3000:]
    outcome = json.loads(result.read_text())
    token = outcome["token"]
    assert outcome["host"] == nodes[0] and token, outcome
    processes = watch.of(token)
    workers = {process["rank"]: process for process in processes if process["rank"] is not None}
    assert {workers[rank]["node"] for rank in (0, 1)} == set(nodes), f"one rank per node expected: {workers}"

    expected = {"killed": "failed", "hung": "hung", "ctrl-c": "interrupted", "ctrl-c-twice": "interrupted"}[drill]
    assert outcome["status"] == expected, (outcome, output[-3000:])
    assert "Traceback" not in output, output[-3000:]
    presses = {"ctrl-c": 1, "ctrl-c-twice": 2}.get(drill, 0)
    assert outcome["presses"] == presses, f"the runner counted {outcome['presses']} presses of {presses} sent"
    assert ("dlscale: hurrying" in output) == (presses == 2), output[-3000:]  # the second hurried the clean-up
    if drill == "killed":
        struck = workers[0]["last"]
    elif drill == "hung":
        struck = last_progress(outdir)
    else:
        struck = pressed
    returned = outcome["returned"]
    timings: dict[str, float | str] = {"fault_to_runner_decided": outcome["decided"] - struck}
    left = {}
    for node in nodes:
        on_node = [process for process in processes if process["node"] == node]
        timings[f"host{node[-1]}_all_gone"] = max(process["last"] for process in on_node) + 0.1 - struck
        left[node] = [process for process in on_node if process["last"] > returned + 0.15]
        timings[f"host{node[-1]}_left"] = str(len(left[node]))
    timings["swept_elsewhere"] = json.dumps({f"host{host[-1]}": len(pids) for host, pids in (outcome["elsewhere"] or {}).items()})
    report(request, f"2 nodes, {drill}", launcher_name, **timings)
    assert left == {node: [] for node in nodes}, "processes outlived the runner's clean-up"


def _press_when_both_ranks_train(driver: subprocess.Popen, outdir: Path, result: Path, log_path: Path, *,
                                 twice: bool) -> float:
    """Ctrl-C (SIGINT) to the runner on host 0 once both ranks are in their timed steps and the rank
    on host 1 is stuck; the second press, if any, while the runner is ending the cell gracefully (it
has printed its first notice)."""
    deadline = time.monotonic() + 240
    while True:
        assert driver.poll() is None, "the drill ended before both ranks trained"
        assert time.monotonic() < deadline, "the ranks did not reach their timed steps in 240 s"
        phases = []
        for path in outdir.glob("progress-*.json"):
            try:
                phases.append(json.loads(path.read_text())["phase"])
            except (OSError, ValueError, KeyError):
                continue
        if phases.count("timed") == 2:
            break
        time.sleep(0.2)
    time.sleep(1.0)  # the hang strikes at the second timed step
    pid = _driver_pid(result)
    assert pid is not None, "the runner's process was not found"
    pressed = time.time()
    os.kill(pid, signal.SIGINT)
    if twice:
        # as soon as the runner says it is ending the cell: srun's and torchrun's graceful end can
        # take under half a second, and a press after it would find the runner gone
        _wait_until_in(log_path, FIRST_NOTICE_START, timeout_s=10)
        try:
            os.kill(pid, signal.SIGINT)
        except ProcessLookupError:
            pytest.fail("the runner was done before the second press could be sent")
    return pressed


def _wait_until_in(path: Path, text: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in path.read_text(errors="replace"):
        assert time.monotonic() < deadline, f"{text!r} did not appear in {path.name} in {timeout_s:g} s"
        time.sleep(0.01)


def test_each_hosts_sweep_sees_only_its_own_processes(hosts):
    """What makes the drills above able to fail: a process on host 1 is out of reach of host 0's
    token sweep (its own PID namespace), and is ended by the sweep on host 1."""
    token = os.urandom(8).hex()
    env = dict(hosts, PATH=os.environ["PATH"], PYTHONPATH=str(REPO))
    sweep = [sys.executable, "-m", "harness.launch.procs", "sweep", token]
    sleeper = subprocess.Popen([str(NETNS), "exec", "1", "env", f"DLSCALE_RUN_TOKEN={token}", sys.executable, "-c",
                                "import time; time.sleep(120)"], env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not _on_host(hosts, 1, token):
            assert time.monotonic() < deadline, "the process on host 1 did not start"
            time.sleep(0.1)
        from_host0 = json.loads(subprocess.run([str(NETNS), "exec", "0", *sweep], env=env, capture_output=True,
                                               text=True, check=True, timeout=60).stdout)
        assert from_host0["killed"] == [] and _on_host(hosts, 1, token)
        from_host1 = json.loads(subprocess.run([str(NETNS), "exec", "1", *sweep], env=env, capture_output=True,
                                               text=True, check=True, timeout=60).stdout)
        assert len(from_host1["killed"]) == 1 and from_host1["host"].endswith("h1")
        assert sleeper.wait(timeout=30) != 0 and not _on_host(hosts, 1, token)
    finally:
        if sleeper.poll() is None:
            os.killpg(sleeper.pid, signal.SIGKILL)


def _on_host(hosts: dict, node: int, token: str) -> bool:
    namespace = _holder_namespace(hosts["DLSCALE_NETNS_PREFIX"], node)
    for entry in Path("/proc").iterdir():
        try:
            if f"DLSCALE_RUN_TOKEN={token}".encode() in (entry / "environ").read_bytes().split(b"\0") \
                    and os.readlink(entry / "ns" / "pid") == namespace:
                return True
        except OSError:
            continue
    return False
