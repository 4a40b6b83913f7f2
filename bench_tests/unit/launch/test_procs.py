import json
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

from harness.launch.procs import TOKEN_VARIABLE, kill_processes_with_token, processes_with_token
from harness.launch.runner import _ran_other_code


def test_processes_are_found_and_ended_by_their_token_not_their_parent():
    token = uuid.uuid4().hex
    # A detached grandchild, as slurmstepd or a DataLoader worker would be: not in our process group.
    code = "import subprocess,sys; subprocess.Popen([sys.executable,'-c','import time; time.sleep(60)'], start_new_session=True)"
    subprocess.run([sys.executable, "-c", code], env={**os.environ, TOKEN_VARIABLE: token}, check=True)
    found = processes_with_token(token)
    assert len(found) == 1
    assert kill_processes_with_token(token) == found
    assert processes_with_token(token) == []


def test_the_sweep_command_ends_its_nodes_processes_and_says_which_it_killed():
    """What a launcher runs as one task on every node of an allocation: ``python -m harness.launch.procs sweep``."""
    token = uuid.uuid4().hex
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                               env={**os.environ, TOKEN_VARIABLE: token}, start_new_session=True)
    try:
        swept = subprocess.run([sys.executable, "-m", "harness.launch.procs", "sweep", token], capture_output=True,
                               text=True, check=True, timeout=60)
        line = json.loads(swept.stdout)
        assert line == {"host": socket.gethostname(), "killed": [sleeper.pid], "left": []}
        assert sleeper.wait(timeout=10) == -9
    finally:
        sleeper.kill()


def test_a_rank_that_ran_other_code_or_another_interpreter_is_named():
    source = Path("/project")
    ours = {"rank": 0, "harness": "/project/harness", "python": "/envs/pkgs-1/bin/python"}
    theirs = {"rank": 1, "harness": "/elsewhere/harness", "python": "/usr/bin/python3"}
    assert _ran_other_code([ours], source, "/envs/pkgs-1/bin/python") == ""
    assert _ran_other_code([ours, theirs], source) == "rank 1 ran the harness in /elsewhere/harness, not /project/harness"
    assert _ran_other_code([ours, theirs], source, "/envs/pkgs-1/bin/python") == (
        "rank 1 ran the harness in /elsewhere/harness, not /project/harness; "
        "rank 1 ran in /usr/bin/python3, not /envs/pkgs-1/bin/python")
