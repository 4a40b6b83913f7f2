"""Where and with what a figure was measured: host, software versions, git commit, the version of
the code, and every distribution of an interpreter (what rebuilding the environment takes)."""
from __future__ import annotations

import datetime
import functools
import hashlib
import importlib.metadata
import json
import platform
import socket
import subprocess
import sys
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


_PACKAGES_SCRIPT = (
    "import importlib.metadata as m, json, platform\n"
    "found = {d.metadata['Name'].lower().replace('_', '-'): d.version\n"
    "         for d in m.distributions() if d.metadata['Name']}\n"
    "print(json.dumps({'python': platform.python_version(), **dict(sorted(found.items()))}))\n")
""":func:`installed_packages` as a script for another interpreter, which need not see this package."""


@functools.lru_cache(maxsize=None)
def packages_of(python: str) -> dict[str, str] | None:
    """:func:`installed_packages` of another interpreter (a rank runtime's own virtual environment),
    asked of it; this one's where ``python`` is this interpreter; None where it does not answer."""
    if python == sys.executable:
        return installed_packages()
    try:
        done = subprocess.run([python, "-c", _PACKAGES_SCRIPT], capture_output=True, text=True, timeout=120)
        packages = json.loads(done.stdout) if done.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return packages if isinstance(packages, dict) else None


FIGURE_CODE = ("judging/metrics.py", "judging/stats.py", "judging/contention.py", "session/evaluation.py")
"""The modules, within the ``harness`` package, that make a cell's figures from its ranks' records
(the warm-up trim, the launches left out as contended, the pooling, the intervals): a figure stored
on another day and today's are computed alike only where these are the same."""


def code_hash(package: Path, paths: Iterable[str] | None = None) -> str:
    """16 hex digits over a package's Python files, each by its path within the package and its
    bytes (caches left out), or over ``paths`` within it alone (one that is missing counts as such)."""
    files = sorted(path.relative_to(package).as_posix() for path in package.rglob("*.py")
                   if "__pycache__" not in path.parts) if paths is None else sorted(paths)
    digest = hashlib.sha256()
    for name in files:
        path = package / name
        digest.update(name.encode() + b"\0" + (path.read_bytes() if path.is_file() else b"(missing)") + b"\0")
    return digest.hexdigest()[:16]


def code_version(package: Path) -> dict[str, str]:
    """The version of the code a figure was measured and computed with: ``harness``, the hash of the
    whole package (what a git export of the commit must reproduce: an uncommitted change shows), and
    ``figures``, that of :data:`FIGURE_CODE`."""
    return {"harness": code_hash(package), "figures": code_hash(package, FIGURE_CODE)}


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
    that ``harness.store.environments`` keeps beside the baselines, ``code`` the version of the code
    (:func:`code_version`) where ``repo`` is the ``harness`` package's directory."""
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "cpu": cpu_model(),
        "git_commit": git_commit(repo),
        "versions": package_versions(tracked),
        **({"environment": environment_id(packages)} if packages is not None else {}),
        **({"code": code_version(repo)} if (repo / "__init__.py").is_file() else {}),
    }
