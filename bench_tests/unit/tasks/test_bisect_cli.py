"""dlscale-bisect's parts that need no launch: a cell id read into the suite's matrix options, the
commits of a range from git, the versions of a package and the moves between two package sets, the
bisects a move across packages runs, a state file that belongs to another bisect or to other launch
settings; and, on fixed launch outcomes, a verification cut short that goes on from its pairs and a
regression fixed later in the range, then another. (The launches themselves:
bench_tests/plugin/test_bisect.py.)"""
import dataclasses
import json
import re
import subprocess
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench_tests.components import needs
from harness.launch.runner import CellRun
from harness.machine.references import Environment
from harness.rank.cell import Cell
from harness.rank.instructions import missing_tools
from harness.rank.workload import Workload
from harness.session.paired import PairedResult
from harness.tasks.bisect import across_packages, cell_options
from harness.tasks.bisect_report import report, succeeded
from harness.tasks.bisect_search import Bisect
from harness.tasks.bisect_settings import BudgetSpent, Settings, launch_settings
from harness.tasks.bisect_points import (BisectError, Point, commits_between, package_moves, package_points,
                                         package_sets_of, version_points)


def test_a_cell_id_selects_its_framework_loader_model_ranks_and_numerics():
    assert cell_options("ddp-synthetic-resnet44-g2") == {
        "frameworks": "ddp", "loaders": "synthetic", "models": "resnet44", "gpus": "2", "dtypes": "fp32",
        "channels_last": False, "compile": False}
    assert cell_options("torch_ps_sync-native-resnet50-bf16-channels_last-g3") == {
        "frameworks": "torch_ps_sync", "loaders": "native", "models": "resnet50", "gpus": "3", "dtypes": "bf16",
        "channels_last": True, "compile": False}
    for wrong in ("ddp-synthetic-g2", "ddp-synthetic-resnet44-x2", "ddp-a-b-c-d-g1"):
        with pytest.raises(BisectError, match="is not a cell id"):
            cell_options(wrong)


@pytest.fixture
def repo(tmp_path):
    def git(*args):
        return subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                              capture_output=True, text=True, check=True).stdout.strip()
    git("init", "-q")
    for n in range(4):
        (tmp_path / "f").write_text(str(n))
        git("add", "f")
        git("commit", "-q", "-m", f"c{n}")
    return tmp_path, [git("rev-parse", f"HEAD~{n}") for n in (3, 2, 1, 0)]


def test_a_range_is_the_good_commit_then_each_one_after_it_up_to_the_bad_one(repo):
    path, shas = repo
    assert commits_between(path, "HEAD~3", "HEAD") == shas
    assert commits_between(path, shas[1], "HEAD~1") == shas[1:3]
    with pytest.raises(BisectError, match="not an ancestor"):
        commits_between(path, "HEAD", "HEAD~1")
    with pytest.raises(BisectError, match="--bad nope: no such commit"):
        commits_between(path, "HEAD~1", "nope")


def test_a_state_file_of_another_bisect_is_refused_not_overwritten(repo, tmp_path):
    path, shas = repo
    state = tmp_path / "state.json"
    points = [Point(key=sha, short=sha[:10], parts=(f"git:{sha}",), label=sha) for sha in shas]
    cell = Cell(framework="ddp", loader="synthetic", model="resnet44", ranks=1)
    state.write_text(json.dumps({"cell": "ddp-synthetic-resnet20-g1", "points": shas}))
    with pytest.raises(BisectError, match="is another bisect's"):
        Bisect(None, cell, path, points, Settings(), state, settings_bound={})
    state.write_text(json.dumps({"cell": cell.id, "points": shas, "version": 1}))
    with pytest.raises(BisectError, match="written by another version of dlscale-bisect \\(state version 1, this "
                                          "one's 5\\), without the settings it ran under: remove it"):
        Bisect(None, cell, path, points, Settings(), state, settings_bound={})
    state.write_text("{not json")
    with pytest.raises(BisectError, match="cannot be read"):
        Bisect(None, cell, path, points, Settings(), state, settings_bound={})
    assert state.read_text() == "{not json"


def test_a_version_range_is_every_listed_version_after_the_good_one_up_to_the_bad_one():
    listed = ["2.4.6", "2.4.0", "2.3.5", "2.2.6", "2.10.0", "2.1.3", "1.26.4"]
    points = version_points("pkg:numpy==2.1.3", "pkg:numpy==2.4.6", listed)
    assert [p.key for p in points] == ["numpy==2.1.3", "numpy==2.2.6", "numpy==2.3.5", "numpy==2.4.0", "numpy==2.4.6"]
    assert points[1].parts == ("pkg:numpy==2.2.6",) and points[1].label == "numpy 2.2.6"
    with pytest.raises(BisectError, match="name two packages"):
        version_points("pkg:numpy==2.1.3", "pkg:scipy==1.0", listed)
    backward = version_points("pkg:numpy==2.4.6", "pkg:numpy==2.2.6", listed, held=["pkg:scipy==1.0"])
    assert [p.key for p in backward] == ["numpy==2.4.6", "numpy==2.4.0", "numpy==2.3.5", "numpy==2.2.6"]
    assert backward[1].parts == ("pkg:scipy==1.0", "pkg:numpy==2.4.0")
    with pytest.raises(BisectError, match="same version"):
        version_points("pkg:numpy==2.4.6", "pkg:numpy==2.4.6", listed)
    with pytest.raises(BisectError, match="exact version"):
        version_points("pkg:numpy", "pkg:numpy==2.1.3", listed)


INSTALLED = {"python": "3.11.7", "numpy": "2.1.3", "torch": "2.14.1", "torchvision": "0.29.1", "horovod": "0.28.1",
             "scipy": "1.16.0"}


def test_two_package_sets_are_what_each_side_names_and_the_installed_versions_of_the_rest():
    good, bad = package_sets_of(["pkg:numpy==2.0.0", "pkg:torch==2.13.1"], ["pkg:torch==2.14.1"], INSTALLED)
    assert good == {"numpy": "2.0.0", "torch": "2.13.1"} and bad == {"torch": "2.14.1", "numpy": "2.1.3"}
    with pytest.raises(BisectError, match="--bad HEAD: a bisect across packages takes pkg:"):
        package_sets_of(["pkg:numpy==2.0.0"], ["HEAD"], INSTALLED)
    with pytest.raises(BisectError, match="names numpy twice"):
        package_sets_of(["pkg:numpy==2.0.0", "pkg:NumPy==2.1.0"], [], INSTALLED)
    with pytest.raises(BisectError, match="nothere is not installed here"):
        package_sets_of(["pkg:nothere==1.0"], [], INSTALLED)


def test_packages_move_one_at_a_time_except_those_that_must_move_together():
    good = {"numpy": "2.0.0", "torch": "2.13.1", "torchvision": "0.28.0", "horovod": "0.28.1", "scipy": "1.15.0",
            "filelock": "3.0"}
    bad = {**good, "numpy": "2.1.3", "torch": "2.14.1", "torchvision": "0.29.1", "scipy": "1.16.0"}
    assert package_moves(good, bad) == [("numpy",), ("scipy",), ("torch", "torchvision")]
    assert package_moves(good, {**bad, "horovod": "0.28.2"}) == [("horovod", "torch", "torchvision"), ("numpy",),
                                                                 ("scipy",)]
    assert package_moves(good, bad, together=[["NumPy", "scipy"]]) == [("numpy", "scipy"), ("torch", "torchvision")]
    assert package_moves(good, good) == []

    points = package_points(good, bad, package_moves(good, bad))
    assert [p.short for p in points] == ["good", "+numpy", "+scipy", "+torch+torchvision"]
    assert points[0].key == "filelock==3.0,horovod==0.28.1,numpy==2.0.0,scipy==1.15.0,torch==2.13.1,torchvision==0.28.0"
    assert points[2].parts == ("pkg:filelock==3.0", "pkg:horovod==0.28.1", "pkg:numpy==2.1.3", "pkg:scipy==1.16.0",
                               "pkg:torch==2.13.1", "pkg:torchvision==0.28.0")
    assert points[2].label == ("scipy 1.15.0 -> 1.16.0 (with filelock 3.0, horovod 0.28.1, numpy 2.1.3, "
                               "torch 2.13.1, torchvision 0.28.0)")
    assert points[-1].parts == tuple(f"pkg:{name}=={bad[name]}" for name in sorted(bad))


def test_across_packages_finds_the_move_then_bisects_that_packages_versions_with_the_others_held(
        tmp_path, monkeypatch):
    """The moves' bisect first; then, for a verified culprit that moved one package over several
    versions, that package's versions with every other package as it stood before the move, in a
    state file of its own and with what is left of the budget."""
    from harness.tasks import bisect_points
    monkeypatch.setattr(bisect_points, "index_versions", lambda name: {"numpy": ["2.0.0", "2.0.5", "2.1.0", "2.1.3"],
                                                                       "scipy": ["1.15.0", "1.16.0"]}[name])
    good, bad = {"numpy": "2.0.0", "scipy": "1.15.0"}, {"numpy": "2.1.3", "scipy": "1.16.0"}
    started = []

    def start(points, state, budget):
        started.append((points, state, budget))
        keys = [p.key for p in points]
        culprit = {"point": keys[1], "label": points[1].label, "verified": True} if len(started) == 1 else \
            {"point": keys[2], "label": points[2].label, "verified": True}
        return {"points": keys, "culprits": [culprit], "launches": 40, "spent_s": 100.0}

    said = []
    states = across_packages(start, good, bad, package_moves(good, bad), Settings(max_launches=100),
                             tmp_path / "c.state.json", said.append)
    assert len(states) == 2
    (moves, first_state, first_budget), (versions, second_state, second_budget) = started
    assert [p.short for p in moves] == ["good", "+numpy", "+scipy"] and first_budget.max_launches == 100
    assert [p.key for p in versions] == ["numpy==2.0.0", "numpy==2.0.5", "numpy==2.1.0", "numpy==2.1.3"]
    assert all(p.parts[0] == "pkg:scipy==1.15.0" for p in versions)  # scipy as it stood before numpy moved
    assert second_state == tmp_path / "c.state-numpy.json" and first_state == tmp_path / "c.state.json"
    assert second_budget.max_launches == 60 and second_budget.max_seconds == Settings().max_seconds - 100
    assert "which of its 3 version(s)" in said[-1]

    started.clear()
    old = {**good, "torch": "2.13.1", "torchvision": "0.28.0"}
    assert len(across_packages(start, old, {**good, "torch": "2.14.1", "torchvision": "0.29.1"},
                               [("torch", "torchvision")], Settings(), tmp_path / "t.json", said.append)) == 1
    assert [p.key for p in started[0][0]][-1] == "numpy==2.0.0,scipy==1.15.0,torch==2.14.1,torchvision==0.29.1"
    assert said[-1] == "  torch, torchvision moved together: their versions are not bisected one by one"


SECONDS_PER_STEP = {"0": 0.2, "1": 0.5, "2": 0.2, "3": 0.35}
"""A regression to 0.4 of the good end's speed (point 1), its revert (2), then a second one to 0.57 (3)."""
JITTER = [1.0, 1.01, 0.995, 1.005, 0.99, 1.0, 1.008, 0.992, 1.003, 0.997, 1.006]


class Node:
    """Launch outcomes of fixed speeds, as :mod:`bench_tests.unit.session.test_pair_rounds` has them:
    a point's launch runs at the seconds per step its variable X names, jittered by under 1%; the
    launch numbered ``interrupt_at`` is a Ctrl-C instead."""

    def __init__(self, interrupt_at=None):
        self.launched, self.interrupt_at = [], interrupt_at

    def prepare(self):
        return SimpleNamespace(current_environment=Environment(label="current", source=Path("."),
                                                               launch_environment={}, commit=None))

    def launch_in(self, cell, environment, place):
        if len(self.launched) == self.interrupt_at:
            raise KeyboardInterrupt
        point = environment.launch_environment["X"]
        step = SECONDS_PER_STEP[point] * JITTER[len(self.launched) % len(JITTER)]
        self.launched.append(point)
        record = {"rank": 0, "step_times": [step] * 8, "images": 128, "window_s": 8 * step, "losses": [1.0] * 8,
                  "data_wait": [0.0] * 8}
        return CellRun(cell=cell, launcher="mpirun", command=[], status="ok", records=[record], error=None,
                       wall_s=1.0, log_path=Path("log"), token="t", orphans_killed=[])


CELL = Cell(framework="ddp", loader="synthetic", model="resnet44", ranks=1)
QUICK = Settings(rounds=6, max_rounds=6, verify_pairs=6, min_effect=0.03)


def env_points(*values):
    return [Point(key=f"X={value}", short=f"X={value}", parts=(f"env:X={value}",), label=f"X={value}")
            for value in values]


def bound(**changes):
    settings = {"workload": Workload(image_size=32, batch_size=8, steps=5), "launcher": "mpirun",
                "cores_per_rank": 1, "device": "auto", "system": "vm", "launch_environment": {"OMP_NUM_THREADS": "1"},
                "packages": {"torch": "2.14.1", "numpy": "2.1.3"}, "harness_code": "5a51a6d05992df31",
                "settings": QUICK, **changes}
    return launch_settings(**settings)


def test_a_state_is_refused_under_other_launch_settings_naming_each(tmp_path):
    """Rounds of two set-ups are never mixed: a resume under another workload, launcher, launch
    variable, minimum effect or installed package is refused, each difference named; the budget
    and the seed are not launch settings."""
    state = tmp_path / "state.json"
    points = env_points(0, 1)
    Bisect(Node(), CELL, tmp_path, points, QUICK, state, settings_bound=bound()).save()
    other = bound(workload=Workload(image_size=32, batch_size=8, steps=7), launcher="srun", launch_environment={},
                  packages={"torch": "2.14.1", "numpy": "2.2.0"}, settings=dataclasses.replace(QUICK, min_effect=0.05))
    with pytest.raises(BisectError) as refused:
        Bisect(Node(), CELL, tmp_path, points, QUICK, state, settings_bound=other)
    assert str(refused.value) == (
        f"the state file {state} was written under other settings (launch env OMP_NUM_THREADS: 1 -> (none); "
        "launcher: mpirun -> srun; min effect: 0.03 -> 0.05; package numpy: 2.1.3 -> 2.2.0; workload steps: 5 -> 7): "
        "its rounds cannot be mixed with these; run with its settings to go on, or name another --state to start "
        "afresh")
    assert bound(settings=dataclasses.replace(QUICK, max_launches=1, max_seconds=5.0)) == bound()
    said = []
    Bisect(Node(), CELL, tmp_path, points, dataclasses.replace(QUICK, max_launches=9), state, settings_bound=bound(),
           seed=3, say=said.append)
    assert said == [f"dlscale-bisect: going on from {state} (0 step(s), 0 launch(es) done)"]
    kept = json.loads(state.read_text())
    assert kept["binding"]["settings"]["workload steps"] == 5 and len(kept["binding"]["digest"]) == 16


def test_a_verification_interrupted_goes_on_from_the_pairs_it_kept(tmp_path):
    """Ctrl-C in the fourth pair of the verification (a range of one commit goes straight to it):
    the three pairs before it are in the state, and the bisect started again measures only the
    three more its first look needs."""
    state = tmp_path / "state.json"
    points = env_points(0, 1)
    with pytest.raises(KeyboardInterrupt):  # after the ends' launch each (their work) and three pairs
        Bisect(Node(interrupt_at=9), CELL, tmp_path, points, QUICK, state, settings_bound=bound(), seed=1).run()
    kept = json.loads(state.read_text())
    assert kept["verifying"]["point"] == "X=1" and len(kept["verifying"]["result"]["pairs"]) == 3
    assert kept["verifying"]["result"]["looks"] == [] and kept["launches"] == 9 and not kept["culprits"]
    assert kept["by"] == "time"  # the ends' records count no work: placed by speed

    node, said = Node(), []
    done = Bisect(node, CELL, tmp_path, points, QUICK, state, settings_bound=bound(), seed=1, say=said.append).run()
    assert len(node.launched) == 6 and sorted(node.launched) == ["0"] * 3 + ["1"] * 3
    culprit, = done["culprits"]
    assert culprit["verified"] and culprit["verdict"] == "regressed" and len(culprit["pairs"]) == 6
    assert culprit["looks"] == [6] and culprit["launches"] == 13 and done["launches"] == 15
    assert culprit["ratio"]["ratio"] == pytest.approx(0.4, rel=0.02)
    assert done["verifying"] is None and done["done"] and done["accounting"] is None  # one commit: no step
    assert "  X=1: going on from the 3 pair(s) its verification kept" in said


def test_a_verification_cut_by_the_budget_keeps_its_looks_and_goes_on(tmp_path):
    """The budget stops the verification between its looks at 6 and 12 pairs (its pairs' first
    launch charges for both, so no pair is cut in two); with more budget it goes on from the six
    pairs and their look."""
    state = tmp_path / "state.json"
    points, noisy = env_points(0, 2), dataclasses.replace(QUICK, max_rounds=12, max_launches=15)
    SECONDS_PER_STEP["2"] = 0.2 * 1.05  # 5% slower: 6 pairs of up to 12 have no interval at their look's level
    try:
        with pytest.raises(BudgetSpent, match="the budget is spent \\(14 launches of 15"):
            Bisect(Node(), CELL, tmp_path, points, noisy, state, settings_bound=bound(settings=noisy), seed=2).run()
        kept = json.loads(state.read_text())
        assert len(kept["verifying"]["result"]["pairs"]) == 6 and kept["verifying"]["result"]["looks"] == [6]
        again = PairedResult.from_json(kept["verifying"]["result"], CELL, Node().prepare().current_environment)
        assert again.verdict.kind == "inconclusive" and again.verdict.look.looks == (6,) and again.launches == 12
        assert again.to_json()["pairs"] == kept["verifying"]["result"]["pairs"] and again.seed == \
            kept["verifying"]["result"]["seed"]
        more = dataclasses.replace(noisy, max_launches=100)
        node = Node()
        done = Bisect(node, CELL, tmp_path, points, more, state, settings_bound=bound(settings=noisy), seed=2).run()
    finally:
        SECONDS_PER_STEP["2"] = 0.2
    assert len(node.launched) == 12 and len(done["culprits"][0]["pairs"]) == 12
    assert done["culprits"][0]["looks"] == [6, 12]


def test_a_regression_fixed_later_then_a_second_one_names_the_second_as_the_one_that_stayed(tmp_path):
    """Points 0-3: a regression to 0.4 (1), its revert (2), a second regression to 0.57 (3). The
    first step's midpoint (1) runs slower than the bad end: a change went each way, both halves are
    searched; point 1 is a culprit undone by the fix at 2, point 3 the culprit that stayed, and the
    three account for the range's 0.57."""
    said = []
    done = Bisect(Node(), CELL, tmp_path, env_points(0, 1, 2, 3), QUICK, tmp_path / "state.json",
                  settings_bound=bound(), seed=4, say=said.append).run()
    assert [step["placement"] for step in done["steps"]] == ["beyond", "beyond"]
    assert [(c["point"], c["verified"], c.get("undone_by")) for c in done["culprits"]] == [("X=1", True, "X=2"),
                                                                                          ("X=3", True, None)]
    assert [(f["point"], f["verdict"]) for f in done["fixes"]] == [("X=2", "improved")]
    assert done["accounting"]["holds"], done["accounting"]
    assert succeeded([done])
    _, first, fix, second, accounted = report([done]).splitlines()
    assert re.match(r"  culprit X=1: verified \(made it slower: current/reference 0\.(39|40)", first) and \
        first.endswith("; undone later by X=2")
    assert re.match(r"  fix X=2: verified \(made it faster: current/reference 2\.[45]", fix) and second.startswith("  culprit X=3: verified")
    assert accounted.startswith("  the changes found account for the range's: 0.5")
    assert any(line.startswith("step 1: 2 point(s) between X=0 and X=3; midpoint X=1: beyond; a change each way")
               for line in said)


def test_a_bisect_whose_changes_do_not_account_for_the_range_has_not_succeeded():
    state = {"culprits": [{"verified": True}], "fixes": [], "unresolved": [],
             "accounting": {"holds": False, "message": "the culprits account for ..."}}
    assert not succeeded([state]) and succeeded([{**state, "accounting": {"holds": True}}])
    assert succeeded([{**state, "accounting": None}])  # a range of one commit: its verification is the range's


class WorkNode(Node):
    """Launches whose ranks count their step's work: the points from ``widened`` on do 6% more
    convolution FLOPs and run 5% slower (a wider layer)."""

    def __init__(self, widened: int):
        super().__init__()
        self.widened = widened

    def launch_in(self, cell, environment, place):
        point = int(environment.launch_environment["X"])
        wider = point >= self.widened
        step = 0.2 * (1.05 if wider else 1.0) * JITTER[len(self.launched) % len(JITTER)]
        self.launched.append(str(point))
        flops = 1060 if wider else 1000
        work = {"flops": {"total": flops, "by_operator": {"aten::convolution": flops}},
                "operators": {"aten::convolution": 20}, "not_counted": {}, "cost_s": 0.1}
        record = {"rank": 0, "step_times": [step] * 8, "images": 128, "window_s": 8 * step, "losses": [1.0] * 8,
                  "data_wait": [0.0] * 8, "work": work}
        return CellRun(cell=cell, launcher="mpirun", command=[], status="ok", records=[record], error=None,
                       wall_s=1.0, log_path=Path("log"), token="t", orphans_killed=[])


def test_where_the_ends_count_other_work_each_midpoint_is_placed_by_one_launch():
    """Seven commits, the fifth widening a layer: the ends' work differs, so each midpoint is one
    launch placed by its work, and the range's ends are put to an A/B of their own (its slowdown);
    the change of work is a culprit because its pairs say it made the step slower, and it accounts
    for the range's slowdown, so no range of the same work is searched by time."""
    node, said = WorkNode(widened=5), []
    done = Bisect(node, CELL, Path("."), env_points(*range(7)), QUICK, Path(tempfile.mkdtemp()) / "state.json",
                  settings_bound=bound(), seed=5, say=said.append).run()
    assert done["by"] == "work" and all(step["placed_by"] == "work" for step in done["steps"])
    assert all(step["rounds"] == [] for step in done["steps"])  # one launch a point, no rounds
    culprit, = done["culprits"]
    assert (culprit["point"], culprit["verified"], culprit["verdict"]) == ("X=5", True, "regressed")
    assert re.match(r"work: \+6\.0% FLOPs \(aten::convolution\), operators the same; speed: regressed, "
                    r"current/reference 0\.9[45]", culprit["evidence"]), culprit["evidence"]
    assert done["range_speed"]["verdict"] == "regressed" and done["accounting"]["holds"]
    assert done["not_searched"] and not done["same_speed"] and not done["work_changes"]
    points_launched = len(set(node.launched))
    assert points_launched <= 5
    assert done["launches"] == points_launched + 2 * len(culprit["pairs"]) + done["range_speed"]["launches"]
    assert said[0].startswith("dlscale-bisect: the ends differ in the work a step does (work: +6.0% FLOPs")
    assert any(line.startswith("culprit X=5: verified against X=4: work: +6.0% FLOPs") for line in said)
    assert succeeded([done])


def test_by_work_is_refused_where_the_ends_count_the_same_work():
    with pytest.raises(BisectError, match="--by work: the ends count the same work"):
        Bisect(WorkNode(widened=9), CELL, Path("."), env_points(0, 1, 2), dataclasses.replace(QUICK, by="work"),
               Path(tempfile.mkdtemp()) / "state.json", settings_bound=bound()).run()


class InstructionNode(WorkNode):
    """The same node, whose launches under callgrind count 897 M instructions a step (1 in 10,000
    apart from launch to launch), 3.4% more from the widened commit on."""

    def launch_counting_instructions(self, cell, environment, place):
        point = environment.launch_environment["X"]
        self.launched.append(f"instructions {point}")
        count = round((930_000_000 if int(point) >= self.widened else 897_000_000) * (1 + 1e-4 * (len(self.launched) % 2)))
        record = {"rank": 0, "instructions": {"per_step": count, "steps": [count, count], "files": ["c.out.2"]}}
        return CellRun(cell=cell, launcher="mpirun", command=[], status="ok", records=[record], error=None,
                       wall_s=60.0, log_path=Path("log"), token="t", orphans_killed=[])


def test_by_instructions_each_midpoint_is_one_launch_under_callgrind_placed_by_its_count():
    needs("callgrind", missing_tools())
    node, said = InstructionNode(widened=5), []
    done = Bisect(node, CELL, Path("."), env_points(*range(7)), dataclasses.replace(QUICK, by="instructions"),
                  Path(tempfile.mkdtemp()) / "state.json", settings_bound=bound(), seed=5, say=said.append).run()
    assert done["by"] == "instructions" and all(step["placed_by"] == "instructions" for step in done["steps"])
    culprit, = done["culprits"]
    assert (culprit["point"], culprit["verified"]) == ("X=5", True)
    assert culprit["evidence"].startswith("instructions: +3.6")
    counted = [point for point in node.launched if point.startswith("instructions")]
    assert len(counted) == len(set(counted)) <= 5  # one launch a point, kept
    assert said[0].startswith("dlscale-bisect: the ends differ in their host instructions (instructions: +3.6")


def test_by_instructions_is_refused_where_the_ends_count_alike():
    needs("callgrind", missing_tools())
    with pytest.raises(BisectError, match="--by instructions: the ends count the same"):
        Bisect(InstructionNode(widened=9), CELL, Path("."), env_points(0, 1, 2),
               dataclasses.replace(QUICK, by="instructions"), Path(tempfile.mkdtemp()) / "state.json",
               settings_bound=bound()).run()


class BusyNode(Node):
    """The node above, where the launches named in ``busy`` (a point and which of its launches)
    share their core with outside work, 40% of each step, and those in ``failing`` fail."""

    def __init__(self, busy=(), failing=()):
        super().__init__()
        self.busy, self.failing = set(busy), set(failing)

    def launch_in(self, cell, environment, place):
        run = super().launch_in(cell, environment, place)
        point = self.launched[-1]
        which = (point, self.launched.count(point))
        if which in self.failing:
            return dataclasses.replace(run, status="failed", records=[], error="rank 0: RuntimeError: boom\ntraceback")
        record, = run.records
        record.update(outside_cpu=[(0.4 if which in self.busy else 0.0) * record["step_times"][0]] * 8, cores=[0])
        return run


LIKE_GOOD_RANGE = env_points(0, 2, 1)
"""Good end 0.2 s a step, midpoint 0.2 s, bad end 0.5 s: the midpoint runs like the good end. The
ends are launched once each for their counted work before the rounds."""


def test_a_steps_round_with_outside_work_is_left_out_and_made_up_for(tmp_path):
    """The A/B core measures a step's rounds: a round one of whose launches shared its core with
    outside work is left out, named with each point's share, and made up for."""
    done = Bisect(BusyNode(busy={("2", 2)}), CELL, tmp_path, LIKE_GOOD_RANGE, QUICK, tmp_path / "state.json",
                  settings_bound=bound(), seed=6).run()
    step, = done["steps"]
    assert step["placement"] == "like-good" and len(step["rounds"]) == 6
    left_out, = step["left_out"]
    assert left_out["pair"] == 1 and "contended (more than" in left_out["why"]
    assert left_out["outside_share"]["mid"] == pytest.approx(0.4, rel=0.05) and left_out["outside_share"]["good"] == 0
    assert len(step["launch_log"]) == 3 * 7


def test_a_midpoint_whose_launch_fails_is_skipped_on_that_failure(tmp_path):
    """A failed launch is evidence: the midpoint's first failure ends its rounds, named with its
    round, and the midpoint is skipped (as ``git bisect skip``); the next candidate is tried."""
    said = []
    done = Bisect(BusyNode(failing={("2", 2)}), CELL, tmp_path, env_points(0, 2, 3, 1), QUICK,
                  tmp_path / "state.json", settings_bound=bound(), seed=6, say=said.append).run()
    first = done["steps"][0]
    skipped, = first["skipped"]
    assert skipped["point"] == "X=2" and first["mid"] == "X=3"
    assert re.fullmatch(r"its launch failed: the mid side's launch failed in round 2 \([a-z,]+\)[^:]*: rank 0: "
                        r"RuntimeError: boom; failed launches: good 0, mid 1, bad 0", skipped["why"]), skipped["why"]
    assert any(line.startswith("  skipped X=2: its launch failed") for line in said)


def test_a_range_end_whose_launch_fails_ends_the_bisect_naming_it(tmp_path):
    """An end's launch that fails (its second, in the rounds' first) ends the bisect with the
    failure, its rounds kept in the state."""
    with pytest.raises(BisectError, match=r"the range's bad end X=1 cannot be launched: the bad side's launch failed "
                                          r"in round 1 \("):
        Bisect(BusyNode(failing={("1", 2)}), CELL, tmp_path, LIKE_GOOD_RANGE, QUICK, tmp_path / "state.json",
               settings_bound=bound(), seed=6).run()
    kept = json.loads((tmp_path / "state.json").read_text())
    assert kept["current"]["failed"][0]["side"] == "bad" and kept["current"]["error"]


def test_a_state_is_refused_under_another_harness_code(tmp_path):
    state = tmp_path / "state.json"
    Bisect(Node(), CELL, tmp_path, env_points(0, 1), QUICK, state, settings_bound=bound()).save()
    with pytest.raises(BisectError, match="harness code: 5a51a6d05992df31 -> 0123456789abcdef"):
        Bisect(Node(), CELL, tmp_path, env_points(0, 1), QUICK, state,
               settings_bound=bound(harness_code="0123456789abcdef"))
