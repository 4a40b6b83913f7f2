"""The components a test needs, and what it does when one is missing:

    needs("horovod", FRAMEWORKS.missing("horovod"))   # nothing when the reason is None

Outside CI a missing component skips the test, with its reason. ``ci/test`` declares every
component ``ci/setup.sh`` provides (``DLSCALE_REQUIRED_COMPONENTS``); there a test that would skip
for a declared component fails instead, naming it, so that a set-up step that silently stopped
installing Horovod or TensorFlow turns CI red rather than into a skip nobody reads.
"""
from __future__ import annotations

import os

import pytest

from harness.rank.frameworks import FRAMEWORKS

REQUIRED_VARIABLE = "DLSCALE_REQUIRED_COMPONENTS"

LAUNCHER_COMPONENTS = {"srun": "slurm", "mpirun": "mpirun", "torchrun": "torchrun", "horovodrun": "horovod",
                       "deepspeed": "deepspeed"}
"""The component each launcher comes with (horovodrun with Horovod, deepspeed's launcher with DeepSpeed)."""


OTHER_COMPONENTS = {"dali": "NVIDIA DALI in torch's environment",
                    "local-slurm": "the local Slurm cluster ci/slurm/start.sh started (its drills stop its daemons)",
                    "two-hosts": "two network namespaces as hosts (root, iproute2)",
                    "callgrind": "valgrind and a C compiler (--count-instructions)",
                    "chromium": "Debian's chromium and chromium-driver, and selenium, for the pages' browser tests",
                    "other-pytest-plugins": "the wheels of the pytest plugins dlscale must live beside (ci/other_plugins.txt)"}


def known_components() -> set[str]:
    return ({*LAUNCHER_COMPONENTS.values(), *OTHER_COMPONENTS}
            | {framework_component(name) for name in FRAMEWORKS.names()})


def required(env=os.environ) -> frozenset[str]:
    """The components declared installed (``DLSCALE_REQUIRED_COMPONENTS``, separated by spaces)."""
    return frozenset(env.get(REQUIRED_VARIABLE, "").split())


def pytest_configure(config: pytest.Config) -> None:
    """A misspelt declaration would declare nothing: every name must be a component tests ask for."""
    if unknown := required() - known_components():
        raise pytest.UsageError(f"{REQUIRED_VARIABLE} names unknown component(s) {', '.join(sorted(unknown))}; "
                                f"known: {', '.join(sorted(known_components()))}")


def framework_component(framework: str) -> str:
    """What a framework's ranks need beyond torch: its package, in its runtime (``horovod+tensorflow``)."""
    entry = FRAMEWORKS.entry(framework)
    package = entry.requires.partition(".")[0] if entry.requires else None  # horovod.torch: horovod
    parts = [package, None if entry.runtime == "torch" else entry.runtime]
    return "+".join(part for part in parts if part) or "torch"


def fail_if_declared(component: str, reason: str | None) -> None:
    """Fail the test where ``component`` is missing (``reason``) though declared installed."""
    if reason and component in required():
        pytest.fail(f"{component} is missing, though {REQUIRED_VARIABLE} declares it installed: {reason}",
                    pytrace=False)


def needs(component: str, reason: str | None) -> None:
    """Go on when ``reason`` is None; otherwise skip, or fail where ``component`` is declared."""
    if reason:
        fail_if_declared(component, reason)
        pytest.skip(f"{component}: {reason}")
