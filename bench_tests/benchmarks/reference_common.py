"""What every reference loop shares: its command line (the harness's cell settings by default) and
the per-thread CPU and run-queue times of its timed window. Standard library only: the loops run in
each framework's own interpreter."""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any, Callable


def parse(argv: list[str], frameworks: tuple[str, ...],
          extend: Callable[[argparse.ArgumentParser], None] | None = None) -> argparse.Namespace:
    """The shared options; ``extend`` adds a loop's own (reference_loops.py's precision and layout),
    so that a loop that has no such option refuses it instead of ignoring it."""
    parser = argparse.ArgumentParser(prog="python -m bench_tests.benchmarks.reference_loops")
    parser.add_argument("--framework", choices=frameworks, required=True)
    parser.add_argument("--batch", type=int, default=16, help="images per rank per step")
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--classes", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--lr", type=float, default=0.025, help="per rank; scaled by the rank count")
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--weight-decay", type=float, default=1e-4)
    parser.add_argument("--label-smoothing", type=float, default=0.1)
    parser.add_argument("--servers", type=int, default=1, help="parameter servers (the parameter-server loop's)")
    parser.add_argument("--threads", type=int, default=0,
                        help="kernel threads per process where a loop takes them (0: the framework's default)")
    parser.add_argument("--out", type=Path, required=True, help="directory for rank<R>.json")
    if extend is not None:
        extend(parser)
    return parser.parse_args(argv)


def thread_times() -> dict[int, tuple[float, float]]:
    """Seconds each thread of this process has run on a CPU and waited on a run queue, by thread id."""
    times = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            ran, waited = (int(field) for field in (task / "schedstat").read_text().split()[:2])
        except (OSError, ValueError):
            continue  # the thread ended while we read, or no schedstat here
        times[int(task.name)] = (ran / 1e9, waited / 1e9)
    return times


def window_threads(before: dict[int, tuple[float, float]], after: dict[int, tuple[float, float]]) -> dict:
    """The training (main) thread's and the other threads' CPU and run-queue time over the window."""
    main_thread = os.getpid()
    delta = {tid: (ran - before.get(tid, (0.0, 0.0))[0], waited - before.get(tid, (0.0, 0.0))[1])
             for tid, (ran, waited) in after.items()}
    others = [times for tid, times in delta.items() if tid != main_thread]
    return {"main_ran_s": delta.get(main_thread, (0.0, 0.0))[0], "main_waited_s": delta.get(main_thread, (0.0, 0.0))[1],
            "others_ran_s": sum(ran for ran, _ in others), "others_waited_s": sum(waited for _, waited in others),
            "busiest_other_ran_s": max((ran for ran, _ in others), default=0.0), "threads": len(after)}


def timed_window(step: Callable[[], Any], steps: int,
                 finish: Callable[[], None] = lambda: None) -> tuple[list[float], float, dict, Any]:
    """``steps`` calls of ``step``, each timed up to ``finish`` (waiting for the device's kernels; on
    the CPU every kernel has finished when the call returns): the step times, the window, its
    threads' times (:func:`window_threads`) and the last step's result."""
    step_times: list[float] = []
    threads_before = thread_times()
    window_start = time.perf_counter()
    for _ in range(steps):
        started = time.perf_counter()
        result = step()
        finish()
        step_times.append(time.perf_counter() - started)
    window = time.perf_counter() - window_start
    return step_times, window, window_threads(threads_before, thread_times()), result
