"""Several sessions sharing one baselines directory and one history store: real processes, started
together, each writing what a session writes; nothing may be lost or torn."""
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from harness.common.filelock import LockTimeout, lock_path, locked
from harness.store.baselines import BaselineError, BaselineFile
from harness.store.history import read as read_history

REPO = Path(__file__).resolve().parents[3]

SLOW_AND_MAYBE_UNLOCKED = """
import contextlib, functools, sys, time

def slowed(function, seconds):
    @functools.wraps(function)
    def slow(*args, **kwargs):
        time.sleep(seconds)  # widens the window in which another writer could slip in
        return function(*args, **kwargs)
    return slow

def without_the_lock(module):
    # the negative control: the same writer with its lock taken out
    if sys.argv[4] == "unlocked":
        module.locked = lambda path, **kwargs: contextlib.nullcontext()
"""

HISTORY_WRITER = SLOW_AND_MAYBE_UNLOCKED + """
from pathlib import Path
import harness.store.history as history

history._write_all = slowed(history._write_all, 0.001)
without_the_lock(history)
path, start, writer = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
while not start.exists():
    time.sleep(0.01)
for batch in range(40):  # a session appends all its cells' rows at once
    history.append(path, [history.make_row(f"cell-{writer}", run_id=f"{writer}-{batch}-{n}", verdict="pass")
                          for n in range(10)])
"""

BASELINE_WRITER = SLOW_AND_MAYBE_UNLOCKED + """
from pathlib import Path
import harness.store.baselines as baselines_module
from harness.store.baselines import BaselineFile

BaselineFile.updated = slowed(BaselineFile.updated, 0.2)
without_the_lock(baselines_module)
path, start, cell = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
baselines = BaselineFile.load(path, "shared")  # read at the session's start, as the suite does
while not start.exists():
    time.sleep(0.01)
baselines.update([{"cell": cell, "metrics": {"throughput": 10.0}, "config_hash": "h", "config": {},
                   "provenance": {}}])
"""


def start_writers(script: str, target: Path, start: Path, names: list[str], lock: str) -> list[subprocess.Popen]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    return [subprocess.Popen([sys.executable, "-c", textwrap.dedent(script), str(target), str(start), name, lock],
                             env=env, stderr=subprocess.PIPE, text=True) for name in names]


def release_and_wait(writers: list[subprocess.Popen], start: Path) -> None:
    time.sleep(1.5)  # let every writer get to the start line (a late one still writes, only later)
    start.touch()
    for writer in writers:
        _, err = writer.communicate(timeout=240)
        assert writer.returncode == 0, err


def append_history_from_eight_writers(tmp_path: Path, lock: str) -> tuple[list[dict], list]:
    """Eight processes, each appending 40 batches of 10 rows, every line written a millisecond
    after the last."""
    history, start = tmp_path / "shared.jsonl", tmp_path / "go"
    release_and_wait(start_writers(HISTORY_WRITER, history, start, [str(n) for n in range(8)], lock), start)
    return read_history(history)


def torn_batches(rows: list[dict]) -> list[str]:
    """The batches whose rows do not lie together in the file."""
    positions: dict[str, list[int]] = {}
    for position, row in enumerate(rows):
        positions.setdefault(row["run_id"].rsplit("-", 1)[0], []).append(position)
    return sorted(batch for batch, where in positions.items() if where[-1] - where[0] + 1 != len(where))


def test_eight_processes_appending_history_batches_leave_every_row_intact_and_each_batch_together(tmp_path):
    rows, problems = append_history_from_eight_writers(tmp_path, "locked")
    assert problems == []
    assert len(rows) == 8 * 40 * 10
    for writer in range(8):  # each writer's rows complete and in its own order
        assert [row["run_id"] for row in rows if row["cell"] == f"cell-{writer}"] == \
            [f"{writer}-{batch}-{n}" for batch in range(40) for n in range(10)]
    assert torn_batches(rows) == []


def test_without_the_lock_the_same_appends_interleave_their_batches(tmp_path):
    """The negative control of the test above: what its lock prevents happens without it."""
    rows, problems = append_history_from_eight_writers(tmp_path, "unlocked")
    assert problems == [] and len(rows) == 8 * 40 * 10  # each line is still one O_APPEND write
    assert torn_batches(rows), "the batches stayed together without the lock: the test above shows nothing"


def update_baselines_from_eight_writers(tmp_path: Path, lock: str) -> set[str]:
    """Eight processes, each recording another cell into one file they all read before they start;
    each takes 0.2 s between reading the file again and writing it."""
    path, start = tmp_path / "shared.json", tmp_path / "go"
    cells = [f"ddp-synthetic-resnet50-g{n}" for n in range(1, 9)]
    release_and_wait(start_writers(BASELINE_WRITER, path, start, cells, lock), start)
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
    return set(json.loads(path.read_text())["cells"])


def test_concurrent_baseline_updates_of_different_cells_keep_every_cell(tmp_path):
    assert update_baselines_from_eight_writers(tmp_path, "locked") == {f"ddp-synthetic-resnet50-g{n}" for n in range(1, 9)}


def test_without_the_lock_concurrent_baseline_updates_lose_cells(tmp_path):
    """The negative control of the test above."""
    assert len(update_baselines_from_eight_writers(tmp_path, "unlocked")) < 8


def test_a_held_lock_times_out_naming_its_holder(tmp_path):
    path = tmp_path / "shared.json"
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from harness.common.filelock import locked
        with locked(__import__("pathlib").Path({str(path)!r})):
            print("held", flush=True)
            time.sleep(60)
        """)], env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(LockTimeout, match=rf"locked by pid {holder.pid} on .* gave up after 0.2 s"):
            with locked(path, timeout_s=0.2):
                pass
        baselines = BaselineFile.load(path, "shared")
        with pytest.raises(BaselineError, match=rf"baselines not written: .*locked by pid {holder.pid}"):
            baselines.update([{"cell": "ddp-synthetic-resnet50-g1", "metrics": {"throughput": 1.0},
                               "config_hash": "h", "config": {}, "provenance": {}}], lock_timeout_s=0.2)
        assert not path.exists(), "nothing is written without the lock"
    finally:
        holder.kill()
        holder.wait()
    with locked(path, timeout_s=5):  # a dead holder's lock is free: the kernel released it
        assert lock_path(path).exists()
