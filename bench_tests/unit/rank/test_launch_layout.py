"""What a rank reads of its launch (harness.rank.launch_facts) and the layouts its launch environment
can ask for (harness.rank.layout), in real processes."""
import json
import os
import subprocess
import sys
import threading
import time

import pytest

from harness.rank import gate
from harness.rank.launch_facts import LaunchFacts, layout
from harness.rank.layout import ENV_BYTES, ENV_PAD, environment_bytes, padded


def test_the_launch_facts_count_what_the_window_did():
    facts = LaunchFacts()
    pages = [bytearray(1 << 20) for _ in range(16)]  # 16 MiB touched: minor faults
    facts.step()
    read = facts.finish()
    assert read["minor_faults"] > 100 and read["major_faults"] >= 0 and pages
    assert read["involuntary_switches"] >= 0 and read["voluntary_switches"] >= 0
    assert sum(read["ran_on"].values()) == 1 and read["affinity"] == sorted(os.sched_getaffinity(0))
    assert read["steal_share"] is None or 0 <= read["steal_share"] < 1
    assert read["thp"] in ("always", "madvise", "never", None) and read["environment_bytes"] > 0


def test_the_layout_names_the_variables_that_change_it(monkeypatch):
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    monkeypatch.setenv("LD_PRELOAD", "")
    assert layout()["variables"]["PYTHONHASHSEED"] == "0"


def test_an_environment_is_padded_to_the_size_asked():
    env = {"PATH": "/usr/bin", ENV_BYTES: "4096"}
    grown = padded(env, 4096)
    assert environment_bytes(grown) == 4096 and grown["PATH"] == "/usr/bin"
    assert padded(grown, 4096) is None  # in place already: no second execution
    with pytest.raises(ValueError, match="give a larger size"):
        padded({"A": "x" * 5000}, 4096)


SCRIPT = """
import json, os, sys
print(os.getpid(), file=sys.stderr, flush=True)  # before and after the layout's execution
from harness.rank.layout import apply_at_start, environment_bytes
apply_at_start([__file__])
print(json.dumps({"bytes": environment_bytes(dict(os.environ)),
                  "personality": open("/proc/self/personality").read().strip()}))
"""


def _worker_layout(tmp_path, env: dict) -> tuple[dict, list[str]]:
    """A process that applies its layout as the worker does at its start: what it then has, and the
    pid it printed each time it started."""
    script = tmp_path / "start.py"
    script.write_text(SCRIPT)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=True,
                          env={**os.environ, **env})
    return json.loads(done.stdout), done.stderr.split()


def test_a_rank_asked_for_no_address_randomisation_runs_without_it_under_its_own_pid(tmp_path):
    read, pids = _worker_layout(tmp_path, {"DLSCALE_NO_ASLR": "1"})
    assert int(read["personality"], 16) & 0x0040000
    assert len(pids) == 2 and pids[0] == pids[1]  # executed again, the launcher's process still


def test_a_rank_asked_for_an_environment_size_gets_it(tmp_path):
    read, pids = _worker_layout(tmp_path, {ENV_BYTES: "65536"})
    assert read["bytes"] == 65536 and len(pids) == 2
    read, pids = _worker_layout(tmp_path, {})
    assert len(pids) == 1  # nothing asked, nothing executed again


def test_the_duet_gate_opens_once_every_party_is_there(tmp_path):
    opened = []
    other = threading.Thread(target=lambda: opened.append(gate.meet(tmp_path, parties=2)))
    other.start()
    time.sleep(0.2)
    assert not opened  # alone at the gate
    (tmp_path / "elsewhere-1.ready").touch()
    other.join(timeout=5)
    assert opened and abs(opened[0] - time.time()) < 1
    alone = tmp_path / "alone"
    alone.mkdir()
    with pytest.raises(gate.GateTimeout, match="did not reach its timed window"):
        gate.meet(alone, parties=2, timeout_s=0.2)
