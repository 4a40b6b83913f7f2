"""Directories built beside their final place and renamed into it, so that a reader (or a run
interrupted half-way) never sees half of one."""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator


@contextlib.contextmanager
def staged_directory(target: Path) -> Iterator[Path]:
    """An empty sibling of ``target`` to build in. When the block ends normally it replaces
    ``target`` in one rename; when it raises (Ctrl-C included) it is removed and ``target`` is left
    as it was."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
    try:
        staging.chmod(0o777 & ~_umask())  # mkdtemp makes it private; the result should not be
        yield staging
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
