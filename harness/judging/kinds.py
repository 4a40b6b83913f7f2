"""The names of verdicts, declared once: a cell's against its stored baseline, and an A/B's.

They are ``str`` enums: written to results.json, the history and the report as their values, and
equal to them, so a reader of those files compares with plain strings."""
from __future__ import annotations

import enum


class _Name(str, enum.Enum):
    """A member is its value wherever a ``str`` goes (``enum.StrEnum`` from Python 3.11 on)."""

    __str__ = str.__str__
    __format__ = str.__format__


class VerdictKind(_Name):
    """A cell's verdict on a metric against its stored baseline (:mod:`harness.judging.verdicts`)."""

    PASS = "pass"
    FAIL = "fail"
    INCONCLUSIVE = "inconclusive"
    """The interval straddles the band's edge, the yardstick's two readings disagree, or other work
    took the cell's cores: measured again within the budget, never a pass."""
    FASTER = "faster"
    """Better than the band's improvement edge: a pass that asks for a new baseline."""
    NO_BASELINE = "no-baseline"
    STALE = "stale"
    """The baseline was measured with another workload, on other hardware or with other huge pages."""
    MACHINE_DIFFERS = "machine-differs"
    """The yardstick says another machine, not a drift."""


MOST_SERIOUS_FIRST = (VerdictKind.FAIL, VerdictKind.STALE, VerdictKind.MACHINE_DIFFERS, VerdictKind.INCONCLUSIVE,
                      VerdictKind.NO_BASELINE, VerdictKind.FASTER, VerdictKind.PASS)
"""A cell's one verdict is the first of these among its metrics' verdicts."""

ERROR = "error"
"""What a cell, an A/B or an accuracy cell says where a launch failed and nothing was judged."""

UNJUDGED = frozenset({VerdictKind.NO_BASELINE, VerdictKind.STALE, VerdictKind.MACHINE_DIFFERS})
"""Measured but not judged; ``--strict-verdicts`` fails them."""


class PairedKind(_Name):
    """An A/B's verdict on the current environment against the reference (:mod:`harness.judging.paired`)."""

    REGRESSED = "regressed"
    IMPROVED = "improved"
    SAME = "same"
    INCONCLUSIVE = "inconclusive"
