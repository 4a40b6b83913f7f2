"""``--confirm`` through the nightly recipe where the answer is known: ``ci/nightly.sbatch`` submitted
with ``sbatch --wait`` to the local Slurm cluster (the cell and the A/B's launches job steps of its
allocation, through srun), on a throwaway project whose baseline was recorded on this node, its
package set committed beside it. Three nights, each judged as a site's nightly judges it:

- **software**: a commit makes every step do half its work again. The cell fails its baseline; the
  A/B against the baseline's commit, rebuilt, says ``regressed``: ``software``, with the split.
- **system**: that commit reverted (the code the baseline's own), and slurmd, with every job it starts
  from then on, held to a CPU quota (a cgroup's CFS bandwidth, DLSCALE_CONFIRM_QUOTA cores of the
  node), as a slower node: ``system``, the baseline's environment itself reproducing the move.
- **unknown**: the same night with the baseline's package set no longer beside it: ``unknown``,
  naming the packages.

    DLSCALE_BENCHMARKS=1 pytest bench_tests/benchmarks/test_confirm_nightly.py -s

Needs root (the quota), sbatch and a local cluster ci/slurm/start.sh started, munged running (the
setup starts both). Not part of ordinary runs: about 10 minutes on a 2-core VM.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench_tests.benchmarks.ab_common import CELL_FLAGS, only_when_asked  # noqa: F401 (a fixture)
from bench_tests.benchmarks.cpu_quota import CpuQuota
from bench_tests.projects import HALF_AGAIN_SUBJECT, commit, git, half_again, throwaway_project
from bench_tests.workloads import JUDGED_MODEL
from harness import HARNESS_SOURCE

NIGHTLY = HARNESS_SOURCE.parent / "ci" / "nightly.sbatch"
SYSTEM = "nightly-proof"
CELL = f"ddp-synthetic-{JUDGED_MODEL}-g1"
QUOTA_CORES = float(os.environ.get("DLSCALE_CONFIRM_QUOTA", "0.6"))
"""Cores of CPU time the slower node leaves a job together: a 1-rank cell's rank had the node's two."""
DATASET = Path(os.environ.get("DLSCALE_CACHE", Path.home() / ".cache" / "dlscale")) / "dataset"


def session_env(project: Path, cache: Path, **settings: str) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(project), DLSCALE_CACHE=str(cache), **settings)


def record(project: Path, cache: Path) -> dict:
    """The node's baseline of the cell through srun, as ``ci/suite --update-baselines`` records it
    (the widest interval it keeps raised: a launch here spreads by 8-12%), committed with its package set."""
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-m", "scaling", "--pyargs", "harness.bench",
               "--launcher", "srun", "--system", SYSTEM, *CELL_FLAGS, "--no-history", "--update-baselines",
               "--widest-baseline", "0.5", "--results-json", "recorded.json"]
    done = subprocess.run(command, cwd=project, env=session_env(project, cache), capture_output=True, text=True,
                          timeout=1800)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    commit(project, "the node's baseline")
    entry, = json.loads((project / "baselines" / f"{SYSTEM}.json").read_text())["cells"][CELL]
    print(f"baseline: {entry['throughput']['value']:.1f} img/s, band {entry['throughput']}; commit "
          f"{entry['provenance']['git_commit'][:10]}, package set {entry['provenance']['environment']}", flush=True)
    return entry


def night(project: Path, cache: Path, name: str) -> tuple[int, dict]:
    """One night of ``ci/nightly.sbatch`` on the cell: its exit status and the cell's result."""
    out = project / "results" / name
    env = session_env(project, cache, DLSCALE_REPO=str(project), DLSCALE_VENV=sys.prefix, DLSCALE_DATA=str(DATASET),
                      DLSCALE_SYSTEM=SYSTEM, DLSCALE_OUT=str(out), DLSCALE_HISTORY_DIR=str(out / "history"))
    log = project / f"nightly-{name}.out"
    command = ["sbatch", "--wait", "--nodes=1", "--ntasks-per-node=2", "--gpus-per-node=0", "--job-name",
               f"dlscale-{name}", "--output", str(log), str(NIGHTLY), *CELL_FLAGS]
    done = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, timeout=3600)
    output = log.read_text() if log.is_file() else done.stdout + done.stderr
    assert (out / "results.json").is_file(), output[-3000:]
    cell, = json.loads((out / "results.json").read_text())["cells"]
    confirmation = cell.get("confirmation") or {}
    print(f"{name}: sbatch --wait exit status {done.returncode}; {CELL} {cell['verdict']}, "
          f"{cell['throughput']['value']:.1f} img/s; {confirmation.get('message', 'not confirmed')}", flush=True)
    return done.returncode, cell


@pytest.fixture
def project(tmp_path):
    for tool in ("sbatch", "srun"):
        if not shutil.which(tool):
            pytest.skip(f"no {tool}: the nightly recipe needs a Slurm cluster (ci/slurm/start.sh)")
    if subprocess.run(["sinfo", "-h"], capture_output=True).returncode:
        pytest.skip("no Slurm controller answers: start the local cluster (ci/slurm/start.sh)")
    if not DATASET.is_dir():
        pytest.skip(f"no generated dataset at {DATASET}: run ci/setup.sh")
    return throwaway_project(tmp_path / "project", [])


def test_the_nightly_confirms_a_commit_as_software_and_a_slower_node_as_system(project, tmp_path):
    cache = tmp_path / "cache"
    (project / "baselines").mkdir()
    recorded = record(project, cache)

    half_again(project)
    commit(project, HALF_AGAIN_SUBJECT)
    status, cell = night(project, cache, "software")
    assert status == 1 and cell["confirmation"]["cause"] == "software", cell.get("confirmation")
    assert cell["confirmation"]["paired"]["verdict"] == "regressed"

    git(project, "revert", "--no-edit", "HEAD")
    slurmd = int(subprocess.run(["pgrep", "-x", "slurmd"], capture_output=True, text=True, check=True).stdout.split()[0])
    with CpuQuota(members=[slurmd]) as quota:
        quota.limit(QUOTA_CORES)
        status, cell = night(project, cache, "system")
        assert status == 1 and cell["confirmation"]["cause"] == "system", cell.get("confirmation")
        split = cell["confirmation"]["split"]
        assert split["system"]["high"] < 1 and split["software"]["value"] == 1, split

        (project / "baselines" / "environments" / f"{recorded['provenance']['environment']}.json").unlink()
        commit(project, "the baselines without their package set")
        status, cell = night(project, cache, "unknown")
    assert status == 1 and cell["confirmation"]["cause"] == "unknown", cell.get("confirmation")
    assert [line.split(":")[0] for line in cell["confirmation"]["not_rebuilt"]] == ["packages"], cell["confirmation"]
