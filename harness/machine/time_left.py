"""How long the session's allocation has left: the end a session's cells must keep inside.

Inside a Slurm job, ``squeue -h -j $SLURM_JOB_ID -o %L`` says the time left (``UNLIMITED``,
``NOT_SET``, ``MM:SS``, ``H:MM:SS`` or ``D-HH:MM:SS``); where squeue does not answer, the job's
``EndTime`` in ``scontrol show job -o`` says when it ends. A CI job outside Slurm states its own end
(``--deadline`` or ``$DLSCALE_DEADLINE``, :func:`explicit_end`).

Parsing is pure; :func:`slurm_end` asks the two commands through an injected ``run``, so tests use
fake answers."""
from __future__ import annotations

import datetime
import re
import subprocess
from typing import Callable, Mapping

DEADLINE_VARIABLE = "DLSCALE_DEADLINE"
NO_LIMIT = ("UNLIMITED", "NOT_SET", "INVALID")
"""What squeue prints for a job that has no end (or none it knows)."""
_DURATION = re.compile(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?")
ASK_TIMEOUT_S = 10.0

Run = Callable[[list[str]], str]
"""Runs a command and returns its standard output; raises ``OSError`` or
``subprocess.SubprocessError`` where it cannot."""


def parse_duration(text: str) -> float:
    """Slurm's time formats as seconds: ``"45"`` (seconds), ``"05:30"`` (MM:SS), ``"1:05:30"``
    (H:MM:SS), ``"2-01:05:30"`` (D-HH:MM:SS), ``"2-01"`` (D-HH); ``ValueError`` for anything else."""
    text = text.strip()
    match = _DURATION.fullmatch(text)
    if not match:
        raise ValueError(f"not a duration: {text!r} (seconds, MM:SS, H:MM:SS or D-HH:MM:SS)")
    days, *fields = match.groups()
    fields = [int(field) for field in fields if field is not None]
    if days is not None:  # after a day, the first field is hours: D-HH, D-HH:MM, D-HH:MM:SS
        fields += [0] * (3 - len(fields))
    units = (1, 60, 3600)[:len(fields)][::-1]
    return int(days or 0) * 86400.0 + float(sum(value * unit for value, unit in zip(fields, units)))


def parse_time_left(text: str) -> float | None:
    """squeue's ``%L``: seconds left, or None for a job without a limit (:data:`NO_LIMIT`)."""
    text = text.strip()
    if text.upper() in NO_LIMIT:
        return None
    return parse_duration(text)


def parse_end_time(scontrol_text: str) -> float | None:
    """The ``EndTime=`` of ``scontrol show job -o`` (the controller's local time) as a Unix time;
    None where it is ``Unknown`` or absent."""
    match = re.search(r"\bEndTime=(\S+)", scontrol_text)
    if not match:
        return None
    try:
        return datetime.datetime.fromisoformat(match.group(1)).timestamp()
    except ValueError:
        return None


def explicit_end(value: str, now: float) -> float | None:
    """A deadline a user states: ``@EPOCH`` (a Unix time, e.g. ``@$(( $(date +%s) + 3300 ))``) or a
    duration from ``now`` in :func:`parse_duration`'s formats; ``none`` for no deadline. Raises
    ``ValueError`` saying the forms."""
    value = value.strip()
    if value.lower() == "none":
        return None
    try:
        return float(value[1:]) if value.startswith("@") else now + parse_duration(value)
    except ValueError:
        raise ValueError(f"not a deadline: {value!r}; give @EPOCH (Unix seconds), a duration from now (seconds, "
                         "MM:SS, H:MM:SS, D-HH:MM:SS), auto or none") from None


def slurm_end(job_id: str, now: float, run: Run) -> float | None:
    """When the Slurm job ``job_id`` ends, as a Unix time: by squeue's time left, else by
    scontrol's ``EndTime``; None where it has no limit or neither command answers."""
    try:
        left = parse_time_left(run(["squeue", "-h", "-j", job_id, "-o", "%L"]))
        return None if left is None else now + left
    except (OSError, subprocess.SubprocessError, ValueError):
        pass
    try:
        return parse_end_time(run(["scontrol", "show", "job", "-o", job_id]))
    except (OSError, subprocess.SubprocessError):
        return None


def run_command(command: list[str]) -> str:
    """:data:`Run` for real: the command's output, ``CalledProcessError`` where it fails."""
    return subprocess.run(command, capture_output=True, text=True, check=True, timeout=ASK_TIMEOUT_S).stdout


def session_end(option: str | None, env: Mapping[str, str], now: float, run: Run = run_command
                ) -> tuple[float | None, str]:
    """When the session must be over, as a Unix time, and where that comes from in words: ``option``
    (``--deadline``), else ``$DLSCALE_DEADLINE``, else ``auto``: the Slurm job's end where
    ``$SLURM_JOB_ID`` names one. None: no deadline. Raises ``ValueError`` for a value of neither form."""
    for value, source in ((option, "--deadline"), (env.get(DEADLINE_VARIABLE), f"${DEADLINE_VARIABLE}")):
        if value and value.strip().lower() != "auto":
            return explicit_end(value, now), source
    job_id = env.get("SLURM_JOB_ID")
    if not job_id:
        return None, "no Slurm job"
    return slurm_end(job_id, now, run), f"the time limit of the Slurm job {job_id}"
