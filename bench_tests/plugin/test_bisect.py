"""``dlscale-bisect`` as a user runs it, on a throwaway project whose history holds one commit that
makes every training step slower (real work: the step's forward and backward three times) among
harmless ones: it places the midpoint by the work a step counts, names that commit, verified by its
pairs through a real launcher, with what moved in its work, and goes on from its state file after
its budget cut it short. On one where that commit is reverted later and a second
one slows the step again (by another amount), placed by speed (``--by time``), it names the second
as the culprit that stayed; where the ends count the same work, by speed too. Bad input is one
line, before any launch. (A work change apart from the slowdown: test_bisect_search.py's fakes, and
the proof in benchmarks/test_bisect_proofs.py.)"""
import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.launch.launchers import LAUNCHERS

from ..components import LAUNCHER_COMPONENTS, needs
from ..projects import (HALF_AGAIN_SUBJECT, SLOWER_STEP_SUBJECT, git, half_again, harmless, slower_step,
                        throwaway_project)
from ..workloads import JUDGED_MODEL, TINY_FLAGS

pytestmark = pytest.mark.launch
CELL = f"ddp-synthetic-{JUDGED_MODEL}-g1"
FLAGS = ["--launcher", "mpirun", *TINY_FLAGS, "--rounds", "6", "--max-rounds", "8", "--verify-pairs", "6",
         "--seed", "7"]
"""Looks at 6 and 8 rounds (and pairs): the fewest whose first look has an interval at its level."""


def bisect(project: Path, *args: str) -> subprocess.CompletedProcess:
    command = [str(Path(sys.executable).with_name("dlscale-bisect")), *args]
    env = dict(os.environ, DLSCALE_CACHE=str(project.parent / "cache"), PYTHONPATH=str(project))
    return subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, timeout=900)


def test_names_the_commit_that_slowed_every_step_and_goes_on_after_its_budget(tmp_path):
    """The slower step does three times the work, which the step counted after each launch's window
    shows: the ends count different work, so the range's ends are put to an A/B of their own (its
    slowdown) and the midpoint is one launch placed by its work; the culprit's pairs say it made the
    step slower, its work against its parent's says what moved, and it accounts for the range's
    slowdown."""
    needs(LAUNCHER_COMPONENTS["mpirun"], LAUNCHERS.create("mpirun").unavailable_reason())
    project = throwaway_project(tmp_path / "project", [(SLOWER_STEP_SUBJECT, slower_step),
                                                       ("a harmless change", harmless("one"))])
    culprit, parent = git(project, "rev-parse", "HEAD~1"), git(project, "rev-parse", "HEAD~2")
    state_path = project / "results" / "bisect" / f"{CELL}.state.json"

    # the ends (2), their A/B (12 launches, or 16 where its first look is unclear, and pairs made up
    # for outside work) and the midpoint (1) fit; the culprit's verification (12 more) does not
    cut = bisect(project, CELL, "--good", "HEAD~2", *FLAGS, "--max-launches", "26")
    assert cut.returncode == 3, (cut.stdout + cut.stderr)[-3000:]
    assert "the budget is spent (" in cut.stderr and " launches of 26" in cut.stderr, cut.stderr
    assert f"the state is in {state_path.relative_to(project)}: the same command goes on from there" in cut.stderr
    state = json.loads(state_path.read_text())
    assert state["by"] == "work" and len(state["steps"]) == 1 and not state["done"]
    assert state["range_speed"]["verdict"] == "regressed", state["range_speed"]

    done = bisect(project, CELL, "--good", "HEAD~2", *FLAGS)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert f"going on from {state_path.relative_to(project)} (1 step(s), {state['launches']} launch(es) done)" in output
    assert f"culprit {culprit[:10]} {SLOWER_STEP_SUBJECT}: verified against {parent[:10]} as the checkout is: " \
           f"work: +200.0% FLOPs (aten::convolution" in output
    result = json.loads((project / "results" / "bisect" / f"{CELL}.json").read_text())
    assert [(c["point"], c["verified"], c["verdict"]) for c in result["culprits"]] == [(culprit, True, "regressed")]
    assert "; speed: regressed, current/reference " in result["culprits"][0]["evidence"]
    step, = result["steps"]
    assert (step["mid"], step["placement"], step["placed_by"], step["rounds"]) == (culprit, "like-bad", "work", [])
    assert step["evidence"]["against_bad"].startswith("work: the same"), step["evidence"]
    assert len(result["culprits"][0]["pairs"]) in (6, 8)  # and pairs left out for outside work, made up for
    assert result["accounting"]["holds"] and not result["work_changes"], result["accounting"]
    assert len(result["counted_log"]) == 3 and all(entry["status"] == "ok" for entry in result["counted_log"])
    assert result["launches"] == 3 + result["range_speed"]["launches"] + result["culprits"][0]["launches"]
    assert result["done"]


@pytest.mark.full  # 220 s of CI's: the placements it takes are the unit tests' (test_bisection.py)
def test_a_regression_fixed_later_then_a_second_one_names_the_second(tmp_path):
    """The first step's midpoint is the first regression, which runs slower than the bad end: a
    change went each way, so both halves are searched, where a bisect that took it for the bad end
    named it alone. The first regression, its revert and the second are each verified; the revert
    undid the first, and the three account for the range's slowdown."""
    needs(LAUNCHER_COMPONENTS["mpirun"], LAUNCHERS.create("mpirun").unavailable_reason())
    project = throwaway_project(tmp_path / "project", [
        (SLOWER_STEP_SUBJECT, slower_step),
        ("the steps do their work once again", lambda p: git(p, "revert", "--no-commit", "HEAD")),
        # the second half the first's size, so that the first lies beyond it with confidence even in 6
        # rounds of a noisy CI machine's launches: with twice the work, the first against the second
        # ran 0.718 [0.540, 1.085] there, and the bisect took it for the bad end
        (HALF_AGAIN_SUBJECT, half_again)])
    first, revert, second = (git(project, "rev-parse", f"HEAD~{n}") for n in (2, 1, 0))
    done = bisect(project, CELL, "--good", "HEAD~3", *FLAGS, "--by", "time")  # placed by speed, in rounds
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    result = json.loads((project / "results" / "bisect" / f"{CELL}.json").read_text())
    assert [step["placement"] for step in result["steps"]] == ["beyond", "beyond"], output[-3000:]
    assert [(c["point"], c["verified"], c.get("undone_by")) for c in result["culprits"]] == [
        (first, True, revert), (second, True, None)], output[-3000:]
    assert [(f["point"], f["verdict"]) for f in result["fixes"]] == [(revert, "improved")]
    assert result["accounting"]["holds"], result["accounting"]
    assert f"culprit {second[:10]} {HALF_AGAIN_SUBJECT}: verified against {revert[:10]} " in output
    assert f"; undone later by {revert[:10]} " in output and "the changes found account for the range's: " in output


def test_a_good_end_that_is_not_faster_is_said_with_its_evidence(tmp_path):
    needs(LAUNCHER_COMPONENTS["mpirun"], LAUNCHERS.create("mpirun").unavailable_reason())
    project = throwaway_project(tmp_path / "project", [(SLOWER_STEP_SUBJECT, slower_step),
                                                       ("the steps do their work once again",
                                                        lambda p: git(p, "revert", "--no-commit", "HEAD"))])
    done = bisect(project, CELL, "--good", "HEAD~1", *FLAGS)
    assert done.returncode == 2, (done.stdout + done.stderr)[-3000:]
    assert done.stderr.startswith("dlscale-bisect: the good end is not faster than the bad one: improved, "
                                  "current/reference "), done.stderr


def _without_harness(project: Path) -> None:
    git(project, "rm", "-r", "-q", "harness")


def _harness_back(project: Path) -> None:
    git(project, "checkout", "HEAD~1", "--", "harness")


@pytest.mark.parametrize(("args", "said"), [
    ([CELL, "--good", "no-such-ref"], f"--good no-such-ref: no such commit in "),
    ([CELL, "--good", "HEAD", "--bad", "HEAD~2"], "--good HEAD is not an ancestor of --bad HEAD~2: no range to bisect"),
    ([CELL, "--good", "HEAD", "--bad", "HEAD"], "--good HEAD and --bad HEAD are the same commit: nothing to bisect"),
    (["ddp-synthetic-nosuchnet-g1", "--good", "HEAD~2"], "no cell ddp-synthetic-nosuchnet-g1: "),
    (["ddp-resnet44", "--good", "HEAD~2"], "'ddp-resnet44' is not a cell id: say <framework>-<loader>-<model>-g"),
    ([CELL, "--good", "HEAD~2"], "nothing between --good "),
    ([CELL, "--good", "pkg:numpy==1.26.4", "--bad", "HEAD"],
     "--bad HEAD: a bisect across packages takes pkg:NAME==VERSION on both sides"),
    ([CELL, "--good", f"pkg:numpy=={importlib.metadata.version('numpy')}"],
     "--good and --bad are the same package set: nothing to bisect"),
], ids=["unknown-ref", "not-an-ancestor", "same-commit", "unknown-cell", "not-a-cell-id", "no-buildable-midpoint",
        "commit-and-package-ends", "same-package-set"])
def test_bad_input_is_one_line_before_any_launch(tmp_path, args, said):
    project = throwaway_project(tmp_path / "project", [("the harness taken out", _without_harness),
                                                       ("the harness back", _harness_back)])
    done = bisect(project, *args, *FLAGS)
    assert done.returncode == 2, (done.stdout + done.stderr)[-3000:]
    line, = done.stderr.strip().splitlines()
    assert line.startswith("dlscale-bisect: ") and said in line, line
    assert not (project / "results" / "bisect" / "cells").exists()  # nothing launched
