"""What the A/B benchmarks share: the cell they compare, the launcher, how a session starts, and
their opt-in gate."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from scipy import stats

from bench_tests.workloads import JUDGED_MODEL, SCALING_TEST
from harness import HARNESS_SOURCE
from harness.judging.paired import pairs_needed

LAUNCHER = os.environ.get("DLSCALE_AA_LAUNCHER", "mpirun")
CELL_FLAGS = ["--frameworks", "ddp", "--loaders", "synthetic", "--models", JUDGED_MODEL, "--gpus", "1",
              "--image-size", "32", "--batch-size", "16", "--steps", "12", "--warmup-steps", "2"]
MIN_EFFECT = os.environ.get("DLSCALE_AB_MIN_EFFECT")
"""Every A/B benchmark's minimum effect (``--min-effect``) where set; else the system's tunable."""
SESSION_FLAGS = [*(["--duet"] if os.environ.get("DLSCALE_AB_DUET") == "1" else []),
                 *(["--cores-per-rank", cores] if (cores := os.environ.get("DLSCALE_AB_CORES_PER_RANK")) else [])]
"""DLSCALE_AB_DUET=1: every A/B benchmark's pairs as duets (``--duet``); DLSCALE_AB_CORES_PER_RANK:
its ``--cores-per-rank`` (a duet's 1-rank cell on a 2-core node has one core)."""


@pytest.fixture(autouse=True)
def only_when_asked(request):
    if not (request.config.getoption("benchmark_only", False) or os.environ.get("DLSCALE_BENCHMARKS")):
        pytest.skip("a benchmark: run with --benchmark-only or DLSCALE_BENCHMARKS=1")


def start_suite(directory: Path, system: str, *flags: str, log=None, project: Path = HARNESS_SOURCE.parent,
                env: dict[str, str] | None = None) -> subprocess.Popen:
    """A scaling session on the A/B cell in ``directory`` as a user starts it (the directory made
    and its test module copied there once), with ``project``'s harness, its output to ``log`` or a pipe."""
    directory.mkdir(parents=True, exist_ok=True)
    if not (directory / "test_scaling.py").is_file():
        (directory / "test_scaling.py").write_text(SCALING_TEST.read_text())
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-m", "scaling", "test_scaling.py",
               "--rootdir", str(directory), "--system", system, "--launcher", LAUNCHER, *CELL_FLAGS, "--no-history",
               *(["--min-effect", MIN_EFFECT] if MIN_EFFECT else []), *SESSION_FLAGS, *flags]
    return subprocess.Popen(command, cwd=directory, env=dict(os.environ, PYTHONPATH=str(project), **(env or {})),
                            stdout=log or subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def compare(directory: Path, label: str, index: int, total: int, *flags: str, system: str = "ab",
            **session) -> dict:
    """One A/B session of the cell with ``flags`` (its ``--against`` among them) in ``directory``:
    its paired cell from the results file, after printing its verdict, ratio and pairs in a line
    headed ``label``. ``session``: :func:`start_suite`'s ``project`` and ``env``."""
    results = f"{system}-{index}.json"
    process = start_suite(directory, system, "--results-json", results, *flags, **session)
    output, _ = process.communicate(timeout=3600)
    assert process.returncode in (0, 1), output[-3000:]
    if keep := os.environ.get("DLSCALE_AB_KEEP"):  # every session's results, for dlscale-launches
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(directory / results, Path(keep) / f"{re.sub(r'[^A-Za-z0-9]+', '-', label)}-{os.getpid()}-{results}")
    cell, = json.loads((directory / results).read_text())["paired_cells"]
    ratio = {key: float("nan") if value is None else value for key, value in (cell["ratio"] or {}).items()}
    print(f"{label} {index + 1}/{total}: {cell['verdict']:<12} {ratio.get('value', float('nan')):.3f} "
          f"[{ratio.get('low', float('nan')):.3f}, {ratio.get('high', float('nan')):.3f}] "
          f"after {len(cell['pairs'])} pairs ({cell['launches']} launches, {cell['wall_s']:.0f} s"
          + (f", {len(cell['left_out'])} left out" if cell.get("left_out") else "") + ")"
          + (f"; {needed}" if (needed := pairs_needed(cell.get("pairs_to_decide"))) else ""), flush=True)
    return cell


def exact_interval(successes: int, trials: int) -> tuple[float, float]:
    """Clopper-Pearson 95% interval of a rate."""
    low = stats.beta.ppf(0.025, successes, trials - successes + 1) if successes else 0.0
    high = stats.beta.ppf(0.975, successes + 1, trials - successes) if successes < trials else 1.0
    return float(low), float(high)
