"""What each of the study's stated E_G values can say about the scaling model, and what it said.

Every stated value gets a **role**:

- ``fitted``: a figure the text does not give was fitted to it (it is reproduced by construction);
- ``in-sample``: it chose the model's form, restates a fitted value, or follows from one (the
  published file's ``in_sample`` says which and why);
- ``independent``: nothing was fitted to it or chosen by it: the only kind that tests the model.

A bound (``<``, ``>``) is judged on the model's **band**, not its most likely value: it ``holds``
where the whole band satisfies it, ``fails`` where none of it does, and ``straddles`` otherwise;
a bound over a range of GPU counts is judged at its worst point. A bound is evidence for the
model's physical terms only where a **null model** (the fewest terms that reproduce the fitted
points) does not hold it as well.
"""
from __future__ import annotations

import dataclasses
from typing import Iterable, Mapping

FITTED, IN_SAMPLE, INDEPENDENT = "fitted", "in-sample", "independent"
HOLDS, STRADDLES, FAILS = "holds", "straddles", "fails"


def role_of(point: Mapping, fitted_points: Iterable[Mapping]) -> tuple[str, str]:
    """(role, why) of one stated value, given the points the model's figures were fitted to."""
    if any(all(point.get(key) == value for key, value in where.items()) for where in fitted_points):
        return FITTED, "a figure the text does not give was fitted to it"
    if point.get("in_sample"):
        return IN_SAMPLE, point["in_sample"]
    return INDEPENDENT, "nothing was fitted to it or chosen by it"


def judge_bound(relation: str, value: float, bands: Iterable[tuple[float, float]]) -> str:
    """Whether bands (one per GPU count a bound covers) satisfy ``relation value`` throughout."""
    verdicts = set()
    for low, high in bands:
        satisfied = low > value if relation == ">" else high < value
        violated = high <= value if relation == ">" else low >= value
        verdicts.add(HOLDS if satisfied else FAILS if violated else STRADDLES)
    if not verdicts:
        raise ValueError("a bound needs at least one band to be judged on")
    return FAILS if FAILS in verdicts else STRADDLES if STRADDLES in verdicts else HOLDS


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Row:
    """One stated value: the full model's and each null model's reading of it."""

    point: Mapping
    role: str
    why: str
    efficiency: float
    """The full model's most likely E_G (at a range's worst point)."""
    band: tuple[float, float]
    nulls: Mapping[str, tuple[float, tuple[float, float]]]
    """Each null model's (most likely E_G, band) by its name."""
    outcome: str | None
    """A bound's verdict on the full model's band; None for a stated value."""
    null_outcomes: Mapping[str, str]
    """A bound's verdict on each null model's band."""

    @property
    def error(self) -> float | None:
        return self.efficiency - self.point["value"] if self.point["relation"] == "=" else None

    def null_error(self, name: str) -> float | None:
        return self.nulls[name][0] - self.point["value"] if self.point["relation"] == "=" else None

    @property
    def tells_apart(self) -> bool:
        """A bound the full model holds and at least one null model does not."""
        return self.outcome == HOLDS and any(outcome != HOLDS for outcome in self.null_outcomes.values())


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Tally:
    rows: tuple[Row, ...]

    def errors(self, role: str) -> list[float]:
        return [abs(row.error) for row in self.rows if row.role == role and row.error is not None]

    def bounds(self) -> list[Row]:
        return [row for row in self.rows if row.outcome is not None]

    def count(self, outcome: str) -> int:
        return sum(row.outcome == outcome for row in self.bounds())

    def held_by_null(self, name: str) -> int:
        return sum(row.null_outcomes.get(name) == HOLDS for row in self.bounds())

    def __str__(self) -> str:
        bounds = self.bounds()
        roles = {role: sum(row.role == role for row in self.rows) for role in (FITTED, IN_SAMPLE, INDEPENDENT)}
        independent = self.errors(INDEPENDENT)
        nulls = sorted({name for row in bounds for name in row.null_outcomes})
        return (f"{len(self.rows)} stated values: {roles[FITTED]} fitted, {roles[IN_SAMPLE]} in-sample, "
                f"{roles[INDEPENDENT]} independent; independent values' |error| "
                + (", ".join(f"{e:.3f}" for e in independent) or "none")
                + f"; bounds on the band: {self.count(HOLDS)} of {len(bounds)} hold, {self.count(STRADDLES)} straddle, "
                f"{self.count(FAILS)} fail; "
                + "; ".join(f"the null model '{name}' holds {self.held_by_null(name)} of them" for name in nulls)
                + f"; {sum(row.tells_apart for row in bounds)} tell the full model from a null model")
