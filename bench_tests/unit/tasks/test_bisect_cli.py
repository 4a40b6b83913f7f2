"""dlscale-bisect's parts that need no launch: a cell id read into the suite's matrix options, the
commits of a range from git, and a state file that belongs to another bisect."""
import json
import subprocess

import pytest

from harness.rank.cell import Cell
from harness.tasks.bisect import Bisect, BisectError, Settings, cell_options, commits_between


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
    state.write_text(json.dumps({"cell": "ddp-synthetic-resnet20-g1", "commits": shas}))
    with pytest.raises(BisectError, match="is another bisect's"):
        Bisect(None, Cell(framework="ddp", loader="synthetic", model="resnet44", ranks=1), path, shas, Settings(),
               state)
    state.write_text("{not json")
    with pytest.raises(BisectError, match="cannot be read"):
        Bisect(None, Cell(framework="ddp", loader="synthetic", model="resnet44", ranks=1), path, shas, Settings(),
               state)
    assert state.read_text() == "{not json"
