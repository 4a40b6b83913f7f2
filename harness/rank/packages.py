"""The software a rank's figures depend on: the distributions whose versions each rank records
and the session's provenance keeps.

Here, in the rank layer, because the frameworks' and loaders' registry entries say what they run
on; :mod:`harness.machine.provenance` reads the installed versions of whatever list it is given."""
from __future__ import annotations

from harness.rank.frameworks import FRAMEWORKS
from harness.rank.loaders import LOADERS

BASE_PACKAGES = ("torch", "torchvision", "numpy", "mpi4py")
"""What every cell runs on; each framework and loader names its own (:attr:`harness.common.registry.Entry.stack`)."""


def tracked_packages() -> list[str]:
    return [*BASE_PACKAGES, *sorted(FRAMEWORKS.distributions() | LOADERS.distributions())]
