"""harness.rank.stacks in real processes: a rank that falls silent or is terminated says where it
stood, one that keeps reporting or ends normally leaves nothing, and a forked child's SIGTERM (a
DataLoader worker's at shut-down) writes nothing into its rank's dump."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from harness.rank.stacks import describe, where_ranks_stood

REPO = Path(__file__).resolve().parents[3]

RANK = """
import os, signal, sys, time
from pathlib import Path
from harness.rank.stacks import StackDumps

def waiting_for_a_peer():
    time.sleep(60)

dumps = StackDumps(Path(sys.argv[1]), "rank1", float(sys.argv[2]))
{body}
"""


def start(tmp_path: Path, silent_after_s: float, body: str) -> subprocess.Popen:
    code = textwrap.dedent(RANK).format(body=textwrap.dedent(body))
    return subprocess.Popen([sys.executable, "-c", code, str(tmp_path), str(silent_after_s)],
                            env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.PIPE, text=True)


def test_a_silent_then_terminated_rank_says_where_it_stood_once(tmp_path):
    rank = start(tmp_path, 0.5, """
        print("armed", flush=True)
        waiting_for_a_peer()
    """)
    assert rank.stdout.readline() == "armed\n"
    deadline = 100
    while not (tmp_path / "silent-rank1.txt").stat().st_size and deadline:
        deadline -= 1
        __import__("time").sleep(0.1)
    rank.send_signal(signal.SIGTERM)
    assert rank.wait(timeout=30) == -signal.SIGTERM, "the dump must not keep SIGTERM from ending the rank"
    stood = where_ranks_stood(tmp_path)
    assert set(stood) == {"rank1"} and set(stood["rank1"]) == {"silent", "terminated"}
    text = describe(stood, 0.5)
    assert text.startswith("rank1 reported no progress for 0.5 s, then was terminated (SIGTERM), while at:\n")
    assert "in waiting_for_a_peer" in text and text.count("in waiting_for_a_peer") == 1


def test_a_rank_that_keeps_reporting_and_ends_normally_leaves_no_dump(tmp_path):
    rank = start(tmp_path, 0.3, """
        for _ in range(12):
            time.sleep(0.1)
            dumps.progressed()
        dumps.close()
    """)
    assert rank.wait(timeout=30) == 0
    assert list(tmp_path.iterdir()) == []


def test_a_dump_an_earlier_silence_left_is_dropped_when_the_rank_goes_on(tmp_path):
    rank = start(tmp_path, 0.2, """
        time.sleep(0.6)  # silent past 0.2 s: dumped
        assert Path(sys.argv[1], "silent-rank1.txt").stat().st_size
        dumps.progressed()
        print("reported", flush=True)
        time.sleep(60)
    """)
    assert rank.stdout.readline() == "reported\n"
    assert (tmp_path / "silent-rank1.txt").read_text() == ""  # and the next dump is 0.2 s away
    rank.kill()
    rank.wait()


def test_a_forked_childs_sigterm_writes_nothing_into_its_ranks_dump(tmp_path):
    rank = start(tmp_path, 0, """
        child = os.fork()
        if child == 0:
            time.sleep(60)
            os._exit(0)
        time.sleep(0.5)
        os.kill(child, signal.SIGTERM)
        print(os.waitpid(child, 0)[1] == signal.SIGTERM, flush=True)
        print(Path(sys.argv[1], "terminated-rank1.txt").stat().st_size, flush=True)
    """)
    assert rank.stdout.read().split() == ["True", "0"]
    assert rank.wait(timeout=30) == 0
    assert where_ranks_stood(tmp_path) == {} and list(tmp_path.iterdir()) == [], "empty dumps are removed"
