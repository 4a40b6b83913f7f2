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
    assert cell["verdict"] == "regressed" and not cell["failures"]
    assert cell["launches"] == 2 * (6 + len(cell["left_out"]))  # a pair left out for outside work is made up for
    assert Counter(pair["order"] for pair in cell["pairs"]) == {"reference-first": 3, "current-first": 3}
    assert cell["ratio"]["high"] < 0.97 and cell["ratio"]["value"] < 0.8, cell
    assert results["against"]["difference"]["commits"][0].endswith(SLOWER_STEP_SUBJECT)
    # the work, counted in the first pair, before any speed verdict: three forward and backward passes
    # a step, where the parent ran one, so three times the FLOPs of every operator that has a formula
    work = cell["work"]
    flops = next(moved for moved in work["change"]["moved"] if moved["part"] == "flops")
    assert flops["ratio"] == pytest.approx(3.0) and flops["text"].startswith("+200.0% FLOPs (aten::convolution"), work
    assert work["launches_differ"] == [] and f"{CELL}: work: +200.0% FLOPs (aten::convolution" in output
    said = output.index(f"[dlscale] {CELL}: work: +200.0% FLOPs")  # as the first pair ends, before any look
    assert said < output.index(f"[dlscale] {CELL}: regressed after 6 pairs"), output[-3000:]
    # the stored baseline's verdict of the very launches of the current side, beside the pairs' (a
    # fail, or inconclusive where the contention guard saw enough outside work on a busy CI machine)
    stored = cell["stored_baseline"]
    launches = 6 + len(cell["left_out"])  # a pair left out for outside work is made up for: its launches count
    assert stored["verdict"] in ("fail", "inconclusive") and stored["launches"] == launches, stored
    assert "throughput -100.0% against baseline 1e+06" in stored["reasons"][0], stored
    assert f"{CELL}: the stored baseline judges the current side's {launches} launches " in output
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
    """The baseline was recorded with this commit, code, packages, stack and launch environment: the
    cell's own launches are the baseline environment's figure now, and they reproduce the stored
    shortfall, so it is the node's (``--system-changes pass`` passes it). Where a part of the
    baseline's environment cannot be rebuilt (its package set not kept, the node's MPI changed) the
    same figure is ``unknown``, naming the parts, and fails even with ``--system-changes pass``."""
    needs(LAUNCHER_COMPONENTS["mpirun"], LAUNCHERS.create("mpirun").unavailable_reason())
    cache = tmp_path / "cache"
    recorded = suite(project, "--update-baselines", "--widest-baseline", "inf", "--measure-budget", "0", cache=cache)
    assert recorded.returncode == 0, (recorded.stdout + recorded.stderr)[-3000:]
    path = project / "baselines" / "absys.json"
    baselines = json.loads(path.read_text())
    entry, = baselines["cells"][CELL]
    provenance = entry["provenance"]
    package_set = project / "baselines" / "environments" / f"{provenance['environment']}.json"
    packages = json.loads(package_set.read_text())["packages"]
    assert packages["torch"] == provenance["versions"]["torch"] and len(packages) > 40
    assert provenance["rank_environment"] == provenance["environment"]  # torch's ranks run in torch's environment
    assert set(provenance["code"]) == {"harness", "figures"} and isinstance(provenance["launch_environment"], dict)
    assert f"{package_set}: a package set the baselines name, written beside them: commit it with them" \
        in recorded.stdout
    # as if the node had been a hundred times as fast that day: far beyond what other work on a busy CI
    # machine can take from one launch (the contention guard leaves such a fail a fail)
    entry["throughput"]["value"] *= 100
    path.write_text(json.dumps(baselines))

    judged = suite(project, "--confirm", "--no-yardstick", "--measure-budget", "0", cache=cache)
    cell = confirmed(project, judged)
    # the work its step does, counted with the same packages as the baseline's: the same, so what
    # moved is not the software's work
    assert entry["work"]["flops"]["total"] > 0 and cell["work_change"]["same"] == [
        "flops", "operators", "collectives", "memory", "data"], cell["work_change"]
    assert f"{CELL}: {cell['verdict']}: the same work per step as at the baseline" in judged.stdout
    assert cell["confirmation"]["cause"] == "system", cell["confirmation"]
    assert f"{CELL}: {cell['verdict']} confirmed: system: the baseline was recorded with this very environment " \
           "(commit " in judged.stdout
    split = cell["confirmation"]["split"]
    assert split["software"]["value"] == 1 and split["system"]["value"] == split["stored"]["value"] < 0.2
    assert split["baseline_environment_now_verdict"] == "fail" and cell["confirmation"]["not_rebuilt"] == []

    passed = suite(project, "--confirm", "--no-yardstick", "--measure-budget", "0", "--system-changes", "pass",
                   cache=cache)
    assert passed.returncode == 0, (passed.stdout + passed.stderr)[-3000:]
    assert f"{CELL}: {confirmed(project, passed, 'pass')['verdict']} confirmed: system: " in passed.stdout

    package_set.unlink()  # not committed with the baselines
    entry["fingerprint"]["stack"]["mpi"] = "mpirun (Open MPI) 0.0.1"  # the node's MPI changed since
    path.write_text(json.dumps(baselines))
    unknown = suite(project, "--confirm", "--no-yardstick", "--measure-budget", "0", "--system-changes", "pass",
                    cache=cache)
    cell = confirmed(project, unknown)  # a fail fails, --system-changes pass or not
    assert f"{CELL}: {cell['verdict']} confirmed: unknown: " in unknown.stdout
    assert cell["confirmation"]["cause"] == "unknown" and cell["confirmation"]["paired"] is None  # nothing to A/B
    assert [line.split(":")[0] for line in cell["confirmation"]["not_rebuilt"]] == ["stack", "packages"]
    assert "stack: mpi mpirun (Open MPI) 0.0.1 -> " in cell["confirmation"]["message"]
    assert "packages: the torch runtime's package set was not kept beside the baselines" in \
        cell["confirmation"]["message"]


def confirmed(project: Path, done: subprocess.CompletedProcess, system_changes: str = "fail") -> dict:
    """The one cell of a ``--confirm`` session, its exit status checked: a ``fail`` fails the test
    unless it is the system's and ``system_changes`` passes it; an ``inconclusive`` (the contention
    guard, where other work took the cores of a busy CI machine) passes it."""
    output = done.stdout + done.stderr
    cell, = json.loads((project / "r.json").read_text())["cells"]
    assert cell["verdict"] in ("fail", "inconclusive"), output[-3000:]
    excused = cell["confirmation"]["cause"] == "system" and system_changes == "pass"
    failed = cell["verdict"] == "fail" and not excused
    assert done.returncode == (pytest.ExitCode.TESTS_FAILED if failed else pytest.ExitCode.OK), output[-3000:]
    assert (f"{CELL} regressed: " in output) == failed
    return cell
