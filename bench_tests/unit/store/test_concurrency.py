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

HISTORY_WRITER = """
import sys, time
from pathlib import Path
from harness.store.history import append, make_row

path, start, writer = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
while not start.exists():
    time.sleep(0.01)
for n in range(1000):
    append(path, [make_row(f"cell-{writer}", run_id=f"{writer}-{n}", verdict="pass")])
"""

BASELINE_WRITER = """
import sys, time
from pathlib import Path
from harness.store.baselines import BaselineFile

path, start, cell = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
baselines = BaselineFile.load(path, "shared")  # read at the session's start, as the suite does
while not start.exists():
    time.sleep(0.01)
baselines.update([{"cell": cell, "metrics": {"throughput": 10.0}, "config_hash": "h", "config": {},
                   "provenance": {}}])
"""


def start_writers(script: str, target: Path, start: Path, names: list[str]) -> list[subprocess.Popen]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    return [subprocess.Popen([sys.executable, "-c", textwrap.dedent(script), str(target), str(start), name], env=env,
                             stderr=subprocess.PIPE, text=True) for name in names]


def release_and_wait(writers: list[subprocess.Popen], start: Path) -> None:
    time.sleep(1.5)  # let every writer get to the start line (a late one still writes, only later)
    start.touch()
    for writer in writers:
        _, err = writer.communicate(timeout=240)
        assert writer.returncode == 0, err


def test_eight_processes_appending_1000_history_rows_each_leave_8000_intact_rows(tmp_path):
    history, start = tmp_path / "shared.jsonl", tmp_path / "go"
    writers = start_writers(HISTORY_WRITER, history, start, [str(n) for n in range(8)])
    release_and_wait(writers, start)
    rows, problems = read_history(history)
    assert problems == []
    assert len(rows) == 8000
    for writer in range(8):  # each writer's rows complete and in its own order
        assert [row["run_id"] for row in rows if row["cell"] == f"cell-{writer}"] == [f"{writer}-{n}" for n in range(1000)]


def test_concurrent_baseline_updates_of_different_cells_keep_every_cell(tmp_path):
    path, start = tmp_path / "shared.json", tmp_path / "go"
    cells = [f"ddp-synthetic-resnet50-g{n}" for n in range(1, 9)]
    writers = start_writers(BASELINE_WRITER, path, start, cells)
    release_and_wait(writers, start)
    assert set(json.loads(path.read_text())["cells"]) == set(cells)
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


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
