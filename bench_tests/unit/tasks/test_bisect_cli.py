"""dlscale-bisect's parts that need no launch: a cell id read into the suite's matrix options, the
commits of a range from git, and a state file that belongs to another bisect."""
import json
import subprocess

import pytest

from harness.rank.cell import Cell
from harness.tasks.bisect import Bisect, BisectError, Point, Settings, cell_options, commits_between, version_points


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
    with pytest.raises(BisectError, match="is not older than"):
        version_points("pkg:numpy==2.4.6", "pkg:numpy==2.1.3", listed)
    with pytest.raises(BisectError, match="exact version"):
        version_points("pkg:numpy", "pkg:numpy==2.1.3", listed)
