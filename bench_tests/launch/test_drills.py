"""Failure drills, timed. test_failures.py checks that a crashing, killed or hung rank fails its cell;
these measure how long detection and clean-up take, interrupt a whole suite with Ctrl-C, and start
cells on nodes that do not answer. Leftovers are found by scanning /proc, never by exit codes.

Each drill prints one "[drill]" line with its timings (shown without -s) and records them as
junit properties. Times are wall-clock seconds on this shared 2-core machine.
"""
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

import harness.launch.runner
from harness.launch.launchers import SrunLauncher
from harness.launch.procs import processes_with_token
from harness.launch.runner import RunLimits, run_cell
from harness.rank.cell import Cell
from harness.rank.faults import Fault
from harness.rank.frameworks import FRAMEWORKS, has_servers
from harness.rank.runtime import unavailable
from harness.rank.spec import RankOptions
from harness.store.history import read as read_history

from ..components import framework_component, needs
from ..workloads import SCALING_TEST, TEST_MODEL, TINY
from .test_two_hosts import SUBNET, TwoHostTorchrun, hosts  # noqa: F401 - hosts is a fixture

pytestmark = pytest.mark.launch
REPO = Path(__file__).resolve().parents[2]
CELL = Cell(framework="ddp", loader="synthetic", model=TEST_MODEL, ranks=2)


def report(request, drill: str, launcher: str, **timings: float | str) -> None:
    """One line per drill on the terminal, past output capture, and the same as junit properties."""
    words = "  ".join(f"{name.replace('_', ' ')} {value:.1f} s" if isinstance(value, float) else f"{name} {value}"
                      for name, value in timings.items())
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print(f"\n[drill] {drill:<28} {launcher:<16} {words}", flush=True)
    for name, value in timings.items():
        request.node.user_properties.append((f"{drill}:{launcher}:{name}", value))


def pids_with(needle: bytes, where: str = "environ") -> list[int]:
    """Processes whose environ (or cmdline) holds ``needle``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if needle in (entry / where).read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


class Sampler:
    """Calls ``sample(now)`` ten times a second while it is entered, on a thread of its own."""

    def __init__(self):
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _run(self):
        while not self._stop.is_set():
            self.sample(time.time())
            self._stop.wait(0.1)

    def sample(self, now: float) -> None:
        raise NotImplementedError


class Watch(Sampler):
    """Samples which processes of one cell are alive (by the cell's spec path on their command
    line) and which rank each worker is; and when the runner decided the cell was over (its first
    SIGTERM to the launcher, or its orphan sweep)."""

    def __init__(self, spec_path: Path, monkeypatch):
        super().__init__()
        self.needle = str(spec_path).encode()
        self.seen: dict[int, dict] = {}
        self.decided: float | None = None
        for name in ("_terminate", "kill_processes_with_token"):
            original = getattr(harness.launch.runner, name)
            monkeypatch.setattr(harness.launch.runner, name, self._marking(original))

    def _marking(self, function):
        def marked(*args, **kwargs):
            self.decided = self.decided or time.time()
            return function(*args, **kwargs)
        return marked

    def sample(self, now: float) -> None:
        for pid in pids_with(self.needle, "cmdline"):
            entry = self.seen.setdefault(pid, {"first": now, "rank": _rank_of(pid)})
            entry["last"] = now

    def worker_last_seen(self, rank: int) -> float:
        return max(e["last"] for e in self.seen.values() if e["rank"] == rank)

    def all_gone(self) -> float:
        return max(e["last"] for e in self.seen.values()) + 0.1


def _rank_of(pid: int) -> int | None:
    """A worker's rank from its environment (torchrun's RANK, Slurm's SLURM_PROCID); None for the
    launcher processes themselves."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        items = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        environ = dict(item.split(b"=", 1) for item in items if b"=" in item)
    except OSError:
        return None
    if b"harness.rank.worker" not in cmdline or b"torch.distributed.run" in cmdline or cmdline.startswith(b"srun"):
        return None
    value = environ.get(b"RANK") or environ.get(b"SLURM_PROCID")
    return int(value) if value is not None else None


def last_progress(outdir: Path) -> float:
    """The last heartbeat any rank wrote (ranks write at most once a second)."""
    return max(json.loads(p.read_text())["time"] for p in outdir.glob("progress-*.json"))


# -- (a) killed and hung ranks: time to detect and to clean up -----------------------------------

@pytest.mark.parametrize("launcher", ["srun", "torchrun"], indirect=True)
@pytest.mark.parametrize("fault", ["exit", "hang"])
def test_time_to_detect_and_clean_up_a_failed_rank(launcher, fault, tmp_path, monkeypatch, request):
    # The heartbeat also covers start-up (imports, model, rendezvous) on this shared 2-core machine.
    heartbeat = 20.0 if fault == "hang" else 120.0
    fault_spec = Fault(rank=0 if fault == "exit" else 1, kind=fault, at_step=2)
    for _ in range(3):
        with Watch(tmp_path / CELL.id / "spec.json", monkeypatch) as watch:
            run = run_cell(CELL, TINY, launcher, workdir=tmp_path, limits=RunLimits(heartbeat_s=heartbeat),
                           options=RankOptions(fault=fault_spec))
            returned = time.time()
            time.sleep(0.3)
        if not queued_too_long(run):
            break
    else:
        pytest.skip("the shared Slurm cluster kept the cell queued past the heartbeat three times")
    assert run.status == ("failed" if fault == "exit" else "hung"), run.error
    assert list((tmp_path / CELL.id).glob("progress-*.json")), run.error
    assert processes_with_token(run.token) == [] and pids_with(run.token.encode()) == []
    # A killed rank's fault is the moment its process vanished; a hang's is its last heartbeat.
    struck = watch.worker_last_seen(0) if fault == "exit" else last_progress(tmp_path / CELL.id)
    gone = watch.all_gone()
    report(request, f"{'killed' if fault == 'exit' else 'hung'} rank", launcher.name,
           fault_to_runner_decided=watch.decided - struck, fault_to_all_gone=gone - struck,
           fault_to_returned=returned - struck, runner_clean_up=returned - watch.decided,
           orphans_swept=len(run.orphans_killed))
    if fault == "exit":
        assert watch.decided - struck < 15, "a killed rank took too long to notice"
    else:
        assert heartbeat - 1.5 < watch.decided - struck < heartbeat + 5, "a hang was stopped at the wrong time"
        # where each rank stood, from its own dump: the hung one in the fault, its peer waiting for it
        silent = f"reported no progress for {heartbeat / 2:g} s"
        assert "in strike" in stood_at(run.error, "rank1", silent), run.error
        assert "in strike" not in stood_at(run.error, "rank0", silent), run.error
    assert gone <= returned + 0.2 and returned - watch.decided < 20


@pytest.mark.parametrize("launcher", ["srun"], indirect=True)
@pytest.mark.parametrize("framework", [name for name in FRAMEWORKS.names() if FRAMEWORKS.entry(name).runtime != "torch"])
def test_a_killed_rank_of_another_runtime_fails_the_cell_and_leaves_nothing(launcher, framework, tmp_path):
    """TensorFlow's gRPC servers, MXNet's scheduler and parameter server (rank 0's children): killing
    rank 1 mid-run fails the cell, names the rank, and every process of the launch is gone."""
    entry = FRAMEWORKS.entry(framework)
    needs(framework_component(framework), unavailable(entry.runtime, entry))
    cell = Cell(framework=framework, loader="synthetic", model=TEST_MODEL, ranks=2)
    run = run_cell(cell, TINY.replace(steps=20), launcher, workdir=tmp_path, limits=RunLimits(heartbeat_s=60),
                   options=RankOptions(fault=Fault(rank=1, kind="exit", at_step=2)))
    assert run.status in ("failed", "hung"), run.error
    # rank 1 is named: by its error report, or among the ranks srun's kill-on-bad-exit left silent
    assert re.search(r"rank1 |rank\(s\) (\d+, )*1\b", run.error), run.error
    assert processes_with_token(run.token) == [] and pids_with(run.token.encode()) == []


@pytest.mark.parametrize("launcher", ["srun"], indirect=True)
@pytest.mark.parametrize("framework", [name for name in FRAMEWORKS.names() if has_servers(name)])
def test_a_killed_parameter_server_fails_the_cell_names_it_and_leaves_nothing(launcher, framework, tmp_path, request,
                                                                            monkeypatch):
    """The server (rank 2, beside workers 0 and 1) dies at its second timed update: the workers'
    next push finds no server, the cell fails before the heartbeat timeout, the error names the
    server, and every process of the launch is gone."""
    cell = Cell(framework=framework, loader="synthetic", model=TEST_MODEL, ranks=3)
    heartbeat = 60
    with Watch(tmp_path / cell.id / "spec.json", monkeypatch) as watch:
        run = run_cell(cell, TINY.replace(steps=20), launcher, workdir=tmp_path,
                       limits=RunLimits(heartbeat_s=heartbeat),
                       options=RankOptions(fault=Fault(rank=2, kind="exit", at_step=2)))
        returned = time.time()
        time.sleep(0.3)
    if queued_too_long(run):
        pytest.skip("the cell waited in the Slurm queue past the heartbeat: not the drill")
    assert run.status == "failed", run.error
    assert re.search(r"parameter server ps0 \(rank 2\)|rank\(s\) (\d+, )*2\b", run.error), run.error
    assert processes_with_token(run.token) == [] and pids_with(run.token.encode()) == []
    struck = watch.worker_last_seen(2)
    report(request, "killed parameter server", f"{launcher.name} {framework}",
           server_killed_to_runner_decided=watch.decided - struck, runner_clean_up=returned - watch.decided)
    assert watch.decided - struck < heartbeat, "a dead server was noticed only by the heartbeat"


def stood_at(error: str, label: str, said: str) -> str:
    """The frames the runner's error shows for ``label`` under a heading saying ``said``."""
    blocks = re.split(r"\n(?=\S)", error)
    found = [block for block in blocks if block.startswith(f"{label} {said}")]
    assert found, f"no '{label} {said}' in:\n{error}"
    return found[0]


def queued_too_long(run) -> bool:
    """Other users' jobs share this one-node cluster: a cell that waited in the queue past the
    heartbeat counts as hung before any rank started. That is not the drill: run it again."""
    return run.status == "hung" and "never reported" in run.error and "queued and waiting" in run.error


# -- (b) Ctrl-C of pytest in the middle of the scaling suite --------------------------------------

SECOND_PRESS_DELAYS = (0.0, 0.1, 0.3, 0.5, 1.0, 2.0, 4.0)
"""Seconds from the first Ctrl-C to the second: they land in the running cell's clean-up, in pytest's
handling of the first interrupt, in the baseline update, in the summary, or after the exit."""
CI_DELAYS = (0.0, 0.5, 2.0)
"""CI's share of the sweep, one point in each stretch of it; ci/test --full sweeps them all."""


@pytest.mark.parametrize("second_press_after", [
    pytest.param(None, id="ctrl-c"),
    *(pytest.param(delay, id=f"ctrl-c-twice-{delay:g}s", marks=() if delay in CI_DELAYS else pytest.mark.full)
      for delay in SECOND_PRESS_DELAYS)])
def test_ctrl_c_mid_suite_keeps_finished_results_and_leaves_nothing(tmp_path, request, second_press_after):
    """Ctrl-C once, or twice with the second press swept across the end of the session, once the
    first cell finished and the second has started. Wherever the second press lands, the session
    exits INTERRUPTED without a traceback, keeps the finished cell in the results file, the history
    and the baselines, leaves no temporary file and no process behind."""
    shutil.copy(SCALING_TEST, tmp_path / "test_scaling.py")
    mark = uuid.uuid4().hex
    results, baselines, history = tmp_path / "r.json", tmp_path / "baselines", tmp_path / "history"
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-m", "scaling",
               "--system", "drillsys", "--baselines-dir", str(baselines), "--launcher", "torchrun",
               "--frameworks", "ddp", "--loaders", "synthetic", "--models", TEST_MODEL, "--gpus", "1,2",
               "--results-json", str(results), "--history-dir", str(history),
               "--update-baselines", "--widest-baseline", "inf", "--measure-budget", "0",
               "--image-size", str(TINY.image_size), "--batch-size", str(TINY.batch_size), "--steps", "60",
               "--warmup-steps", str(TINY.warmup_steps), "--num-workers", str(TINY.num_workers)]
    env = dict(os.environ, DLSCALE_DRILL_MARK=mark,
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    first, second_id = (f"ddp-synthetic-{TEST_MODEL}-g{ranks}" for ranks in (1, 2))
    second = tmp_path / "results" / "latest" / "cells" / second_id
    with open(tmp_path / "pytest.log", "wb") as log:
        # Its own session, like a terminal's foreground job: Ctrl-C goes to the whole process group.
        suite = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True, preexec_fn=_takes_ctrl_c)
    try:
        deadline = time.monotonic() + 300
        while not (results.exists() and list(second.glob("progress-*.json"))):
            assert suite.poll() is None, f"the suite ended early:\n{(tmp_path / 'pytest.log').read_text()[-3000:]}"
            assert time.monotonic() < deadline, "the first cell did not finish in 300 s"
            time.sleep(0.2)
        delays = [0.0] if second_press_after is None else [0.0, second_press_after]
        interrupted, exited, sent = _press_ctrl_c(suite, delays)
    finally:
        if suite.poll() is None:
            os.killpg(suite.pid, signal.SIGKILL)
    gone = _wait_until_none(mark.encode(), timeout_s=30)
    log = (tmp_path / "pytest.log").read_text()
    drill = "Ctrl-C mid-suite" + ("" if second_press_after is None else f" (twice, +{second_press_after:g} s)")
    landed = _where_it_landed(log, sent)
    report(request, drill, "torchrun", interrupt_to_pytest_exit=exited - interrupted,
           interrupt_to_all_gone=max(gone, exited) - interrupted, second_press=landed)
    if second_press_after is None:
        assert sent == 1 and landed == "none", log[-3000:]
    elif second_press_after == 0:  # Python runs a signal's handler once for presses it had no time between
        assert sent == 2 and landed in ("before-the-summary", "counted-once"), (landed, log[-3000:])
    elif second_press_after <= 0.5:  # the premise: the session is still ending the cell by then
        assert sent == 2 and landed == "before-the-summary", (landed, log[-3000:])
    else:  # wherever it fell, the log shows it: noticed, or sent once the session stopped counting
        assert landed != "lost", log[-3000:]

    assert pids_with(mark.encode()) == [], "worker processes outlived the interrupted suite"
    assert suite.returncode == pytest.ExitCode.INTERRUPTED, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
    assert "dlscale: interrupted (SIGINT): ending the running cell" in log, log[-3000:]
    assert f"kept 1 finished cell(s) ({first})" in log, log[-3000:]
    kept = json.loads(results.read_text())
    assert [cell["cell"] for cell in kept["cells"]] == [first]
    assert kept["cells"][0]["status"] == "ok" and len(kept["cells"][0]["records"]) == 1
    assert set(json.loads((baselines / "drillsys.json").read_text())["cells"]) == {first}
    rows, problems = read_history(history / "drillsys.jsonl")  # appended line by line: none torn
    assert problems == [] and [(row["cell"], row["kind"]) for row in rows] == [(first, "night"), (first, "accepted")]
    assert [path for path in tmp_path.rglob("*.tmp")] == [], "a half-written file was left"


def test_ctrl_c_mid_a_b_keeps_the_pairs_measured(tmp_path):
    """Ctrl-C once while an A/B (--against) launches its third pair: the session exits INTERRUPTED
    without a traceback, the two pairs measured are judged and kept in the results file (the launch
    in flight left out), and no process is left behind."""
    shutil.copy(SCALING_TEST, tmp_path / "test_scaling.py")
    mark = uuid.uuid4().hex
    results = tmp_path / "r.json"
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-m", "scaling",
               "--system", "drillsys", "--baselines-dir", str(tmp_path / "baselines"), "--launcher", "torchrun",
               "--frameworks", "ddp", "--loaders", "synthetic", "--models", TEST_MODEL, "--gpus", "1",
               "--against", "env:DLSCALE_DRILL_SIDE=reference", "--results-json", str(results),
               "--image-size", str(TINY.image_size), "--batch-size", str(TINY.batch_size), "--steps", "20",
               "--warmup-steps", str(TINY.warmup_steps), "--num-workers", str(TINY.num_workers)]
    env = dict(os.environ, DLSCALE_DRILL_MARK=mark,
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    log_path = tmp_path / "pytest.log"
    with open(log_path, "wb") as log:
        suite = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True, preexec_fn=_takes_ctrl_c)
    finished = set()  # (side, mtime) of each launch's rank record: one per launch that finished
    try:
        deadline = time.monotonic() + 300
        while len(finished) < 4:
            assert suite.poll() is None, f"the suite ended early:\n{log_path.read_text()[-3000:]}"
            assert time.monotonic() < deadline, "two pairs did not finish in 300 s"
            for record in tmp_path.glob("results/latest/cells/*/*/record-rank0.json"):
                with contextlib.suppress(FileNotFoundError):
                    finished.add((record.parent.parent.name, record.stat().st_mtime_ns))
            time.sleep(0.1)
        time.sleep(3)  # past the end of the 4th launch, into the 5th (about 10 s here)
        _press_ctrl_c(suite, [0.0])
    finally:
        if suite.poll() is None:
            os.killpg(suite.pid, signal.SIGKILL)
    _wait_until_none(mark.encode(), timeout_s=30)
    log = log_path.read_text()
    assert pids_with(mark.encode()) == [], "worker processes outlived the interrupted A/B"
    assert suite.returncode == pytest.ExitCode.INTERRUPTED, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
    kept = json.loads(results.read_text())["paired_cells"]
    # a pair left out for outside work (a busy CI machine) is kept apart from the judged ones
    measured = [(cell["interrupted"], len(cell["pairs"]) + len(cell["left_out"]), cell["launches"]) for cell in kept]
    assert measured == [(True, 2, 4)], log[-3000:]
    assert kept[0]["verdict"] == "inconclusive"  # two pairs cannot tell
    assert "interrupted after 2 pairs: judged on those" in log
    assert "kept 1 finished cell(s) (ddp-synthetic-resnet20-g1 (A/B: 2 pairs, inconclusive))" in log, log[-3000:]


def _where_it_landed(log: str, sent: int) -> str:
    """Where the second press fell, from where its notice sits in the session's output: ``none``
    (not sent: the session had exited), ``counted-once`` (sent, but the session's last line counts
    one press: CPython ran the handler once for two presses close together, or the press came after
    the session stopped counting), or ``lost`` (sent, neither noticed nor counted)."""
    hurry = log.find("dlscale: hurrying")
    if hurry < 0:
        if sent < 2:
            return "none"
        return "counted-once" if re.search(r"interrupted by SIG\w+ \(1 press\)", log) else "lost"
    summary = log.find("dlscale summary")
    return "before-the-summary" if summary < 0 or hurry < summary else "in-the-summary"


STUBBORN_CELL = """
import sys
from pathlib import Path
from harness.launch.launchers import Launcher
from harness.launch.runner import run_cell
from harness.rank.cell import Cell

class Stubborn(Launcher):
    # A job whose processes ignore SIGTERM (a rank saving a checkpoint, a process stuck in I/O):
    # only the runner's SIGKILL and its token sweep end it.
    name = executable = "stubborn"
    def command(self, request):
        return ["bash", "-c", "trap '' TERM INT; sleep 300 & wait; wait"]

print("started", flush=True)
run_cell(Cell(framework="ddp", loader="synthetic", model="resnet50", ranks=1), None, Stubborn(),
         workdir=Path(sys.argv[1]))
"""


def test_a_second_ctrl_c_does_not_cut_the_clean_up_short(tmp_path, request):
    """Ctrl-C, then Ctrl-C again while the runner waits for the launcher to honour the first: the
    runner must still SIGKILL the launcher and sweep the cell's processes before it gives up."""
    mark = uuid.uuid4().hex
    env = dict(os.environ, DLSCALE_DRILL_MARK=mark, PYTHONPATH=str(REPO))
    script = subprocess.Popen([sys.executable, "-c", STUBBORN_CELL, str(tmp_path)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_takes_ctrl_c)
    try:
        assert script.stdout.readline() == b"started\n"
        _wait_until(lambda: len(pids_with(mark.encode())) >= 3, timeout_s=30)  # python, bash, sleep
        interrupted, exited, sent = _press_ctrl_c(script, [0.0, 1.0])
    finally:
        if script.poll() is None:
            os.killpg(script.pid, signal.SIGKILL)
    left = pids_with(mark.encode())
    for pid in left:  # do not leave them to the next test
        os.kill(pid, signal.SIGKILL)
    report(request, "Ctrl-C twice, stubborn job", "(bash)", interrupt_to_exit=exited - interrupted,
           left_behind=len(left))
    assert sent == 2, "the runner was gone before the second press: the drill did not happen"
    assert left == [], "processes of the cell outlived the interrupted runner"


def _takes_ctrl_c() -> None:
    """In the child before exec: SIGINT back to its default, as a terminal's foreground job has it.
    A job started in the background of a non-interactive shell (``cmd &``) inherits SIGINT
    ignored, Python then keeps it ignored, and the drill's Ctrl-C would never arrive."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _press_ctrl_c(process: subprocess.Popen, delays: list[float]) -> tuple[float, float, int]:
    """Ctrl-C to ``process``'s session at each of ``delays`` seconds after the first press, unless
    it has exited by then; when the first was sent, when it exited, and how many were sent."""
    interrupted = time.time()
    sent = 0
    for delay in delays:
        try:
            process.wait(timeout=max(0.0, interrupted + delay - time.time()))
            break
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGINT)
            sent += 1
    process.wait(timeout=120)
    return interrupted, time.time(), sent


def _wait_until(condition, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.1)


def _wait_until_none(needle: bytes, timeout_s: float) -> float:
    deadline = time.monotonic() + timeout_s
    while pids_with(needle) and time.monotonic() < deadline:
        time.sleep(0.1)
    return time.time()


# -- (c) nodes that do not answer at launch ---------------------------------------------------------

class SrunOnNodes(SrunLauncher):
    """srun asked for named nodes (``--nodelist``)."""

    def __init__(self, nodelist: str):
        super().__init__()
        self.nodelist = nodelist

    def command(self, request):
        command = super().command(request)
        return [command[0], f"--nodelist={self.nodelist}", *command[1:]]


@pytest.mark.parametrize("launcher", ["srun"], indirect=True)
def test_srun_on_a_node_that_does_not_exist_fails_at_once_with_slurms_reason(launcher, tmp_path, request):
    started = time.time()
    run = run_cell(CELL, TINY, SrunOnNodes("dlscale-no-such-node"), workdir=tmp_path, limits=RunLimits(heartbeat_s=60))
    took = time.time() - started
    report(request, "srun to unknown node", "srun", launch_to_failed=took)
    assert run.status == "failed"
    assert "Invalid node name specified" in run.error and "never" not in run.error
    assert took < 30
    assert processes_with_token(run.token) == []


@pytest.mark.parametrize("master, what", [(f"{SUBNET}.77", "no host at the address"),
                                          (f"{SUBNET}.1", "host up, no agent listening")])
def test_torchrun_rendezvous_with_a_master_that_does_not_answer_fails(hosts, tmp_path, request, master,  # noqa: F811
                                                                      what):
    """Only node 1's agent starts; its master is unreachable. torchrun's own rendezvous timeout
    (``--rdzv-conf timeout=``, 600 s by default for a static rendezvous) ends it with an error."""
    launcher = TwoHostTorchrun(hosts, node_ranks=(1,), master_addr=master, rendezvous_timeout_s=5)
    started = time.time()
    run = run_cell(CELL, TINY, launcher, workdir=tmp_path, limits=RunLimits(heartbeat_s=120))
    took = time.time() - started
    report(request, f"unreachable master: {what}", "torchrun (2 hosts)", launch_to_failed=took)
    assert run.status == "failed", run.error
    # torchrun's TCPStore client names the address it could not reach, or says it timed out.
    assert any(words in run.error for words in ("failed to connect", "timed out", "Timeout")), run.error
    assert took < 60
    assert processes_with_token(run.token) == []


def test_a_launch_that_never_starts_a_rank_is_ended_by_the_heartbeat(hosts, tmp_path, request):  # noqa: F811
    """Without an agent timeout (torchrun's default waits 600 s), the runner's heartbeat bounds it."""
    launcher = TwoHostTorchrun(hosts, node_ranks=(1,), master_addr=f"{SUBNET}.77", rendezvous_timeout_s=600)
    started = time.time()
    run = run_cell(CELL, TINY, launcher, workdir=tmp_path, limits=RunLimits(heartbeat_s=8))
    took = time.time() - started
    report(request, "unreachable master, no timeout", "torchrun (2 hosts)", launch_to_hung=took)
    assert run.status == "hung"
    assert "rank(s) 0, 1 never reported" in run.error
    assert took < 30
    assert processes_with_token(run.token) == []


# -- (d) the local Slurm cluster after its daemons died in the middle of a job ---------------------

SLURM_STATE = Path(os.environ.get("DLSCALE_SLURM_STATE", "/var/lib/dlscale-slurm"))


def test_local_slurm_comes_back_ready_after_its_daemons_died_mid_job(request):
    """A machine restart, or killed daemons, leave a running job in slurmctld's saved state. The set-up
    must bring back a cluster that runs jobs at once, not one whose node stays held by a recovered
    job that has no processes left (until InactiveLimit cancels it, a minute or more later)."""
    started_by_setup = SLURM_STATE / "started"
    ours = os.geteuid() == 0 and "slurmctld" in (started_by_setup.read_text() if started_by_setup.exists() else "")
    needs("local-slurm", None if ours else "needs root and the local cluster that ci/slurm/start.sh started")
    name = f"dlscale-drill-{uuid.uuid4().hex[:8]}"
    job = subprocess.Popen(["srun", "-n", "1", f"--job-name={name}", "sleep", "300"], start_new_session=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_until(lambda: _job_state(name) == "RUNNING", timeout_s=60)
        # RUNNING is the allocation; the step's slurmstepd and its task may still be on their way,
        # and one forked after the scan below would outlive the kill.
        _wait_until(lambda: pids_with(f"SLURM_JOB_NAME={name}".encode()), timeout_s=60)
        job_id = subprocess.run(["squeue", "-h", "-n", name, "-o", "%i"], capture_output=True, text=True).stdout.strip()
        doomed = [int((SLURM_STATE / f"{daemon}.pid").read_text()) for daemon in ("slurmctld", "slurmd")]
        doomed += pids_with(f"[{job_id}.".encode(), "cmdline") + pids_with(f"SLURM_JOB_NAME={name}".encode())
        for pid in doomed:
            os.kill(pid, signal.SIGKILL)
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    restarted = time.time()
    start = subprocess.run([str(REPO / "ci" / "slurm" / "start.sh")], capture_output=True, text=True, timeout=180)
    ready = time.time()
    report(request, "Slurm daemons killed mid-job", "srun", restart_to_ready=ready - restarted)
    assert start.returncode == 0, start.stderr[-3000:]
    assert ready - restarted < 30, "the restarted cluster kept its node for a job with no processes"
    assert _job_state(name) == "" and pids_with(f"SLURM_JOB_NAME={name}".encode()) == []


def _job_state(name: str) -> str:
    return subprocess.run(["squeue", "-h", "-n", name, "-o", "%T"], capture_output=True, text=True).stdout.strip()
