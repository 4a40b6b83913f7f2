"""The package sets baselines were recorded with: ``baselines/environments/<id>.json``, one file per
set, named by its content hash (:func:`harness.machine.provenance.environment_id`) and written once.
A baseline entry's ``provenance.environment`` names its file, so that an A/B can tell whether the
environment it was recorded with can be rebuilt (harness.machine.references.pins_to_rebuild)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping

from harness.common.jsonio import write_json_atomic
from harness.machine.provenance import environment_id


def keep(baselines_dir: Path, packages: Mapping[str, str]) -> str:
    """Write the package set's file unless it is there already; its id."""
    identity = environment_id(dict(packages))
    path = baselines_dir / "environments" / f"{identity}.json"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, {"id": identity, "packages": dict(packages)})
    return identity


def load(baselines_dir: Path, identity: str) -> dict[str, str] | None:
    """The package set an id names, or None where its file is missing or unreadable."""
    try:
        data = json.loads((baselines_dir / "environments" / f"{identity}.json").read_text())
    except (OSError, ValueError):
        return None
    packages = data.get("packages") if isinstance(data, dict) else None
    return packages if isinstance(packages, dict) else None

