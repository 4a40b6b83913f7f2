"""The points a bisect runs (:mod:`harness.tasks.bisect`), good first and bad last, each as the
reference parts that build its environment (:mod:`harness.machine.references`):

- the project's commits along the first-parent line (``--good REF [--bad REF]``);
- one package's versions that the indexes hold (``--good pkg:NAME==A --bad pkg:NAME==B``);
- where two package sets differ in several packages, the moves from one to the other: one package
  at a time, or a group that must move together (:data:`COUPLED`), each point the one before with
  one more move made. The move that slows the cell is then bisected across that package's versions,
  the other packages held as they were on either side of it.
"""
from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from harness.machine import package_sets, references

COUPLED = (
    frozenset({"torch", "torchvision", "torchaudio", "horovod"}),
    frozenset({"tensorflow", "tensorflow-cpu", "keras", "tf-keras", "horovod"}),
    frozenset({"mxnet", "horovod"}),
)
"""Distributions a bisect across packages moves together where both changed: one pins the other's
exact version (torchvision a torch), or was built against it (Horovod against each framework it
serves). ``--together`` adds more."""


class BisectError(ValueError):
    """Bad input, said in one line: an unknown ref or cell, a good end that is not faster."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Point:
    """One candidate of a bisect: a commit or a package version, as the reference parts that build it."""
    key: str
    """The commit's hash, or ``NAME==VERSION`` (several, comma-separated, for a package set)."""
    short: str
    """As the progress lines name it: the hash's first ten digits, or the key."""
    parts: tuple[str, ...]
    label: str


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise BisectError(f"git {' '.join(args)} in {repo}: {done.stderr.strip().splitlines()[-1:] or done.returncode}")
    return done.stdout.strip()


def commits_between(repo: Path, good: str, bad: str) -> list[str]:
    """The good commit, then every commit after it up to the bad one along the first-parent line."""
    ends = []
    for name, ref in (("--good", good), ("--bad", bad)):
        commit = references.commit_of(repo, ref)
        if commit is None:
            raise BisectError(f"{name} {ref}: no such commit in {repo}")
        ends.append(commit)
    if subprocess.run(["git", "-C", str(repo), "merge-base", "--is-ancestor", *ends], timeout=60).returncode != 0:
        raise BisectError(f"--good {good} is not an ancestor of --bad {bad}: no range to bisect")
    between = git(repo, "rev-list", "--first-parent", "--reverse", f"{ends[0]}..{ends[1]}").split()
    if not between:
        raise BisectError(f"--good {good} and --bad {bad} are the same commit: nothing to bisect")
    return [ends[0], *between]


def commit_points(repo: Path, good: str, bad: str) -> list[Point]:
    return [Point(key=sha, short=sha[:10], parts=(f"git:{sha}",),
                  label=f"{sha[:10]} {git(repo, 'log', '-1', '--format=%s', sha)}")
            for sha in commits_between(repo, good, bad)]


def index_versions(name: str) -> list[str]:
    """Every version of ``name`` pip's indexes and find-links hold (``pip index versions``)."""
    done = subprocess.run([sys.executable, "-m", "pip", "index", "versions", name], capture_output=True, text=True,
                          timeout=300)
    listed = next((line for line in done.stdout.splitlines() if line.startswith("Available versions:")), None)
    if done.returncode != 0 or listed is None:
        said = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise BisectError(f"the indexes list no versions of {name}: {said}")
    return [version.strip() for version in listed.partition(":")[2].split(",") if version.strip()]


def version_points(good: str, bad: str, listed: Sequence[str] | None = None, held: Sequence[str] = ()) -> list[Point]:
    """``pkg:NAME==A`` and ``pkg:NAME==B``: A, then every version the indexes hold between them in
    order, then B (toward B: a range that went back to an older version is walked backward). Each
    point holds the ``held`` parts too (the other packages of a bisect across packages)."""
    from packaging.version import InvalidVersion, Version

    try:
        (name, low), (other, high) = (package_sets.parse_pin(pin.removeprefix("pkg:")) for pin in (good, bad))
    except package_sets.PackageSetError as error:
        raise BisectError(str(error)) from None
    if name != other:
        raise BisectError(f"--good {good} and --bad {bad} name two packages: bisect one package's versions")
    try:
        ends = Version(low), Version(high)
        if ends[0] == ends[1]:
            raise BisectError(f"--good {good} and --bad {bad} are the same version: nothing to bisect")
        versions = sorted({v for v in (listed if listed is not None else index_versions(name))
                           if min(ends) < Version(v) < max(ends)}, key=Version, reverse=ends[0] > ends[1])
    except InvalidVersion as error:
        raise BisectError(f"{name}: {error}") from None
    return [Point(key=f"{name}=={v}", short=f"{name}=={v}", parts=(*held, f"pkg:{name}=={v}"), label=f"{name} {v}")
            for v in (low, *versions, high)]


def package_sets_of(good: Sequence[str], bad: Sequence[str], installed: Mapping[str, str]
                    ) -> tuple[dict[str, str], dict[str, str]]:
    """The good and the bad package sets that ``pkg:NAME==VERSION`` parts describe; a package that
    one side does not name is at its installed version there."""
    sides = []
    for option, parts in (("--good", good), ("--bad", bad)):
        pins = {}
        for part in parts:
            if not part.startswith("pkg:"):
                raise BisectError(f"{option} {part}: a bisect across packages takes pkg:NAME==VERSION on both sides")
            try:
                name, version = package_sets.parse_pin(part.removeprefix("pkg:"))
            except package_sets.PackageSetError as error:
                raise BisectError(str(error)) from None
            if pins.setdefault(name, version) != version:
                raise BisectError(f"{option} names {name} twice, at {pins[name]} and {version}")
        sides.append(pins)
    for name in sorted(sides[0].keys() | sides[1].keys()):
        for pins, other in (sides, sides[::-1]):
            if name not in pins:
                if name not in installed:
                    raise BisectError(f"{name} is not installed here: name its version on both sides "
                                      f"({other[name]} on one)")
                pins[name] = installed[name]
    return sides[0], sides[1]


def package_moves(good: Mapping[str, str], bad: Mapping[str, str], together: Iterable[Iterable[str]] = ()
                  ) -> list[tuple[str, ...]]:
    """The packages that differ between ``good`` and ``bad``, grouped where they must move together
    (:data:`COUPLED` and ``together``), the groups in name order."""
    groups = [{name} for name in sorted(good) if good[name] != bad.get(name)]
    for coupled in (*COUPLED, *(frozenset(map(package_sets.distribution_key, names)) for names in together)):
        joined = [group for group in groups if group & coupled]
        if len(joined) > 1:
            groups = [group for group in groups if not group & coupled] + [set().union(*joined)]
    return sorted(tuple(sorted(group)) for group in groups)


def package_points(good: Mapping[str, str], bad: Mapping[str, str], moves: Sequence[tuple[str, ...]]) -> list[Point]:
    """The good package set, then each one after a move more toward the bad (the last is the bad)."""
    def point(pins: Mapping[str, str], short: str, label: str) -> Point:
        return Point(key=",".join(f"{name}=={pins[name]}" for name in sorted(pins)), short=short,
                     parts=tuple(f"pkg:{name}=={pins[name]}" for name in sorted(pins)), label=label)

    pins = dict(good)
    points = [point(pins, "good", "good: " + ", ".join(f"{name} {pins[name]}" for name in sorted(pins)))]
    for group in moves:
        pins.update({name: bad[name] for name in group})
        moved = ", ".join(f"{name} {good[name]} -> {bad[name]}" for name in group)
        held = ", ".join(f"{name} {pins[name]}" for name in sorted(pins) if name not in group)
        points.append(point(pins, "+" + "+".join(group), moved + (f" (with {held})" if held else "")))
    return points
