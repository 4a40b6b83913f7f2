"""Where a rank's threads stood when it was ended or fell silent, for the runner's error.

faulthandler's C code writes the stacks (every Python thread's), so a rank stuck inside a
collective, with its interpreter unable to run Python, still says where it is. Two files per rank in
the launch directory:

- ``terminated-rank<R>.txt``: written when SIGTERM arrives (its launcher ending it because a peer
  failed, the runner's clean-up of a hung or interrupted cell), before SIGTERM's default action
  ends the process as it would have anyway;
- ``silent-rank<R>.txt``: written by faulthandler's watchdog thread when the rank has reported no
  progress for ``silent_after_s`` (the watch starts over at each report), so that a hang says where
  each rank stood even under a launcher that SIGKILLs its ranks at once (srun) and on other nodes.

A rank that ends normally removes both; after a failed launch the runner reads the non-empty ones
and removes the rest (:func:`where_ranks_stood`). Each costs one open file and, for the silent
watch, one watchdog thread restarted at most once a second (0.18 ms each time here).
"""
from __future__ import annotations

import faulthandler
import os
import signal
from pathlib import Path

KINDS = ("terminated", "silent")
SHOWN_LINES = 16
"""Frames of a rank's dump the runner's error shows (the innermost frames of each thread come first)."""


class StackDumps:
    """The rank's two dumps, armed from construction until :meth:`close`."""

    def __init__(self, directory: Path, label: str, silent_after_s: float | None):
        self._paths = {kind: Path(directory) / f"{kind}-{label}.txt" for kind in KINDS}
        self._terminated = open(self._paths["terminated"], "wb", buffering=0)
        faulthandler.register(signal.SIGTERM, file=self._terminated, all_threads=True, chain=True)
        # A forked child (a DataLoader worker) inherits the handler and the file: its own SIGTERM at
        # the loader's shut-down must not write into the rank's dump.
        os.register_at_fork(after_in_child=_unregister_in_child)
        self.silent_after_s = silent_after_s
        self._silent = open(self._paths["silent"], "wb", buffering=0) if silent_after_s else None
        self.progressed()

    def progressed(self) -> None:
        """The rank reported progress: the silence starts over, and a dump an earlier silence left
        (one the rank came out of) is dropped."""
        if self._silent is None:
            return
        fd = self._silent.fileno()
        if os.fstat(fd).st_size:
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
        faulthandler.dump_traceback_later(self.silent_after_s, file=self._silent)

    def close(self) -> None:
        """The rank is ending normally: no dump from here on, and no empty file left behind."""
        faulthandler.cancel_dump_traceback_later()
        faulthandler.unregister(signal.SIGTERM)
        for handle in (self._terminated, self._silent):
            if handle is not None:
                handle.close()
        for path in self._paths.values():
            if path.exists() and path.stat().st_size == 0:
                path.unlink()


def _unregister_in_child() -> None:
    faulthandler.unregister(signal.SIGTERM)


def where_ranks_stood(directory: Path) -> dict[str, dict[str, str]]:
    """Each rank's dumps in a launch directory: ``{"rank1": {"silent": text}}``. The empty files
    of ranks that never needed them (or were SIGKILLed) are removed."""
    found: dict[str, dict[str, str]] = {}
    for kind in KINDS:
        for path in sorted(Path(directory).glob(f"{kind}-*.txt")):
            try:
                text = path.read_text(errors="replace").strip()
                if not text:
                    path.unlink()
            except OSError:
                continue
            if text:
                found.setdefault(path.stem.removeprefix(f"{kind}-"), {})[kind] = text
    return found


def describe(stood: dict[str, dict[str, str]], silent_after_s: float | None) -> str:
    """The runner's account of the dumps: where each rank stood when it fell silent, when its
    launcher terminated it, or both (shown once where they are the same place), each cut to its
    first lines."""
    parts = []
    for label in sorted(stood, key=_rank_order):
        dumps = {kind: _frames(text) for kind, text in stood[label].items()}
        said = {"silent": f"reported no progress for {silent_after_s:g} s", "terminated": "was terminated (SIGTERM)"}
        if len(dumps) == 2 and dumps["silent"] == dumps["terminated"]:
            dumps = {"silent and terminated": dumps["silent"]}
            said["silent and terminated"] = f"{said['silent']}, then {said['terminated']},"
        for kind, lines in dumps.items():
            shown = "\n".join(f"    {line}" for line in lines[:SHOWN_LINES])
            more = f"\n    ... ({len(lines) - SHOWN_LINES} more lines)" if len(lines) > SHOWN_LINES else ""
            parts.append(f"{label} {said[kind]} while at:\n{shown}{more}")
    return "\n".join(parts)


def _frames(text: str) -> list[str]:
    """A dump's lines as two dumps of the same place have them alike: without faulthandler's
    "Timeout (0:00:10)!" and with "Current thread" (the one SIGTERM interrupted) as "Thread"."""
    return [line.replace("Current thread 0x", "Thread 0x", 1) for line in text.splitlines()
            if line.strip() and not line.startswith("Timeout (")]


def _rank_order(label: str) -> tuple[int, str]:
    digits = label.removeprefix("rank")
    return (int(digits), label) if digits.isdigit() else (1 << 30, label)
