"""Two scaling sessions at once in one checkout, as two partitions' nightlies or a user's run beside
the nightly: both record their cells into one baseline file and one history store, each in its own
session directory."""
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.common.filelock import locked
from harness.store.history import read as read_history

from ..workloads import SCALING_TEST
from .test_suite_flow import G1, G2, TINY_FLAGS

pytestmark = pytest.mark.launch
REPO = Path(__file__).resolve().parents[2]


def test_two_sessions_updating_one_systems_baselines_keep_both_cells(tmp_path):
    """The test holds the baseline file's lock until both sessions have measured their cell, so that
    both updates are pending at once; released, each writes its own cell and keeps the other's."""
    shutil.copy(SCALING_TEST, tmp_path / "test_scaling.py")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    sessions = []
    for ranks in ("1", "2"):
        command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-m", "scaling", "--system", "shared",
                   "--baselines-dir", "baselines", "--history-dir", "history", "--launcher", "torchrun",
                   "--frameworks", "ddp", "--loaders", "synthetic", "--gpus", ranks, "--update-baselines",
                   *TINY_FLAGS]
        with open(tmp_path / f"session-g{ranks}.log", "wb") as log:  # a pipe nobody reads could fill
            sessions.append(subprocess.Popen(command, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT))
    with locked(tmp_path / "baselines" / "shared.json"):
        deadline = time.monotonic() + 400
        while len(list((tmp_path / "results").glob("2*/results.json"))) < 2:  # each session's cell measured
            assert all(session.poll() is None for session in sessions), "a session ended before its update"
            assert time.monotonic() < deadline, "the sessions did not measure their cells in 400 s"
            time.sleep(0.2)
        time.sleep(1.0)  # from its results file to the baseline update is milliseconds
        assert all(session.poll() is None for session in sessions), "a session did not wait for the lock"
    for session, ranks in zip(sessions, ("1", "2")):
        assert session.wait(timeout=600) == 0, (tmp_path / f"session-g{ranks}.log").read_text()[-3000:]

    cells = {G1, G2}
    assert set(json.loads((tmp_path / "baselines" / "shared.json").read_text())["cells"]) == cells
    rows, problems = read_history(tmp_path / "history" / "shared.jsonl")
    assert problems == [] and {row["cell"] for row in rows} == cells
    assert sorted(row["kind"] for row in rows) == ["accepted", "accepted", "night", "night"]  # each recorded, accepted
    session_dirs = sorted(path for path in (tmp_path / "results").iterdir() if not path.is_symlink())
    assert len(session_dirs) == 2, "each session writes into a directory of its own"
    assert sorted(sorted(path.name for path in (d / "cells").iterdir()) for d in session_dirs) == \
        [[G1], [G2]]
    assert all(len(json.loads((d / "results.json").read_text())["cells"]) == 1 for d in session_dirs)
    assert (tmp_path / "results" / "latest").resolve() in session_dirs
    assert list(tmp_path.rglob("*.tmp")) == []
