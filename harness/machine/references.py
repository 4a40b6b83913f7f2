"""The environments an A/B comparison launches side by side (``--against``): the current one, and a
reference that differs from it in the project's code (a git commit), in the variables its ranks
get, or both.

A reference is given as parts, each one ``--against`` option:

    git:REF            the project at REF (a commit, branch, tag, ``HEAD~3``): its ``harness`` package,
                       exported once from git into the cache and put first on the ranks' PYTHONPATH
    env:NAME=VALUE     the ranks get NAME=VALUE (over the launch environment, --launch-env)
    env:NAME           the ranks do not have NAME: not from the launch environment, and not from the
                       shell either (the launchers start them with it unset)
    pkg:NAME==VERSION  the ranks run with that version of a distribution, every other one the current
                       (harness.machine.package_sets: built once with uv, kept in the cache)

A reference that cannot be built is a :class:`ReferenceError` with one line naming it, raised
before any launch.
"""
from __future__ import annotations

import dataclasses
import importlib.metadata
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Mapping, Sequence

from harness import HARNESS_SOURCE
from harness.machine import package_sets
from harness.machine.allocation import RESERVED
from harness.machine.provenance import distribution_key, installed_packages, package_versions

FORMS = "git:REF, env:NAME=VALUE, env:NAME or pkg:NAME==VERSION"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class ReferenceError(ValueError):
    """A reference environment that cannot be built: an unknown commit, a malformed part."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Environment:
    label: str
    source: Path
    """The directory whose ``harness`` package the ranks import (first on their PYTHONPATH)."""
    launch_environment: Mapping[str, str]
    """Every variable the ranks get from the suite (the launch environment)."""
    commit: str | None
    unset: tuple[str, ...] = ()
    """The variables the ranks must not have (``env:NAME``), even where the shell exports them."""
    packages: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """The distributions at other versions than the current environment's (name -> version)."""
    python: str | None = None
    """The interpreter the torch runtime's ranks start in where it is not this one: the package set's."""
    dependency_problems: tuple[str, ...] = ()
    """What ``pip check`` says of the package set: a pin that wants other versions of the rest."""

    def to_json(self) -> dict:
        return {"label": self.label, "source": str(self.source), "commit": self.commit,
                "launch_environment": dict(self.launch_environment), "unset": list(self.unset),
                "packages": dict(self.packages),
                "python": self.python, "dependency_problems": list(self.dependency_problems)}


def default_cache() -> Path:
    return Path(os.environ.get("DLSCALE_CACHE") or Path.home() / ".cache" / "dlscale") / "environments"


def current(launch_environment: Mapping[str, str], repo: Path = HARNESS_SOURCE.parent) -> Environment:
    return Environment(label="current", source=HARNESS_SOURCE.parent, launch_environment=dict(launch_environment),
                       commit=commit_of(repo, "HEAD"))


def with_shell_values(parts: Sequence[str], launch_environment: Mapping[str, str],
                      shell: Mapping[str, str]) -> dict[str, str]:
    """The current side's launch environment: ``launch_environment`` with each variable an ``env:``
    part changes that the ``shell`` exports and the table does not set, at the shell's value. The
    current side's ranks get it named (mpirun passes it on with ``-x``, each rank's record says
    what it saw) and the difference says what the reference changed, not ``unset -> unset``."""
    variables = dict(launch_environment)
    for part in parts:
        kind, _, value = part.partition(":")
        name = value.partition("=")[0]
        if kind == "env" and name in shell and name not in variables and _NAME.match(name):
            variables[name] = shell[name]
    return variables


def build(parts: Sequence[str], base: Environment, *, repo: Path = HARNESS_SOURCE.parent,
          cache: Path | None = None) -> Environment:
    """The reference ``parts`` describe, built from ``base`` (the current environment)."""
    if not parts:
        raise ReferenceError(f"--against: no reference given; say one of {FORMS}")
    variables = dict(base.launch_environment)
    source, commit, labels, pins, unset = base.source, base.commit, [], {}, []
    for part in parts:
        kind, _, value = part.partition(":")
        if kind == "git" and value:
            commit = commit_of(repo, value)
            if commit is None:
                raise ReferenceError(f"--against git:{value}: no such commit in {repo}")
            source = _exported(repo, commit, cache or default_cache())
            labels.append(f"git {commit[:10]} ({value})" if not commit.startswith(value) else f"git {commit[:10]}")
        elif kind == "env" and value:
            name, has_value, setting = value.partition("=")
            if not _NAME.match(name):
                raise ReferenceError(f"--against env:{value}: {name!r} is not a variable name")
            if name in RESERVED:
                raise ReferenceError(f"--against env:{value}: {name} is set by the harness for each cell and "
                                     "cannot be changed")
            if name in unset:
                unset.remove(name)
            if has_value:
                variables[name] = setting
                labels.append(f"{name}={setting}")
            else:
                variables.pop(name, None)
                unset.append(name)
                labels.append(f"without {name}")
        elif kind == "pkg" and value:
            try:
                name, version = package_sets.parse_pin(value)
            except package_sets.PackageSetError as error:
                raise ReferenceError(str(error)) from None
            pins[name] = version
            labels.append(f"{name} {version}")
        else:
            raise ReferenceError(f"--against {part}: not a reference; say one of {FORMS}")
    python, problems = None, ()
    if pins:
        try:
            python = package_sets.overlay(pins, installed_packages(), cache or default_cache())
        except package_sets.PackageSetError as error:
            raise ReferenceError(str(error)) from None
        problems = tuple(package_sets.dependency_problems(python))
    return Environment(label="reference: " + ", ".join(labels), source=source, launch_environment=variables,
                       commit=commit, unset=tuple(unset), packages=pins, python=str(python) if python else None,
                       dependency_problems=problems)


def pins_to_rebuild(recorded: Mapping[str, str], current_packages: Mapping[str, str],
                    project: frozenset[str] = frozenset()) -> list[str]:
    """The ``pkg:`` parts that rebuild a recorded package set over the current one. A distribution
    installed since stays (an overlay cannot take one away); the ``project``'s own are left out (its
    code comes from the ``git:`` part). :class:`ReferenceError` where the Python itself differs."""
    if recorded.get("python") not in (None, current_packages.get("python")):
        raise ReferenceError(f"it was recorded with Python {recorded['python']}, this is Python "
                             f"{current_packages.get('python')}: a package set cannot change the interpreter")
    return [f"pkg:{name}=={version}" for name, version in sorted(recorded.items())
            if name != "python" and name not in project and current_packages.get(name) != version]


def project_distributions() -> frozenset[str]:
    """The installed distributions that are this project (those that hold the ``harness`` package)."""
    return frozenset(distribution_key(name) for name in importlib.metadata.packages_distributions().get("harness", ()))


def difference(reference: Environment, current_env: Environment, repo: Path = HARNESS_SOURCE.parent) -> dict:
    """What the current environment changed against the reference: the commits from the reference's
    to the current one (``git log``), each launch variable whose value differs (None: unset), and
    each distribution at another version (None: not installed)."""
    names = sorted(set(reference.launch_environment) | set(current_env.launch_environment))
    variables = {name: [reference.launch_environment.get(name), current_env.launch_environment.get(name)]
                 for name in names if reference.launch_environment.get(name) != current_env.launch_environment.get(name)}
    commits: list[str] = []
    if reference.commit and current_env.commit and reference.commit != current_env.commit:
        commits = _git(repo, "log", "--oneline", "--no-decorate", f"{reference.commit}..{current_env.commit}") \
            .splitlines() or [f"(the current commit {current_env.commit[:10]} is not after the reference's)"]
    installed = package_versions(reference.packages)
    packages = {name: [version, installed.get(name)] for name, version in sorted(reference.packages.items())}
    return {"commits": commits, "launch_environment": variables, "packages": packages}


def describe_difference(diff: Mapping) -> str:
    """The difference in one line, for the summary."""
    parts = []
    if diff.get("commits"):
        parts.append(f"{len(diff['commits'])} commit(s): " + "; ".join(diff["commits"][:5])
                     + (" ..." if len(diff["commits"]) > 5 else ""))
    for name, (was, now) in diff.get("launch_environment", {}).items():
        parts.append(f"{name}: {'unset' if was is None else was} -> {'unset' if now is None else now}")
    for name, (was, now) in diff.get("packages", {}).items():
        parts.append(f"{name} {was} -> {'not installed' if now is None else now}")
    return ", ".join(parts) or "none (an A/A comparison)"


def uncommitted_changes(repo: Path = HARNESS_SOURCE.parent) -> bool:
    """Whether the harness in ``repo`` differs from its commit (``git status`` of ``harness/``)."""
    return bool(_git(repo, "status", "--porcelain", "--untracked-files=no", "--", "harness").strip())


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=60)
    return done.stdout if done.returncode == 0 else ""


def commit_of(repo: Path, ref: str) -> str | None:
    """The commit ``ref`` names in ``repo``; None where it names none (or git is missing)."""
    if shutil.which("git") is None:
        return None
    return _git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}").strip() or None


def _exported(repo: Path, commit: str, cache: Path) -> Path:
    """The ``harness`` package of ``commit``, exported once into ``cache/git-<commit>`` (written
    beside it and renamed, so a cut-short export is never taken for a whole one)."""
    target = cache / f"git-{commit}"
    if (target / "harness" / "__init__.py").is_file():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".git-{commit[:10]}-", dir=cache))
    try:
        archive = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", commit, "harness"],
                                 capture_output=True, timeout=120)
        if archive.returncode != 0:
            said = archive.stderr.decode(errors="replace").strip().splitlines() or [f"exit {archive.returncode}"]
            raise ReferenceError(f"--against git:{commit[:10]}: git archive failed: {said[-1]}")
        subprocess.run(["tar", "-x", "-C", str(staging)], input=archive.stdout, check=True, timeout=120)
        try:
            staging.rename(target)
        except OSError:  # another session exported it meanwhile
            if not (target / "harness" / "__init__.py").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target
