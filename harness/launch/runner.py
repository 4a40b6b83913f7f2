"""Run one cell as a real multi-process job: write its spec, start the launcher, watch the ranks'
heartbeats, enforce timeouts, end every process it started, and collect the ranks' records."""
from __future__ import annotations

import dataclasses
import functools
import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Callable

from harness import HARNESS_SOURCE
from harness.common.interrupts import INTERRUPTS
from harness.common.jsonio import remove_orphaned_temporaries, write_json_atomic
from harness.config.cells import AccuracyCell
from harness.launch.launchers import Launcher, LaunchRequest, with_harness_importable
from harness.launch.procs import TOKEN_VARIABLE, kill_processes_with_token
from harness.rank.cell import Cell
from harness.rank.frameworks import FRAMEWORKS, has_servers
from harness.rank.rankenv import launch_port_block
from harness.rank.runtime import rank_interpreter
from harness.rank.spec import RankOptions, WorkerSpec, option_names_of
from harness.rank.stacks import describe as describe_stacks
from harness.rank.stacks import where_ranks_stood
from harness.rank.workload import Workload

StatusLineFn = Callable[[str], None]
"""Called with a one-line status of the launch each time it changes."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RunLimits:
    timeout_s: float = 900.0
    """Whole cell, start-up included."""
    heartbeat_s: float = 180.0
    """Longest time without any rank reporting progress before the cell counts as hung."""
    error_grace_s: float = 10.0
    """Time the launcher gets to end the job itself after a rank reported an error."""
    terminate_grace_s: float = 10.0

    @property
    def silent_dump_s(self) -> float:
        """A rank silent this long dumps its stacks: half the heartbeat, so every rank of a hung
        cell has said where it stood before the runner ends it."""
        return self.heartbeat_s / 2


@dataclasses.dataclass(kw_only=True, slots=True)
class CellRun:
    cell: Cell
    launcher: str
    command: list[str]
    status: str
    """"ok", "failed", "timeout" or "hung"."""
    records: list[dict]
    """The training ranks' records."""
    error: str | None
    wall_s: float
    log_path: Path
    token: str
    """Carried in every process's environment (``DLSCALE_RUN_TOKEN``) to find leftovers by."""
    orphans_killed: list[int]
    """Processes of the launch still alive on this node after the launcher ended, then killed."""
    orphans_elsewhere: dict[str, list[int]] = dataclasses.field(default_factory=dict)
    """The same on the launch's other nodes (launchers that reach them), by node."""
    server_records: list[dict] = dataclasses.field(default_factory=list)
    """The serving ranks' records (parameter servers: ``"role": "server"``)."""
    started_epoch: float | None = None
    """When the launcher was started (epoch seconds): the ranks' timelines are read against it."""
    ended_epoch: float | None = None
    """When the runner saw the launch end (epoch seconds): its launcher exited, or the runner stopped
    it for its ranks' error reports, a timeout or silence. Launches watched together each have
    their own, where ``wall_s`` runs until every one of them ended and was cleaned up."""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _read_all(directory: Path, pattern: str) -> list[dict]:
    found = []
    for path in sorted(directory.glob(pattern)):
        try:
            found.append(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError):
            continue  # written atomically, so only a vanished file lands here
    return found


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _progress_line(cell: Cell, progress: list[dict]) -> str:
    if not progress:
        return f"{cell.id}: starting {cell.ranks} rank(s)"
    slowest = min(progress, key=lambda p: (p["phase"] == "timed", p["step"]))
    return f"{cell.id}: {len(progress)}/{cell.ranks} ranks reporting, slowest at {slowest['phase']} step {slowest['step']}/{slowest['of']}"


def _terminate(process: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM the launcher's process group (srun and mpirun forward it to their ranks), then SIGKILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=grace_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _kill_at_once(process: subprocess.Popen, token: str) -> None:
    """A second Ctrl-C: no grace for the launcher, SIGKILL for everything the cell started."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    kill_processes_with_token(token, timeout_s=2.0)


def _end_process(launch: _Launch, limits: RunLimits) -> None:
    """Stop the launcher (and through it its ranks) where it still runs."""
    if launch.process.poll() is None:
        _terminate(launch.process, limits.terminate_grace_s)


def _end(launch: _Launch, limits: RunLimits) -> tuple[list[int], dict[str, list[int]], str | None]:
    """End the launch and everything it started, on this node and (through the launcher) on the
    others, and remove what its killed ranks left half-written in its directory: the pids the sweeps
    still found alive here and elsewhere, and why the other nodes could not be checked, if so."""
    _end_process(launch, limits)
    orphans = kill_processes_with_token(launch.token)
    try:
        elsewhere, error = launch.launcher.cleanup(launch.request), None
    except (OSError, RuntimeError, subprocess.SubprocessError) as failure:
        elsewhere, error = {}, f"clean-up of the other nodes: {failure}"
    remove_orphaned_temporaries(launch.outdir)  # a rank killed mid-write cannot remove its temporary file
    return orphans, elsewhere, error


def _describe_errors(errors: list[dict]) -> str:
    parts = []
    for error in sorted(errors, key=lambda e: str(e.get("rank"))):
        parts.append(f"{error.get('rank')} on {error.get('host')} (pid {error.get('pid')}): {error.get('error')}\n"
                     f"{error.get('traceback', '').rstrip()}")
    return "\n\n".join(parts)


@functools.lru_cache(maxsize=64)
def worker_options(source: Path) -> frozenset[str] | None:
    """The rank options the worker in ``source`` accepts; None for this checkout's (all of them)."""
    if source.resolve() == HARNESS_SOURCE.parent.resolve():
        return None
    try:
        return option_names_of((source / "harness" / "rank" / "spec.py").read_text())
    except (OSError, SyntaxError):
        return None


@dataclasses.dataclass(kw_only=True)
class _Launch:
    """One launch between its start and its end: what :func:`run_cell` and :func:`run_cells_together` watch."""
    cell: Cell | AccuracyCell
    launcher: Launcher
    request: LaunchRequest
    command: list[str]
    env: dict[str, str]
    outdir: Path
    log_path: Path
    token: str
    source: Path
    python: str | None
    process: subprocess.Popen | None = None
    started: float = 0.0
    started_epoch: float = 0.0
    outcome: tuple[str, str | None] | None = None
    """The status and, where the runner stopped it, why; None while it runs."""
    ended_epoch: float | None = None
    """When the outcome was seen."""
    last_beat: float = dataclasses.field(default_factory=time.time)
    last_line: str = ""
    first_error_at: float | None = None


def _prepare(cell: Cell | AccuracyCell, workload: Workload | None, launcher: Launcher, *, workdir: Path,
             limits: RunLimits, options: RankOptions, master_addr: str | None, source: Path,
             python: str | None) -> _Launch:
    """Write the launch's spec and make its command, ready to start."""
    outdir = workdir / cell.id
    if outdir.exists():
        shutil.rmtree(outdir)
    outdir.mkdir(parents=True)
    spec = WorkerSpec(cell=cell.to_spec() if isinstance(cell, Cell) else dataclasses.asdict(cell),
                      workload=dataclasses.asdict(workload) if workload else None,
                      output_dir=str(outdir.resolve()),
                      launch_environment=tuple(sorted({*launcher.environment, *launcher.unset})),
                      options=options, silent_dump_s=limits.silent_dump_s)
    spec_path = outdir / "spec.json"
    write_json_atomic(spec_path, spec.to_json(worker_options(source)))

    token = uuid.uuid4().hex
    master_addr = master_addr or launcher.rendezvous_host()
    request = LaunchRequest(ranks=cell.ranks, module="harness.rank.worker", args=(str(spec_path.resolve()),),
                            job_name=f"dlscale-{cell.id}-{token[:8]}", master_port=launch_port_block(cell.ranks),
                            master_addr=master_addr, token=token, cores_per_rank=options.cores_per_rank,
                            share_cores=has_servers(cell.framework),
                            rank_python=rank_interpreter(FRAMEWORKS.entry(cell.framework).runtime) or python)
    env = dict(os.environ, PYTHONUNBUFFERED="1", MASTER_PORT=str(request.master_port), **{TOKEN_VARIABLE: token})
    if master_addr:
        env["MASTER_ADDR"] = master_addr
    else:
        env.pop("MASTER_ADDR", None)
    return _Launch(cell=cell, launcher=launcher, request=request, command=launcher.command(request),
                   env=with_harness_importable(env, source), outdir=outdir, log_path=outdir / "launcher.log",
                   token=token, source=source, python=python)


def _spawn(launch: _Launch) -> None:
    launch.started, launch.started_epoch = time.monotonic(), time.time()
    with open(launch.log_path, "wb") as log:
        launch.process = subprocess.Popen(launch.command, env=launch.env, stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True)


def run_cell(cell: Cell | AccuracyCell, workload: Workload | None, launcher: Launcher, *, workdir: Path,
             limits: RunLimits = RunLimits(), options: RankOptions = RankOptions(), master_addr: str | None = None,
             on_progress: StatusLineFn | None = None, source: Path = HARNESS_SOURCE.parent,
             python: str | None = None) -> CellRun:
    """Run ``cell`` through ``launcher`` with its files under ``workdir/<cell id>``; ``workload`` is
    None for the accuracy task (``options.accuracy``). The ranks run the harness in ``source``:
    this checkout's, or a reference environment's (harness.machine.references); ``python`` is the
    interpreter of a reference's package set, where the cell's runtime is this interpreter's."""
    launch = _prepare(cell, workload, launcher, workdir=workdir, limits=limits, options=options,
                      master_addr=master_addr, source=source, python=python)
    return _run_together([launch], limits, [on_progress])[0]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Together:
    """One of the launches :func:`run_cells_together` starts at once: :func:`run_cell`'s arguments."""
    cell: Cell
    workload: Workload
    launcher: Launcher
    workdir: Path
    options: RankOptions
    source: Path = HARNESS_SOURCE.parent
    python: str | None = None
    on_progress: StatusLineFn | None = None


def run_cells_together(launches: list[Together], limits: RunLimits = RunLimits()) -> list[CellRun]:
    """Start every launch at once and watch them together (a duet's two sides); each ends on its own
    terms, as :func:`run_cell`'s would. A second Ctrl-C ends them all at once."""
    prepared = [_prepare(item.cell, item.workload, item.launcher, workdir=item.workdir, limits=limits,
                         options=item.options, master_addr=None, source=item.source, python=item.python)
                for item in launches]
    return _run_together(prepared, limits, [item.on_progress for item in launches])


def _run_together(launches: list[_Launch], limits: RunLimits, on_progress: list[StatusLineFn | None]) -> list[CellRun]:
    # Only INTERRUPTS.pause lets a first Ctrl-C cut this short: a launch is never left unwatched
    # between its start and its end, and its end is never cut short (see harness.common.interrupts).
    with INTERRUPTS.protect(raise_pending=False):
        try:
            for launch in launches:
                _spawn(launch)
        except BaseException:
            for launch in launches:
                if launch.process is not None:
                    _end(launch, limits)
            raise
        with INTERRUPTS.on_hurry(lambda: [_kill_at_once(launch.process, launch.token) for launch in launches]):
            try:
                _watch(launches, limits, on_progress)
            except BaseException:
                for launch in launches:
                    _end(launch, limits)
                raise
            ends = [_end(launch, limits) for launch in launches]
    return [_finish(launch, limits, *end) for launch, end in zip(launches, ends)]


def _finish(launch: _Launch, limits: RunLimits, orphans: list[int], orphans_elsewhere: dict[str, list[int]],
            cleanup_error: str | None) -> CellRun:
    """The ended launch's run: its records, and what went wrong, from the ranks' own reports."""
    wall = time.monotonic() - launch.started
    cell, outdir, process = launch.cell, launch.outdir, launch.process
    status, error = launch.outcome or ("failed", None)
    everyone = _read_all(outdir, "record-*.json")
    records = [record for record in everyone if record.get("role") != "server"]
    errors = _read_all(outdir, "error-*.json")
    problems = [error] if error else []
    if cleanup_error:
        problems.append(cleanup_error)
    if errors:
        problems.append(_describe_errors(errors))
    silent = _silent_ranks(cell, everyone, errors) if status in ("ok", "failed") else ""
    if strangers := _ran_other_code(everyone, launch.source, launch.request.rank_python if launch.python else None):
        problems.append(strangers)
    if silent:
        problems.append(f"rank(s) {silent} ended without a record or an error report (killed, or died in "
                        f"native code)")
    if status == "ok" and (errors or silent or cleanup_error or strangers or process.returncode != 0):
        status = "failed"
    if status != "ok":
        if stood := where_ranks_stood(outdir):
            problems.append(describe_stacks(stood, limits.silent_dump_s))
        problems.append(f"{launch.launcher.name} exited with status {process.returncode}; its last lines:\n"
                        f"{_tail(launch.log_path)}")
    return CellRun(cell=cell, launcher=launch.launcher.name, command=launch.command, status=status, records=records,
                   error="\n".join(problems) or None, wall_s=wall, started_epoch=launch.started_epoch,
                   ended_epoch=launch.ended_epoch,
                   log_path=launch.log_path, token=launch.token,
                   orphans_killed=orphans, orphans_elsewhere=orphans_elsewhere,
                   server_records=[record for record in everyone if record.get("role") == "server"])


def _watch(launches: list[_Launch], limits: RunLimits, on_progress: list[StatusLineFn | None]) -> None:
    """Wait for every launch to end, or for its first error report, timeout or silence to outlast
    its limit; each launch's status and, when the runner stopped it, why (``outcome``)."""
    while any(launch.outcome is None for launch in launches):
        INTERRUPTS.pause(0.5, until=lambda: any(launch.outcome is None and launch.process.poll() is not None
                                                for launch in launches))
        for launch, told in zip(launches, on_progress):
            if launch.outcome is None:
                launch.outcome = _check(launch, limits, told)
                if launch.outcome is not None:
                    launch.ended_epoch = time.time()
                    if launch.outcome[0] != "ok":
                        _end_process(launch, limits)


def _check(launch: _Launch, limits: RunLimits, on_progress: StatusLineFn | None) -> tuple[str, str | None] | None:
    """One look at a running launch: its outcome once it has one, else None."""
    if launch.process.poll() is not None:
        return "ok", None
    cell, outdir = launch.cell, launch.outdir
    progress = _read_all(outdir, "progress-*.json")
    launch.last_beat = max([launch.last_beat] + [p["time"] for p in progress])
    line = _progress_line(cell, progress)
    if on_progress and line != launch.last_line:
        on_progress(line)
        launch.last_line = line
    if list(outdir.glob("error-*.json")):
        launch.first_error_at = launch.first_error_at or time.monotonic()
        if time.monotonic() - launch.first_error_at > limits.error_grace_s:
            return "failed", None
    if time.monotonic() - launch.started > limits.timeout_s:
        return "timeout", f"cell exceeded its {limits.timeout_s:.0f} s timeout; {line}"
    if time.time() - launch.last_beat > limits.heartbeat_s:
        return "hung", (f"no progress from any rank for {limits.heartbeat_s:.0f} s (heartbeat timeout); "
                        f"least recent: {_least_recent(cell, progress)}; {line}")
    return None


def _ran_other_code(records: list[dict], source: Path, python: str | None = None) -> str:
    """Which ranks imported a harness other than ``source``'s, or ran in another interpreter than
    ``python`` where one is given (their records say which), or ''."""
    expected = str((source / "harness").resolve())
    others = sorted({(record["rank"], record["harness"]) for record in records
                     if record.get("harness") not in (None, expected)}, key=str)
    elsewhere = sorted({(record["rank"], record["python"]) for record in records
                        if python and record.get("python") not in (None, python)}, key=str)
    return "; ".join([*(f"rank {rank} ran the harness in {path}, not {expected}" for rank, path in others),
                      *(f"rank {rank} ran in {path}, not {python}" for rank, path in elsewhere)])


def _silent_ranks(cell: Cell, records: list[dict], errors: list[dict]) -> str:
    heard = {record["rank"] for record in records} | {error.get("rank") for error in errors}
    return ", ".join(str(rank) for rank in range(cell.ranks) if rank not in heard and f"rank{rank}" not in heard)


def _least_recent(cell: Cell, progress: list[dict]) -> str:
    reported = {p.get("rank"): p for p in progress}
    silent = [str(rank) for rank in range(cell.ranks) if rank not in reported]
    if silent:
        return f"rank(s) {', '.join(silent)} never reported"
    oldest = min(progress, key=lambda p: p["time"])
    return f"rank {oldest['rank']} at {oldest['phase']} step {oldest['step']}/{oldest['of']}"
