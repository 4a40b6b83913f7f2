"""What a bisect is run with (``dlscale-bisect``'s steps, verification and budget) and what its
state file is bound to: every setting that changes a launch or how it is judged."""
from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Mapping, Sequence

from harness.config.options import SuiteOptions
from harness.judging.paired import ALPHA, SPENDING_RULE
from harness.judging.tunables import DEFAULT_TUNABLES
from harness.rank.workload import Workload

COUNTED_BY = ("work", "instructions")
"""What a midpoint may be placed by from one launch of it, counted rather than timed."""

_AB_DEFAULTS = {option.name: option.default for option in dataclasses.fields(SuiteOptions)}


class BudgetSpent(RuntimeError):
    pass


class NodeTooBusy(RuntimeError):
    """A step's rounds or a verification's pairs were left out for outside work on their cores more
    than the A/B core allows; they are kept, and the bisect goes on from them when started again."""


@dataclasses.dataclass(frozen=True, kw_only=True)  # no slots: the parser reads the defaults off the class
class Settings:
    """A step's rounds and a culprit's verification are judged as an A/B's pairs are (``--against``),
    with its defaults."""
    rounds: int = _AB_DEFAULTS["pairs"]
    max_rounds: int = _AB_DEFAULTS["max_pairs"]
    min_effect: float | None = None
    """``None``: the system's (:attr:`harness.judging.tunables.Tunables.min_effect`)."""
    verify_pairs: int = _AB_DEFAULTS["pairs"]
    alpha: float = ALPHA
    rule: str = SPENDING_RULE
    """How a step's looks and a verification's spend the error (the suite's ``--spending``)."""
    notable: float = DEFAULT_TUNABLES.notable_wait
    """Outside work on a launch's cores beyond which its round is left out (the system's tunable)."""
    max_launches: int = 600
    max_seconds: float = 6 * 3600.0
    by: str = "auto"
    """How midpoints are placed: ``work`` (one launch a point, by the work a step counts: which
    commit changed the work), ``instructions`` (one launch a point under callgrind, by its steps'
    host instructions), ``time`` (rounds of launches, by speed) or ``auto`` (what made it slower: by
    work first where the range's ends count different work, then by time where the slowdown is)."""


def launch_settings(*, workload: Workload, launcher: str, cores_per_rank: int | None, device: str, system: str,
                    launch_environment: Mapping[str, str], packages: Mapping[str, str], harness_code: str | None,
                    settings: Settings) -> dict[str, object]:
    """Every setting that changes a bisect's launches or how its rounds and pairs are judged, by
    names a reader knows: the workload's fields, the launcher, the cores per rank, the device, the
    system the launches run on, each launch variable, each installed distribution (the base every
    point's environment is built over), the version of the harness code that measures and judges
    them (:func:`harness.machine.provenance.code_version`), the minimum effect, the outside work
    that leaves a round out and the looks and error of the steps and verifications. A state is
    bound to them (:func:`binding`). The budget (``--max-launches``, ``--max-time``) and ``--seed``
    are not among them: a resumed bisect may change those."""
    named: dict[str, object] = {f"workload {name}": value for name, value in dataclasses.asdict(workload).items()}
    named.update({"launcher": launcher, "cores per rank": cores_per_rank, "device": device, "system": system,
                  "min effect": settings.min_effect, "rounds": settings.rounds, "max rounds": settings.max_rounds,
                  "verify pairs": settings.verify_pairs, "alpha": settings.alpha, "spending rule": settings.rule,
                  "notable outside work": settings.notable, "placed by": settings.by, "harness code": harness_code})
    named.update({f"launch env {name}": value for name, value in sorted(launch_environment.items())})
    named.update({f"package {name}": version for name, version in sorted(packages.items())})
    return json.loads(json.dumps(named, default=str))  # as the state file gives them back


def binding(cell_id: str, keys: Sequence[str], settings: Mapping[str, object]) -> dict:
    """What a state file is bound to: a digest of the cell, the points and the launch settings, and
    the settings themselves, readable, to name those that differ."""
    text = json.dumps({"cell": cell_id, "points": list(keys), "settings": settings}, sort_keys=True, default=str)
    return {"digest": hashlib.sha256(text.encode()).hexdigest()[:16], "settings": dict(settings)}


_UNSET = object()


def setting_differences(old: Mapping[str, object], new: Mapping[str, object]) -> list[str]:
    """Each setting that differs, as ``name: old -> new`` (``(none)`` where one side lacks it or has none)."""
    def shown(value: object) -> str:
        return "(none)" if value is _UNSET or value is None else str(value)
    return [f"{name}: {shown(old.get(name, _UNSET))} -> {shown(new.get(name, _UNSET))}"
            for name in sorted(old.keys() | new.keys()) if old.get(name, _UNSET) != new.get(name, _UNSET)]
