"""Where and with what a figure was measured: host, software versions, git commit."""
from __future__ import annotations

import datetime
import functools
import hashlib
import importlib.metadata
import json
import platform
import socket
import subprocess
from pathlib import Path
from typing import Iterable

from harness.common.commands import command_output
from harness.machine.node import cpu_model

def package_versions(tracked: Iterable[str]) -> dict[str, str]:
    """The installed versions of the ``tracked`` distributions (a ``*`` pattern: every match). Which
    distributions matter is the ranks' to say (:func:`harness.rank.packages.tracked_packages`): the
    caller passes them, so that the machine layer needs no framework's or loader's registry."""
    versions = {"python": platform.python_version()}
    tracked = list(tracked)
    for name in (name for name in tracked if not name.endswith("*")):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    prefixes = tuple(name[:-1] for name in tracked if name.endswith("*"))
    if prefixes:
        for distribution in importlib.metadata.distributions():
            name = distribution.metadata["Name"] or ""
            if name.lower().startswith(prefixes):
                versions[name.lower()] = distribution.version
    return versions


def distribution_key(name: str) -> str:
    """A distribution's name as package sets key it: ``Foo_Bar`` and ``foo-bar`` are one."""
    return name.lower().replace("_", "-")


def installed_packages() -> dict[str, str]:
    """Every distribution this interpreter's environment holds, by normalised name, with its version:
    what rebuilding the environment takes (the tracked few of :func:`package_versions` say less)."""
    found = {}
    for distribution in importlib.metadata.distributions():
        name = distribution.metadata["Name"]
        if name:
            found[distribution_key(name)] = distribution.version
    return {"python": platform.python_version(), **dict(sorted(found.items()))}


def environment_id(packages: dict[str, str]) -> str:
    """A package set's content hash: the name of its record beside the baselines."""
    return hashlib.sha256(json.dumps(packages, sort_keys=True).encode()).hexdigest()[:16]


def git_commit(repo: Path) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


@functools.lru_cache(maxsize=8)
def version_text(executable: str) -> str | None:
    """``EXECUTABLE --version`` as it printed it, asked once per process (the launcher's check and
    the fingerprint both read ``mpirun``'s)."""
    return command_output([executable, "--version"])


def provenance(repo: Path, packages: dict[str, str] | None = None, *, tracked: Iterable[str]) -> dict:
    """Where and with what: ``versions`` those of the ``tracked`` distributions
    (:func:`package_versions`), ``environment`` names the full package set (:func:`environment_id`)
    that ``harness.store.environments`` keeps beside the baselines."""
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "cpu": cpu_model(),
        "git_commit": git_commit(repo),
        "versions": package_versions(tracked),
        **({"environment": environment_id(packages)} if packages is not None else {}),
    }
