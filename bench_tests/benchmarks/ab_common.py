"""What the A/B benchmarks share: the cell they compare, the launcher, how a session starts, and
their opt-in gate."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench_tests.workloads import JUDGED_MODEL, SCALING_TEST
from harness import HARNESS_SOURCE

LAUNCHER = os.environ.get("DLSCALE_AA_LAUNCHER", "mpirun")
CELL_FLAGS = ["--frameworks", "ddp", "--loaders", "synthetic", "--models", JUDGED_MODEL, "--gpus", "1",
              "--image-size", "32", "--batch-size", "16", "--steps", "12", "--warmup-steps", "2"]


@pytest.fixture(autouse=True)
def only_when_asked(request):
    if not (request.config.getoption("benchmark_only", False) or os.environ.get("DLSCALE_BENCHMARKS")):
        pytest.skip("a benchmark: run with --benchmark-only or DLSCALE_BENCHMARKS=1")


def start_suite(directory: Path, system: str, *flags: str, log=None) -> subprocess.Popen:
    """A scaling session on the A/B cell in ``directory`` as a user starts it (its test module
    copied there once), its output to ``log`` or a pipe."""
    if not (directory / "test_scaling.py").is_file():
        (directory / "test_scaling.py").write_text(SCALING_TEST.read_text())
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-m", "scaling", "test_scaling.py",
               "--rootdir", str(directory), "--system", system, "--launcher", LAUNCHER, *CELL_FLAGS, "--no-history",
               *flags]
    return subprocess.Popen(command, cwd=directory, env=dict(os.environ, PYTHONPATH=str(HARNESS_SOURCE.parent)),
                            stdout=log or subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
