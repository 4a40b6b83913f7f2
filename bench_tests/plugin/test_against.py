"""An A/B in one session as a user runs it (``--against``): a project whose last commit adds real
work to every training step, measured against its parent (with another numpy, to show that a
reference's package set reaches its ranks), pair by pair through a real launcher;
and ``--confirm``, which asks of a cell that fails its stored baseline whether the software or the
system changed."""
import importlib.metadata
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from harness.launch.launchers import LAUNCHERS

from ..components import LAUNCHER_COMPONENTS, needs
from ..projects import SLOWER_STEP_SUBJECT, git, slower_step, throwaway_project
from ..workloads import JUDGED_MODEL, TINY_FLAGS

pytestmark = pytest.mark.launch
CELL = f"ddp-synthetic-{JUDGED_MODEL}-g1"
OTHER_NUMPY = "2.3.5"


def suite(project: Path, *flags: str, cache: Path) -> subprocess.CompletedProcess:
    """The project's scaling suite as a user runs it, its harness the current one."""
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-m", "scaling", "test_scaling.py",
               "--system", "absys", "--launcher", "mpirun", "--frameworks", "ddp", "--loaders", "synthetic",
               "--models", JUDGED_MODEL, "--gpus", "1", *TINY_FLAGS, "--no-history", "--results-json", "r.json", *flags]
    env = dict(os.environ, DLSCALE_CACHE=str(cache), PYTHONPATH=str(project))
    return subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture
def project(tmp_path):
    """This checkout's harness as a project of two commits: as it is, then with slower steps."""
    return throwaway_project(tmp_path / "project", [(SLOWER_STEP_SUBJECT, slower_step)])


def test_a_commit_that_slows_every_step_regresses_against_its_parent(project, tmp_path):
    needs(LAUNCHER_COMPONENTS["mpirun"], LAUNCHERS.create("mpirun").unavailable_reason())
    cache = tmp_path / "cache"
    (project / "baselines").mkdir()  # a figure from another day, far above anything this node does
    (project / "baselines" / "absys.json").write_text(json.dumps({"schema_version": 1, "system": "absys", "cells": {
        CELL: {"throughput": {"value": 1e6, "lower": -0.1, "upper": None, "unit": "img/s"}}}}))
    done = suite(project, "--against", "git:HEAD~1", "--against", f"pkg:numpy=={OTHER_NUMPY}", "--pairs", "6",
                 "--max-pairs", "6", cache=cache)
    output = done.stdout + done.stderr
    parent = git(project, "rev-parse", "HEAD~1")

    assert done.returncode == pytest.ExitCode.TESTS_FAILED, output[-3000:]
    assert f"{CELL} regressed against the reference: git {parent[:10]} (HEAD~1), numpy {OTHER_NUMPY}: " \
           f"current/reference" in output
    assert "current against reference: 1 commit(s): " in output and SLOWER_STEP_SUBJECT in output
    assert f"numpy {OTHER_NUMPY} -> {importlib.metadata.version('numpy')}" in output
    results = json.loads((project / "r.json").read_text())
    cell, = results["paired_cells"]
    assert cell["verdict"] == "regressed" and cell["launches"] == 12 and not cell["dropped"]
    assert Counter(pair["order"] for pair in cell["pairs"]) == {"reference-first": 3, "current-first": 3}
    assert cell["ratio"]["high"] < 0.97 and cell["ratio"]["value"] < 0.8, cell
    assert results["against"]["difference"]["commits"][0].endswith(SLOWER_STEP_SUBJECT)
    # the stored baseline's verdict of the very launches of the current side, beside the pairs' (a
    # fail, or inconclusive where the contention guard saw enough outside work on a busy CI machine)
    stored = cell["stored_baseline"]
    assert stored["verdict"] in ("fail", "inconclusive") and stored["launches"] == 6, stored
    assert "throughput -100.0% against baseline 1e+06" in stored["reasons"][0], stored
    assert f"{CELL}: the stored baseline judges the current side's 6 launches {stored['verdict']} (" in output
    # each side's ranks ran its own code, the parent exported from git, in its own package set (numpy
    # pinned over the current environment, built with uv), the current side the project as it is
    ran = {side: json.loads(next((project / "results").glob(f"*/cells/{side}/{CELL}/record-rank0.json"))
                            .read_text()) for side in ("reference", "current")}
    assert {side: record["harness"] for side, record in ran.items()} == {
        "reference": str(cache / "environments" / f"git-{parent}" / "harness"), "current": str(project / "harness")}
    package_set = Path(results["against"]["reference"]["python"]).parent.parent
    assert package_set.parent == cache / "environments" and package_set.name.startswith("pkgs-")
    assert {side: record["python"] for side, record in ran.items()} == {
        "reference": results["against"]["reference"]["python"], "current": sys.executable}


def test_a_cell_failing_its_baseline_in_the_baselines_own_environment_is_a_system_change(project, tmp_path):
    """The baseline was recorded with this commit and these packages: a cell that now fails it can
    only have met a changed node, said without a launch more; ``--system-changes pass`` passes it."""
    needs(LAUNCHER_COMPONENTS["mpirun"], LAUNCHERS.create("mpirun").unavailable_reason())
    cache = tmp_path / "cache"
    recorded = suite(project, "--update-baselines", "--widest-baseline", "inf", "--measure-budget", "0", cache=cache)
    assert recorded.returncode == 0, (recorded.stdout + recorded.stderr)[-3000:]
    path = project / "baselines" / "absys.json"
    baselines = json.loads(path.read_text())
    entry = baselines["cells"][CELL]
    packages = json.loads((project / "baselines" / "environments" / f"{entry['provenance']['environment']}.json")
                          .read_text())["packages"]
    assert packages["torch"] == entry["provenance"]["versions"]["torch"] and len(packages) > 40
    entry["throughput"]["value"] *= 3  # as if the node had been three times as fast that day
    path.write_text(json.dumps(baselines))

    judged = suite(project, "--confirm", "--no-yardstick", "--measure-budget", "0", cache=cache)
    output = judged.stdout + judged.stderr
    assert judged.returncode == pytest.ExitCode.TESTS_FAILED, output[-3000:]
    assert f"{CELL} regressed: " in output
    assert "confirmed: system: the baseline was recorded with this very environment (commit " in output
    cell, = json.loads((project / "r.json").read_text())["cells"]
    assert cell["verdict"] == "fail" and cell["confirmation"]["cause"] == "system"

    passed = suite(project, "--confirm", "--no-yardstick", "--measure-budget", "0", "--system-changes", "pass",
                   cache=cache)
    assert passed.returncode == 0, (passed.stdout + passed.stderr)[-3000:]
    assert f"{CELL}: fail confirmed: system: " in passed.stdout

