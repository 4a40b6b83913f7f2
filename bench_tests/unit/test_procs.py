import os
import subprocess
import sys
import uuid

from harness.procs import TOKEN_VARIABLE, kill_processes_with_token, processes_with_token


def test_processes_are_found_and_ended_by_their_token_not_their_parent():
    token = uuid.uuid4().hex
    # A detached grandchild, as slurmstepd or a DataLoader worker would be: not in our process group.
    code = "import subprocess,sys; subprocess.Popen([sys.executable,'-c','import time; time.sleep(60)'], start_new_session=True)"
    subprocess.run([sys.executable, "-c", code], env={**os.environ, TOKEN_VARIABLE: token}, check=True)
    found = processes_with_token(token)
    assert len(found) == 1
    assert kill_processes_with_token(token) == found
    assert processes_with_token(token) == []
