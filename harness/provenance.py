"""Where and with what a figure was measured: host, software versions, git commit."""
from __future__ import annotations

import datetime
import importlib.metadata
import platform
import socket
import subprocess
from pathlib import Path

TRACKED_PACKAGES = ("torch", "torchvision", "numpy", "deepspeed", "horovod", "nvidia-dali-cuda130",
                    "nvidia-dali-cuda120", "nvidia-dali-cuda110", "mpi4py")


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in TRACKED_PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return versions


def git_commit(repo: Path) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def provenance(repo: Path) -> dict:
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "cpu": cpu_model(),
        "git_commit": git_commit(repo),
        "versions": package_versions(),
    }
