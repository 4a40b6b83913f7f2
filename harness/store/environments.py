"""The package sets baselines were recorded with: ``baselines/environments/<id>.json`` beside the
baseline files, one file per set, named by its content hash
(:func:`harness.machine.provenance.environment_id`) and written once. A baseline entry's
``provenance.environment`` (torch's environment) and ``provenance.rank_environment`` (the one its
ranks ran in: another runtime's own) name their files, so that ``--confirm`` can rebuild the
environment it was recorded with (harness.judging.confirmation). They are part of the baselines:
committed with them, or the baselines cannot be rebuilt elsewhere."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping

from harness.common.jsonio import write_json_atomic
from harness.machine.provenance import environment_id


def path_of(baselines_dir: Path, identity: str) -> Path:
    """Where the package set ``identity`` is kept."""
    return baselines_dir / "environments" / f"{identity}.json"


def keep(baselines_dir: Path, packages: Mapping[str, str]) -> str:
    """Write the package set's file unless it is there already; its id."""
    identity = environment_id(dict(packages))
    path = path_of(baselines_dir, identity)
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, {"id": identity, "packages": dict(packages)})
    return identity


def load(baselines_dir: Path, identity: str) -> dict[str, str] | None:
    """The package set an id names, or None where its file is missing or unreadable."""
    try:
        data = json.loads(path_of(baselines_dir, identity).read_text())
    except (OSError, ValueError):
        return None
    packages = data.get("packages") if isinstance(data, dict) else None
    return packages if isinstance(packages, dict) else None

