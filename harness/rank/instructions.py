"""Host instructions of a rank's training steps, counted under valgrind's callgrind
(``--count-instructions``, docs/verdicts.md "Host instructions").

A rank whose spec asks for it executes itself again under ``valgrind --tool=callgrind`` with
instrumentation off from the start (:func:`exec_under_callgrind`): the interpreter's start, the
imports, the set-up and the warm-up run uninstrumented, about five times slower than natively
rather than five hundred. After the (one-step) timed window, :class:`InstructionCounting` starts
the instrumentation and collects :data:`INSTRUCTION_STEPS` steps, each dumped to a file of its own
whose total is the step's count. The rank runs one compute thread with ``PYTHONHASHSEED=0`` where
the launch sets none (a second thread's spin-waits and a random hash order are the counts' own
noise), and oneDNN's AVX kernels (:data:`ONEDNN_ISA`): the counts describe the paths taken under
valgrind, which offers no AVX-512 either. callgrind's client requests are macros; a few lines of C compiled before valgrind starts
(:func:`build_requests`) make them callable.
"""
from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

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
void dlscale_toggle_collect(void) { CALLGRIND_TOGGLE_COLLECT; }
void dlscale_dump_stats_at(const char *label) { CALLGRIND_DUMP_STATS_AT(label); }
"""

TOTALS = re.compile(r"^totals:\s+(\d+)", re.MULTILINE)


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
    return [shutil.which("valgrind") or "valgrind", "--tool=callgrind", "--collect-atstart=no", "--instr-atstart=no",
            f"--callgrind-out-file={output_dir}/callgrind-%p.out", f"--log-file={output_dir}/valgrind-%p.log"]


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
    instructions; :meth:`result` is the record's ``instructions``."""

    steps = INSTRUCTION_STEPS

    def __init__(self, output_dir: Path):
        path = os.environ.get(UNDER_CALLGRIND)
        if not path:
            raise CannotCount("the rank does not run under callgrind")
        self.requests = ctypes.CDLL(path)
        self.requests.dlscale_dump_stats_at.argtypes = [ctypes.c_char_p]
        if not self.requests.dlscale_running_on_valgrind():
            raise CannotCount("callgrind's client requests reach no valgrind")
        self.output = output_dir / f"callgrind-{os.getpid()}.out"
        self.counts: list[int] = []
        self.instrumented = False

    def start(self) -> None:
        if not self.instrumented:
            self.requests.dlscale_start_instrumentation()
            self.instrumented = True
        self.requests.dlscale_toggle_collect()

    def stop(self, images: int) -> None:
        self.requests.dlscale_toggle_collect()
        step = len(self.counts) + 1
        self.requests.dlscale_dump_stats_at(f"dlscale step {step}".encode())
        self.counts.append(step_total(Path(f"{self.output}.{step}")))
        if len(self.counts) == self.steps:
            self.requests.dlscale_stop_instrumentation()

    def result(self) -> dict:
        """The last step's count, each step's, and the dump files (for ``callgrind_annotate``)."""
        return {"per_step": self.counts[-1] if self.counts else None, "steps": self.counts,
                "files": [f"{self.output.name}.{step}" for step in range(1, len(self.counts) + 1)],
                "threads": 1, "hash_seed": os.environ.get("PYTHONHASHSEED")}


def step_total(dump: Path) -> int:
    """The instructions a callgrind dump file totals."""
    found = TOTALS.search(dump.read_text(errors="replace"))
    if found is None:
        raise CannotCount(f"{dump.name} has no totals line")
    return int(found.group(1))
