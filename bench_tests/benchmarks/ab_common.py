"""What the A/B benchmarks share: the cell they compare, the launcher, and their opt-in gate."""
from __future__ import annotations

import os

import pytest

from bench_tests.workloads import JUDGED_MODEL

LAUNCHER = os.environ.get("DLSCALE_AA_LAUNCHER", "mpirun")
CELL_FLAGS = ["--frameworks", "ddp", "--loaders", "synthetic", "--models", JUDGED_MODEL, "--gpus", "1",
              "--image-size", "32", "--batch-size", "16", "--steps", "12", "--warmup-steps", "2"]


@pytest.fixture(autouse=True)
def only_when_asked(request):
    if not (request.config.getoption("benchmark_only", False) or os.environ.get("DLSCALE_BENCHMARKS")):
        pytest.skip("a benchmark: run with --benchmark-only or DLSCALE_BENCHMARKS=1")
