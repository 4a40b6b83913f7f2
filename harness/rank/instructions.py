"""Host instructions of a rank's training steps, counted under valgrind's callgrind
(``--count-instructions``, docs/verdicts.md "Host instructions"), on every thread of the rank.

A rank whose spec asks for it executes itself again under ``valgrind --tool=callgrind`` with
instrumentation off from the start (:func:`exec_under_callgrind`): the interpreter's start, the
imports, the set-up and the warm-up run uninstrumented, about five times slower than natively
rather than five hundred. Collection is on for every thread from the start
(``--collect-atstart=yes``): callgrind keeps it per thread and a client request toggles only the
calling thread's, so a rank that toggled its own would leave gloo's and Horovod's threads uncounted.
After the (one-step) timed window, :class:`InstructionCounting` starts the instrumentation once and
counts :data:`INSTRUCTION_STEPS` steps: each zeroed and dumped through callgrind's monitor commands,
which act on every thread (its client requests to zero and dump act on the calling thread only),
into a file per thread (``--separate-threads=yes``) whose total is that thread's count of the step;
:mod:`harness.rank.callgrind_threads` tells the threads' kinds apart (and the part of a thread
spent waiting for its peers, polling or negotiating, which counts as transport). The rank runs
one compute thread with ``PYTHONHASHSEED=0`` where the launch sets none (a second compute thread's spin-waits
and a random hash order are the counts' own noise), and oneDNN's AVX kernels (:data:`ONEDNN_ISA`):
the counts describe the paths taken under valgrind, which offers no AVX-512 either. callgrind's
client requests are macros; a few lines of C compiled before valgrind starts
(:func:`build_requests`) make them callable.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from pathlib import Path

from harness.rank import callgrind_threads

INSTRUCTION_STEPS = 2
"""Steps collected after the window; each is dumped and counted on its own."""

ONEDNN_ISA = "AVX"
"""oneDNN's kernels under callgrind, where the launch sets none: valgrind emulates its AVX2 JIT
kernels' fused multiply-adds lane by lane, so that a step of ResNet20 (batch 8, 32 px, one thread)
took 55 s under valgrind with them and 1.0 s with its AVX ones (0.04 s natively)."""

UNDER_CALLGRIND = "DLSCALE_UNDER_CALLGRIND"
"""Set (to the client-request library's path) in a rank that runs under callgrind."""

CLIENT_REQUESTS = r"""
#include <valgrind/callgrind.h>
int dlscale_running_on_valgrind(void) { return RUNNING_ON_VALGRIND; }
void dlscale_start_instrumentation(void) { CALLGRIND_START_INSTRUMENTATION; }
void dlscale_stop_instrumentation(void) { CALLGRIND_STOP_INSTRUMENTATION; }
int dlscale_monitor(const char *command) { return VALGRIND_MONITOR_COMMAND(command); }
"""

NOT_COUNTED_PROCESSES = ("a loader's worker processes (torch's DataLoader workers) run under valgrind uninstrumented: "
                         "their instructions are not counted")


class CannotCount(RuntimeError):
    """Instructions cannot be counted here (no valgrind, no C compiler, no callgrind header)."""


def missing_tools() -> str | None:
    """What this node lacks to count instructions, or None."""
    for tool in ("valgrind", "cc"):
        if shutil.which(tool) is None:
            return f"no {tool} on PATH: --count-instructions runs each rank under valgrind's callgrind " \
                   "(Debian: apt-get install valgrind gcc)"
    return None


def build_requests(directory: Path) -> Path:
    """The client-request library, compiled into ``directory``."""
    if reason := missing_tools():
        raise CannotCount(reason)
    source = directory / f"callgrind_requests-{os.getpid()}.c"  # each rank its own: they build at once
    library = source.with_suffix(".so")
    source.write_text(CLIENT_REQUESTS)
    built = subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", str(library), str(source)],
                           capture_output=True, text=True)
    if built.returncode != 0:
        raise CannotCount(f"cannot compile callgrind's client requests: {built.stderr.strip()[-500:]}")
    return library


def callgrind_command(output_dir: Path) -> list[str]:
    """valgrind's arguments for a rank writing its counts and its log into ``output_dir``."""
    return [shutil.which("valgrind") or "valgrind", "--tool=callgrind", "--collect-atstart=yes", "--instr-atstart=no",
            "--separate-threads=yes", f"--callgrind-out-file={output_dir}/callgrind-%p.out",
            f"--log-file={output_dir}/valgrind-%p.log"]


def exec_under_callgrind(argv: list[str], output_dir: Path) -> None:
    """Execute this rank again under callgrind (keeping its pid); returns where it runs under it."""
    if os.environ.get(UNDER_CALLGRIND):
        return
    library = build_requests(output_dir)
    env = {**os.environ, UNDER_CALLGRIND: str(library), "OMP_NUM_THREADS": "1"}
    env.setdefault("PYTHONHASHSEED", "0")
    env.setdefault("ONEDNN_MAX_CPU_ISA", ONEDNN_ISA)
    command = callgrind_command(output_dir)
    os.execve(command[0], [*command, sys.executable, *argv], env)


class InstructionCounting:
    """The steps after a rank's window, each between :meth:`start` and :meth:`stop`, counted as
    instructions on every thread; :meth:`result` is the record's ``instructions``."""

    steps = INSTRUCTION_STEPS

    def __init__(self, output_dir: Path):
        path = os.environ.get(UNDER_CALLGRIND)
        if not path:
            raise CannotCount("the rank does not run under callgrind")
        self.requests = ctypes.CDLL(path)
        self.requests.dlscale_monitor.argtypes = [ctypes.c_char_p]
        if not self.requests.dlscale_running_on_valgrind():
            raise CannotCount("callgrind's client requests reach no valgrind")
        self.directory = output_dir
        self.output = f"callgrind-{os.getpid()}.out"
        self.log = output_dir / f"valgrind-{os.getpid()}.log"
        self.dumped = 0
        self.names: list[dict[int, str]] = []
        self.instrumented = False

    def monitor(self, command: str) -> None:
        if self.requests.dlscale_monitor(command.encode()) != 0:
            raise CannotCount(f"callgrind does not know the monitor command {command!r}")

    def start(self) -> None:
        if not self.instrumented:  # once: each switch of the instrumentation discards every translation
            self.requests.dlscale_start_instrumentation()
            self.instrumented = True
        self.monitor("zero")  # every thread's costs, from the step's first instruction

    def stop(self, images: int) -> None:
        self.monitor(f"dump dlscale step {self.dumped + 1}")  # every thread's, a file each
        self.dumped += 1
        self.monitor("v.info scheduler")  # valgrind's thread ids with their lwpids, into its log
        self.names.append(live_thread_names())
        if self.dumped == self.steps:
            self.requests.dlscale_stop_instrumentation()

    def result(self) -> dict:
        """Each step's count (all threads), per thread kind and per thread, and the dump files (for
        ``callgrind_annotate``): the rank thread's per step and every thread's of the last."""
        lwpids = callgrind_threads.scheduler_lwpids(self.log.read_text(errors="replace"))
        steps = []
        for step in range(1, self.dumped + 1):
            files = callgrind_threads.thread_files(self.directory, self.output, step)
            by_lwpid = self.names[step - 1]
            listing = lwpids[step - 1] if step <= len(lwpids) else {}
            names = {thread: by_lwpid.get(lwpid) for thread, lwpid in listing.items()}
            steps.append(callgrind_threads.step_threads(files, names))
        totals = [sum(thread["count"] for thread in threads) for threads in steps]
        kinds = [callgrind_threads.by_kind(threads) for threads in steps]
        return {"per_step": totals[-1] if totals else None, "steps": totals,
                "kinds": {kind: [counts[kind] for counts in kinds] for kind in callgrind_threads.KINDS},
                "threads": _threads_across_steps(steps),
                "files": [_rank_file(threads) for threads in steps],
                "thread_files": [thread["file"] for thread in steps[-1]] if steps else [],
                "compute_threads": 1, "hash_seed": os.environ.get("PYTHONHASHSEED"),
                "not_counted": NOT_COUNTED_PROCESSES}


def live_thread_names() -> dict[int, str]:
    """The names of this process's threads now, by their kernel thread ids."""
    names = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            names[int(task.name)] = (task / "comm").read_text().strip()
        except (OSError, ValueError):
            continue  # a thread that ended while listed
    return names


def _rank_file(threads: list[dict]) -> str | None:
    return next((thread["file"] for thread in threads if thread["kind"] == callgrind_threads.RANK), None)


def _threads_across_steps(steps: list[list[dict]]) -> list[dict]:
    """Each thread once: its id, name, kind and its count in each step (0 where it had no dump),
    with the part of it spent waiting for its peers (``waiting``, counted as transport) where it
    had any."""
    threads: dict[int, dict] = {}
    for index, step in enumerate(steps):
        for thread in step:
            entry = threads.setdefault(thread["thread"], {"thread": thread["thread"], "name": thread["name"],
                                                          "kind": thread["kind"], "steps": [0] * len(steps)})
            entry["steps"][index] = thread["count"]
            if thread.get("waiting"):
                entry.setdefault("waiting", [0] * len(steps))[index] = thread["waiting"]
    return list(threads.values())
