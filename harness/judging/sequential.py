"""Group-sequential looks at an A/B's pairs with their error spent (pure functions).

An A/B judges its pairs at pre-declared looks (8, 16 and 32 pairs by default) and stops at the
first decision. Judged at the full 95% at every look, three looks call a change that sits exactly
at the minimum effect about twice as often as one look does (Armitage, McPherson and Rowe, "Repeated
significance tests on accumulating data", J R Stat Soc A 132, 1969). Here the looks spend the
error instead: a spending function ``f(t)`` (Lan and DeMets, "Discrete sequential boundaries for
clinical trials", Biometrika 70, 1983) gives the two-sided error spent by the time a fraction ``t``
of the most pairs is in, and the boundary ``c_k`` of each look is solved so that
``P(|Z_1| < c_1, ..., |Z_(k-1)| < c_(k-1), |Z_k| >= c_k) = f(t_k) - f(t_(k-1))`` for a statistic
whose increments are independent (the canonical joint distribution; the signed-rank statistic has it
asymptotically). Each look's interval is then a *repeated confidence interval* at the two-sided
level ``2 (1 - Phi(c_k))`` (Jennison and Turnbull, "Interim analyses: the repeated confidence
interval approach", J R Stat Soc B 51, 1989): the intervals of all looks together cover the true
ratio with probability ``1 - alpha``, so every verdict made from them, ``regressed``,
``improved`` or ``same``, keeps its error at or below ``alpha / 2`` however many looks it took.

Two spending functions (Kim and DeMets, "Design and analysis of group sequential tests based on
the type I error spending rate function", Biometrika 74, 1987):

- ``pocock``: ``alpha ln(1 + (e - 1) t)``, nearly the same level at every look (the default: a
  signed-rank interval over 8 pairs cannot be narrower than its two most extreme Walsh averages,
  and ``obrien-fleming`` spends too little that early to decide anything at 8 pairs);
- ``obrien-fleming``: ``2 - 2 Phi(z_(1 - alpha/2) / sqrt(t))``, almost nothing early, nearly
  the full ``alpha`` at the last look.
"""
from __future__ import annotations

import functools
import math
from typing import Callable, Sequence

import numpy as np

from harness.config.options import SPENDING_RULES

RULES = SPENDING_RULES
RULE_CITATIONS = {
    "pocock": "Lan-DeMets alpha spending, Pocock-type function (Kim and DeMets 1987)",
    "obrien-fleming": "Lan-DeMets alpha spending, O'Brien-Fleming-type function (Lan and DeMets 1983)",
}
_GRID = 401
"""Points of the numerical integration over the continuation region (Simpson's rule); the levels
it gives agree with published boundaries to about 1e-4 in z."""


def _phi(x):
    return np.exp(-0.5 * np.square(x)) / math.sqrt(2 * math.pi)


def _upper_tail(z: float) -> float:
    return 0.5 * math.erfc(z / math.sqrt(2))


def _z_of_upper_tail(p: float) -> float:
    """The z with upper-tail probability ``p``."""
    from scipy import stats

    return float(stats.norm.isf(p))


def spending(rule: str, alpha: float) -> Callable[[float], float]:
    """The two-sided error spent by information fraction ``t`` (0 < t <= 1)."""
    if rule == "pocock":
        return lambda t: alpha * math.log(1 + (math.e - 1) * min(t, 1.0))
    if rule == "obrien-fleming":
        z = _z_of_upper_tail(alpha / 2)
        return lambda t: 2 * _upper_tail(z / math.sqrt(min(t, 1.0)))
    raise ValueError(f"unknown spending rule {rule!r}; one of {', '.join(RULES)}")


def _simpson_weights(count: int, width: float) -> np.ndarray:
    weights = np.ones(count)
    weights[1:-1:2], weights[2:-1:2] = 4, 2
    return weights * width / 3


def boundaries(fractions: Sequence[float], alpha: float, rule: str = "pocock") -> list[float]:
    """Each look's z boundary ``c_k`` for looks at information ``fractions`` (increasing, in (0, 1]),
    spending ``alpha`` two-sided by ``rule``. A look that has nothing left to spend gets ``inf``."""
    spent = spending(rule, alpha)
    result: list[float] = []
    density = None  # the sub-density of S_k (the sum, variance t_k) where no look has stopped
    previous_t, previous_spent, grid = 0.0, 0.0, None
    for t in fractions:
        if not 0 < t <= 1 or t <= previous_t:
            raise ValueError(f"look fractions must increase within (0, 1], got {list(fractions)}")
        to_spend = max(0.0, spent(t) - previous_spent)
        if density is None:
            c = _z_of_upper_tail(to_spend / 2) if to_spend > 0 else math.inf
        else:
            c = _solve_boundary(grid, density, t - previous_t, math.sqrt(t), to_spend)
        result.append(c)
        bound = (c if math.isfinite(c) else 8.0) * math.sqrt(t)
        new_grid = np.linspace(-bound, bound, _GRID)
        if density is None:
            density = _phi(new_grid / math.sqrt(t)) / math.sqrt(t)
        else:
            step = math.sqrt(t - previous_t)
            weights = _simpson_weights(len(grid), grid[1] - grid[0]) * density
            density = (_phi((new_grid[:, None] - grid[None, :]) / step) / step) @ weights
        grid, previous_t, previous_spent = new_grid, t, spent(t)
    return result


def _solve_boundary(grid: np.ndarray, density: np.ndarray, increment: float, scale: float, target: float) -> float:
    """The ``c`` where the mass continuing from ``grid`` that lands beyond ``+-c * scale`` after an
    increment of variance ``increment`` equals ``target``."""
    from scipy.special import ndtr

    weights = _simpson_weights(len(grid), grid[1] - grid[0]) * density
    step = math.sqrt(increment)

    def crossing(c: float) -> float:
        b = c * scale
        return float((ndtr((grid - b) / step) + ndtr((-b - grid) / step)) @ weights)

    from scipy.optimize import brentq

    if target <= 0 or crossing(12.0) > target:
        return math.inf
    return float(brentq(lambda c: crossing(c) - target, 0.0, 12.0, xtol=1e-7))


@functools.lru_cache(maxsize=256)
def _levels(looks: tuple[int, ...], most: int, alpha: float, rule: str) -> tuple[float, ...]:
    fractions = [min(1.0, look / most) for look in looks]
    return tuple(2 * _upper_tail(c) if math.isfinite(c) else 0.0 for c in boundaries(fractions, alpha, rule))


def look_levels(looks: Sequence[int], most: int, alpha: float, rule: str = "pocock") -> tuple[float, ...]:
    """The two-sided level of each look's repeated confidence interval, for looks at ``looks``
    pairs of at most ``most``: the interval of look ``k`` is a ``1 - level_k`` interval. The looks
    are those taken so far (an interrupted or budget-cut session's last look is spent at its own
    fraction); later looks do not change earlier ones."""
    if not looks or any(b <= a for a, b in zip(looks, looks[1:])) or looks[0] <= 0:
        raise ValueError(f"looks must be increasing positive pair counts, got {list(looks)}")
    return _levels(tuple(int(look) for look in looks), int(max(most, looks[-1])), float(alpha), rule)


def planned_looks(first: int, most: int) -> tuple[int, ...]:
    """The pre-declared looks: ``first`` pairs, doubling, and ``most``."""
    looks = [first]
    while looks[-1] < most:
        looks.append(min(most, looks[-1] * 2))
    return tuple(looks)


def benjamini_hochberg(p_values: Sequence[float], rate: float) -> list[bool]:
    """Which hypotheses the Benjamini-Hochberg step-up procedure rejects at false-discovery
    ``rate`` (Benjamini and Hochberg, J R Stat Soc B 57, 1995): the ``k`` smallest p-values, ``k``
    the largest with ``p_(k) <= k rate / m``."""
    m = len(p_values)
    order = sorted(range(m), key=lambda index: p_values[index])
    largest = 0
    for position, index in enumerate(order, start=1):
        if p_values[index] <= position * rate / m:
            largest = position
    rejected = [False] * m
    for index in order[:largest]:
        rejected[index] = True
    return rejected
