"""Where the launches of a duet meet before their timed windows (``--duet``, harness.session.duet).

The two sides of a duet pair start at once, but their start-up (the interpreter, imports, the
framework's rendezvous) takes a few seconds that vary between launches. So each launch's first rank
waits at a gate, a directory both launches were given, before its timed window: it leaves its mark
and waits until every party's mark is there, polling every half millisecond. Their windows then
start within about a millisecond of each other, and whatever the node does during them, both see.
"""
from __future__ import annotations

import os
import socket
import time
from pathlib import Path

PARTIES = 2
POLL_S = 0.0005


class GateTimeout(RuntimeError):
    """A party never came: the other side of the duet failed before its window."""


def timed_out_at_gate(launch_error: str | None) -> bool:
    """Whether a launch's error (its ranks' error reports, as harness.launch.runner joins them)
    holds a :class:`GateTimeout`: its own failure follows from the other side's."""
    return f"{GateTimeout.__name__}: " in (launch_error or "")


def meet(directory: str | Path, parties: int = PARTIES, timeout_s: float = 300.0) -> float:
    """Leave this process's mark at the gate and wait for every party's; the epoch time it opened.
    :class:`GateTimeout` after ``timeout_s`` without all of them."""
    gate = Path(directory)
    (gate / f"{socket.gethostname()}-{os.getpid()}.ready").touch()
    deadline = time.monotonic() + timeout_s
    while len(list(gate.glob("*.ready"))) < parties:
        if time.monotonic() > deadline:
            raise GateTimeout(f"the duet's other side did not reach its timed window within {timeout_s:.0f} s "
                              f"(gate {gate})")
        time.sleep(POLL_S)
    return time.time()
