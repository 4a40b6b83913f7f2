"""The machine yardstick's workload: a fixed CPU workload every rank times just before its
framework starts and just after the framework has shut down (outside the thing under test), so that
a change in the machine's own speed (other jobs on a shared node, a busier host under a virtual
machine, a throttled CPU) can be told apart from a change in what is being measured.

The workload is numpy, not torch: it shares no code with the stack under test, so a slower torch
kernel, model, loader or framework cannot slow the yardstick down and hide itself in the
normalisation. It is half compute (a single-threaded float32 matrix product that stays in cache)
and half memory traffic (a streaming multiply over arrays larger than the caches), because a
training step suffers both from competition for the cores and from competition for memory
bandwidth. The yardstick tracks the first closely and the second only in part (see docs/verdicts.md,
"Machine yardstick").

Here, below the ranks, because it measures the machine and the ranks run it; what its times say
about a measurement (the machine's speed, normalising by it) is :mod:`harness.judging.yardstick`.
"""
from __future__ import annotations

import time

VERSION = 1
"""Changes whenever the workload changes: yardstick times of different versions never compare."""
REPEATS = 6
"""Timed repeats of the workload before the warm-up and again after the timed window."""
MATRIX_SIZE = 256
MATRIX_PRODUCTS = 12
STREAM_BYTES = 32 * 2**20
STREAM_PASSES = 8


def run_yardstick(repeats: int = REPEATS) -> list[float]:
    """Seconds of each of ``repeats`` runs of the fixed workload, on one thread."""
    import numpy as np
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    matrix = rng.standard_normal((MATRIX_SIZE, MATRIX_SIZE)).astype(np.float32)
    source = np.ones(STREAM_BYTES // 4, dtype=np.float32)
    target = np.empty_like(source)
    times = []
    with threadpool_limits(limits=1):
        np.multiply(source, 1.0001, out=target)  # untimed: the first pass pays the page faults
        for _ in range(repeats):
            started = time.perf_counter()
            for _ in range(MATRIX_PRODUCTS):
                matrix @ matrix
            for _ in range(STREAM_PASSES):
                np.multiply(source, 1.0001, out=target)
            times.append(time.perf_counter() - started)
    return times
