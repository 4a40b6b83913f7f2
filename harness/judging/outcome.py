"""Whether a cell's scaling test fails, and with what message: the rule the pytest plugin applies
to the verdicts of a measured cell (a launch that failed fails its test before any verdict)."""
from __future__ import annotations

import dataclasses
from typing import Sequence

from harness.judging.kinds import UNJUDGED, VerdictKind
from harness.judging.verdicts import Verdict, overall

CONFIRMABLE = frozenset({VerdictKind.FAIL, VerdictKind.INCONCLUSIVE, VerdictKind.MACHINE_DIFFERS})
"""Verdicts against a stored baseline that ``--confirm`` puts to an A/B against the baseline's environment."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class FailureRule:
    """The options that decide whether a judged cell fails its test."""

    confirm: bool = False
    update_baselines: bool = False
    accept_regressions: bool = False
    strict_verdicts: bool = False
    system_changes: str = "fail"
    """``pass``: a fail that an A/B confirmed as the system's (the node changed, not the software) passes."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Confirmed:
    """What the A/B against the baseline's environment said of a cell's verdict."""

    cause: str
    """``software``, ``system`` or ``unknown``."""
    message: str


def to_confirm(verdict: str, rule: FailureRule) -> bool:
    """Whether a cell's verdict is put to an A/B before its test is decided."""
    return rule.confirm and not rule.update_baselines and verdict in CONFIRMABLE


def failure_message(cell_id: str, repeats: Sequence[Sequence[Verdict]], rule: FailureRule,
                    confirmed: Confirmed | None = None) -> str | None:
    """The message the test of cell ``cell_id`` fails with, ``None`` where it passes. ``repeats``:
    the verdicts of each of its repeats (every repeat is judged); ``confirmed``: the A/B of its
    last repeat's verdict, where one ran (:func:`to_confirm`).

    A failing verdict fails the test unless regressions are accepted (``--accept-regressions``),
    or the A/B found the node, not the software, changed and the rule lets that pass. With
    ``--strict-verdicts`` a cell that was measured but not judged fails too, unless baselines are
    being recorded."""
    label = len(repeats) > 1
    failing = [verdict.message + (f" (repeat {index + 1})" if label else "")
               for index, verdicts in enumerate(repeats) for verdict in verdicts if verdict.failed]
    if confirmed:
        if confirmed.cause == "system" and rule.system_changes == "pass":
            return None
        failing = [f"{message}; confirmed: {confirmed.message}" for message in failing]
    if failing and not rule.accept_regressions:
        return f"{cell_id} regressed: " + "; ".join(failing)
    if rule.update_baselines or not rule.strict_verdicts or not repeats:
        return None
    last = repeats[-1]
    if (verdict := overall(list(last))) not in UNJUDGED:
        return None
    said = f"; confirmed: {confirmed.message}" if confirmed else ""
    return (f"{cell_id} {verdict} (--strict-verdicts): "
            + "; ".join(v.message for v in last if v.kind in UNJUDGED) + said)
