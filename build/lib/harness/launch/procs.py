"""Finding and ending a cell's processes by the run token each of them carries in its environment.

Launchers start ranks in ways a process group does not cover (slurmstepd, DataLoader workers,
MPI daemons), so the token is what the runner trusts to leave nothing behind on this node.
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

TOKEN_VARIABLE = "DLSCALE_RUN_TOKEN"


def processes_with_token(token: str) -> list[int]:
    needle = f"{TOKEN_VARIABLE}={token}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:  # gone, or not ours to read
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def kill_processes_with_token(token: str, *, timeout_s: float = 10.0) -> list[int]:
    """SIGKILL every process carrying ``token``; return the pids that were still alive."""
    killed: list[int] = []
    deadline = time.monotonic() + timeout_s
    while (pids := processes_with_token(token)) and time.monotonic() < deadline:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    return sorted(set(killed))


def main(argv: list[str] | None = None) -> int:
    """``python -m harness.launch.procs sweep TOKEN``: the token sweep on the node it runs on, for a
    launcher that reaches every node of a cell (one task per node); prints one JSON line, the
    node's name and the pids it had to kill."""
    import argparse
    import json
    import socket

    parser = argparse.ArgumentParser(prog="python -m harness.launch.procs")
    parser.add_argument("action", choices=["sweep"])
    parser.add_argument("token")
    args = parser.parse_args(argv)
    killed = kill_processes_with_token(args.token)
    print(json.dumps({"host": socket.gethostname(), "killed": killed,
                      "left": processes_with_token(args.token)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
