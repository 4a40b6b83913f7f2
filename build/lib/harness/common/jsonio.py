"""JSON files written so that a reader never sees half a file."""
from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from harness.common.interrupts import INTERRUPTS


TEMPORARY_SUFFIX = ".tmp"


def finite_number(value: Any) -> bool:
    """A number dlscale can compute with, as JSON gives it: an int or float, not a bool, not NaN or
    infinite."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def finite_or_none(value: Any) -> Any:
    """``value`` where it is a finite number, else ``None`` (JSON has no infinity)."""
    return value if finite_number(value) else None


def write_json_atomic(path: Path, data: Any) -> None:
    path = Path(path)
    with INTERRUPTS.writing():
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMPORARY_SUFFIX)
        try:
            os.fchmod(handle, _mode_of(path))
            with os.fdopen(handle, "w") as stream:
                json.dump(data, stream, indent=2, sort_keys=False)
                stream.write("\n")
                stream.flush()
                os.fsync(stream.fileno())
            os.replace(temporary, path)
        except BaseException:
            try:
                os.unlink(temporary)
            except FileNotFoundError:
                pass
            raise


def _mode_of(path: Path) -> int:
    """The replaced file's permissions, or rw-r--r-- (mkstemp's own 0600 would lock out the other
    users of a shared baselines directory)."""
    try:
        return path.stat().st_mode & 0o777
    except FileNotFoundError:
        return 0o644


def remove_orphaned_temporaries(directory: Path) -> list[Path]:
    """Remove the temporary files that writers killed mid-write left in ``directory`` (a process
    SIGKILLed between creating its temporary file and renaming it cannot remove it itself). Only
    for a directory whose writers are known to be gone, such as a cell's after its processes
    were ended."""
    removed = []
    for temporary in Path(directory).glob(f".*.json.*{TEMPORARY_SUFFIX}"):
        try:
            temporary.unlink()
            removed.append(temporary)
        except FileNotFoundError:
            continue
    return removed
