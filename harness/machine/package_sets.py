"""Package sets of reference environments (``--against pkg:NAME==VERSION``): the current
environment with some distributions at other versions, built once with uv and kept in the cache
under its content hash.

The set is built as an overlay: a virtual environment on the same base interpreter that holds only
the pinned distributions, with the current environment's site-packages after its own on
``sys.path`` (a ``.pth`` file that calls ``site.addsitedir``, so the current environment's own
``.pth`` files count too). Every other distribution is the current one's, so the reference differs
from the current environment in exactly the pins and nothing else, and building it takes what
installing the pins takes. The pins go in without their dependencies (the current ones serve);
what the pinned versions would want otherwise is reported by ``pip check`` in the overlay, not
silently resolved into a third environment.

uv reads its indexes from its own settings; pip's (``pip config list``) are handed on, so a
machine with local indexes builds from them.
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Mapping

from harness.common.filelock import locked
from harness.machine.provenance import distribution_key, environment_id

COMPLETE = ".dlscale-complete"
"""Written last into a built overlay: one without it was cut short and is built again."""
_PIN = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9][A-Za-z0-9.+!_-]*)\Z")
BUILD_TIMEOUT_S = 1800


class PackageSetError(ValueError):
    """A package set that cannot be built: a malformed pin, a version no index has, no uv."""


def parse_pin(text: str) -> tuple[str, str]:
    """``NAME==VERSION`` as (its distribution key, version)."""
    match = _PIN.match(text)
    if not match:
        raise PackageSetError(f"--against pkg:{text}: say pkg:NAME==VERSION (an exact version)")
    return distribution_key(match[1]), match[2]


def overlay(pins: Mapping[str, str], base_packages: Mapping[str, str], cache: Path) -> Path:
    """The interpreter of the current environment with ``pins`` (name -> version) over it, built into
    ``cache`` once (keyed by the whole resulting package set and the base interpreter)."""
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if uv is None:
        raise PackageSetError("--against pkg:...: uv is not installed beside this Python or on PATH "
                              "(pip install uv)")
    packages = {**base_packages, **pins, "executable": sys.executable}
    target = cache / f"pkgs-{environment_id(packages)}"
    python = target / "bin" / "python"
    with locked(target, timeout_s=BUILD_TIMEOUT_S):
        if (target / COMPLETE).is_file():
            return python
        shutil.rmtree(target, ignore_errors=True)
        try:
            _run([uv, "venv", "--quiet", "--no-project", "--python", sys.executable, str(target)], pins)
            site_packages = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path("
                                                 "'purelib'))"], capture_output=True, text=True, check=True,
                                                timeout=60).stdout.strip())
            bases = dict.fromkeys([sysconfig.get_path("purelib"), sysconfig.get_path("platlib")])
            (site_packages / "_dlscale_current_environment.pth").write_text(
                "import site; " + "; ".join(f"site.addsitedir({base!r})" for base in bases) + "\n")
            _run([uv, "pip", "install", "--quiet", "--no-deps", "--python", str(python), *index_options(),
                  *(f"{name}=={version}" for name, version in sorted(pins.items()))], pins)
            _check_versions(python, pins)
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise
        (target / COMPLETE).write_text("")
    return python


def dependency_problems(python: Path) -> list[str]:
    """What ``pip check`` finds in an overlay: a pinned version that wants other dependencies than
    the current environment has (empty where pip is not installed)."""
    done = subprocess.run([str(python), "-m", "pip", "check"], capture_output=True, text=True, timeout=120)
    if "No module named pip" in done.stderr:
        return []
    return [line for line in done.stdout.splitlines() if line and not line.startswith("No broken")]


@functools.lru_cache(maxsize=None)
def import_error(python: str, module: str) -> str | None:
    """The last line of what importing ``module`` in ``python`` raised; None where it imports."""
    done = subprocess.run([python, "-c", f"import {module}"], capture_output=True, text=True, timeout=300)
    if done.returncode == 0:
        return None
    said = _lines(done.stderr)
    return said[-1][:300] if said else f"exit {done.returncode}"


def index_options(env: Mapping[str, str] = os.environ) -> list[str]:
    """pip's index settings as uv's options: ``index-url``, ``extra-index-url``, ``find-links``
    (from ``pip config list``, which has read pip's files and ``PIP_*`` variables). Where a setting
    came in several scopes, a ``PIP_*`` variable (``:env:``, listed first) wins, as in pip; among
    the files, the last one listed."""
    done = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                          timeout=60, env=dict(env))
    settings: dict[str, str] = {}
    for line in sorted(done.stdout.splitlines(), key=lambda line: line.startswith(":env:")):
        key, _, value = line.partition("=")
        settings[key.rpartition(".")[2]] = value.strip().strip("'\"")
    options = ["--index-strategy", "unsafe-best-match"]  # as pip: the best version from any index
    if settings.get("index-url"):
        options += ["--default-index", settings["index-url"]]
    for url in settings.get("extra-index-url", "").split():
        options += ["--index", url]
    for location in settings.get("find-links", "").split():
        options += ["--find-links", location]
    return options


def _run(command: list[str], pins: Mapping[str, str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    if done.returncode != 0:
        reason = " ".join(_lines(done.stderr)[-3:])[-400:] or f"exit {done.returncode}"
        wanted = ", ".join(f"{name}=={version}" for name, version in sorted(pins.items()))
        raise PackageSetError(f"--against pkg: {wanted} cannot be built: {reason}")


def _lines(text: str) -> list[str]:
    """A tool's output without its blank lines and margins."""
    return [line.strip() for line in text.splitlines() if line.strip()]


def _check_versions(python: Path, pins: Mapping[str, str]) -> None:
    """The overlay's interpreter sees every pin at its version (an overlay that shadows nothing
    would compare the current environment with itself)."""
    asked = "import importlib.metadata as m, sys; print(*(m.version(n) for n in sys.argv[1:]))"
    names = sorted(pins)
    seen = subprocess.run([str(python), "-c", asked, *names], capture_output=True, text=True, timeout=120)
    versions = seen.stdout.split()
    wrong = [f"{name} {versions[i] if i < len(versions) else '?'} (wanted {pins[name]})"
             for i, name in enumerate(names) if i >= len(versions) or versions[i] != pins[name]]
    if seen.returncode != 0 or wrong:
        raise PackageSetError(f"--against pkg: the built environment sees {', '.join(wrong) or seen.stderr[-300:]}")
