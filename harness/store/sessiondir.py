"""Where a session writes: its own directory under the results directory, so that two sessions in
one checkout never share cell files, and ``results/latest`` pointing at the newest one.

Paths given on the command line may carry ``{session}``, the session's name (as ReFrame's report
paths carry ``{sessionid}``), e.g. ``--dlscale-report 'results/{session}/report'``.
"""
from __future__ import annotations

import datetime
import os
from pathlib import Path
from typing import Mapping

LATEST = "latest"


def session_name(env: Mapping[str, str] = os.environ, now: datetime.datetime | None = None,
                 pid: int | None = None) -> str:
    """``<UTC start time>-<Slurm job id or process id>``: sorts by time, unique on a node."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    job = env.get("SLURM_JOB_ID")
    owner = f"job{job}" + (f".{env['SLURM_STEP_ID']}" if env.get("SLURM_STEP_ID") else "") if job else \
        f"pid{pid or os.getpid()}"
    return f"{now:%Y%m%d-%H%M%S}-{owner}"


def expand(path: Path | None, session: str) -> Path | None:
    return Path(str(path).replace("{session}", session)) if path is not None else None


def point_latest(results_dir: Path, session_dir: Path) -> None:
    """Make ``results_dir/latest`` point at ``session_dir``, replacing the link in one rename."""
    session_dir.mkdir(parents=True, exist_ok=True)
    link = results_dir / LATEST
    staging = results_dir / f".{LATEST}.{os.getpid()}"
    if staging.is_symlink():
        staging.unlink()
    staging.symlink_to(os.path.relpath(session_dir, results_dir))
    os.replace(staging, link)
