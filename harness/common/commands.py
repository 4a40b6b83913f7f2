"""What a short command printed, for the facts read from tools (``mpirun --version``, ``nvidia-smi``)."""
from __future__ import annotations

import subprocess


def command_output(command: list[str], timeout: float = 20) -> str | None:
    """What ``command`` printed (its standard output, else its error output) when it succeeded."""
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    text = (out.stdout or out.stderr).strip()
    return text if out.returncode == 0 and text else None
