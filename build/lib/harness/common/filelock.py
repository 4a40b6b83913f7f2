"""Advisory file locks, so that several sessions (two partitions' nightlies, a user's run beside
the nightly) can share one baselines directory and one history store without losing a write.

The lock is a separate file beside the one it guards (``.<name>.lock``), because the guarded file
is replaced by a rename on every update and a lock on the old inode would guard nothing. The
holder writes who it is into the lock file, so that a session that gives up can say whom it
waited for. Lock files are never deleted: deleting one lets two sessions hold "the" lock at once.
"""
from __future__ import annotations

import contextlib
import datetime
import fcntl
import os
import socket
import sys
import time
from pathlib import Path
from typing import Iterator

DEFAULT_TIMEOUT_S = 60.0


class LockTimeout(TimeoutError):
    """The lock was still held by another process when the timeout ran out."""


def lock_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.lock")


@contextlib.contextmanager
def locked(path: Path, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> Iterator[None]:
    """Hold the exclusive lock of ``path`` (waiting at most ``timeout_s``) for the body."""
    path = Path(path)
    guard = lock_path(path)
    guard.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(guard, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = os.pread(fd, 1024, 0).decode(errors="replace").strip() or "an unknown process"
                    raise LockTimeout(f"{path} is locked by {holder}; gave up after {timeout_s:g} s (lock file "
                                      f"{guard})") from None
                time.sleep(0.02)
        os.ftruncate(fd, 0)
        os.pwrite(fd, _whoami().encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def _whoami() -> str:
    since = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    command = " ".join(sys.argv)[:200]
    return f"pid {os.getpid()} on {socket.gethostname()} since {since} ({command})\n"
