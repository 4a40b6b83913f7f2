"""dlscale-bisect's parts that need no launch: a cell id read into the suite's matrix options, the
commits of a range from git, the versions of a package and the moves between two package sets, the
bisects a move across packages runs, and a state file that belongs to another bisect."""
import json
import subprocess

import pytest

from harness.rank.cell import Cell
from harness.tasks.bisect import Bisect, Settings, across_packages, cell_options
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
        Bisect(None, cell, path, points, Settings(), state)
    state.write_text("{not json")
    with pytest.raises(BisectError, match="cannot be read"):
        Bisect(None, cell, path, points, Settings(), state)
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
