"""Statistics of an A/B comparison in one session: pairs of launches, the reference environment's
and the current one's, on the same nodes, the order inside each pair balanced and random.

A stored baseline from another day cannot tell the software from the node (a VM whose kernels run
25-30% slower on the second day fails unchanged cells). Pairs measured back to back can: each
pair's log ratio ``log(current / reference)`` cancels what the node did to both. As in Chromium's
Pinpoint, the per-pair log ratios are judged by a Wilcoxon signed-rank test, and the median ratio
gets the distribution-free interval that belongs to that test (Hodges-Lehmann: the Walsh averages'
order statistics). Pure functions; scipy only inside :func:`judge_pairs`.
"""
from __future__ import annotations

import dataclasses
import math
import random
from typing import Sequence

import numpy as np

from harness.judging.kinds import PairedKind
from harness.judging.stats import Estimate

ALPHA = 0.05
MIN_PAIRS = 6
"""The fewest pairs with a 95% signed-rank interval (at 5, even all five the same way give p=0.0625)."""
ORDERS = ("reference-first", "current-first")
MOST_PAIRS_TOLD = 1000
"""Beyond this, an inconclusive verdict says only that more would be needed: a ratio on the edge of
the minimum effect is undecidable at any count."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Pair:
    order: str
    """Which side launched first: one of :data:`ORDERS`."""
    reference: float
    current: float
    """Each side's throughput in this pair (images/s)."""

    @property
    def log_ratio(self) -> float:
        return math.log(self.current / self.reference)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PairedVerdict:
    kind: PairedKind
    ratio: Estimate
    """Median of current over reference throughput, with its 95% interval."""
    p_value: float
    pairs: int
    min_effect: float
    flags: tuple[str, ...] = ()
    """What makes the pairs less trustworthy than their interval says: bimodal ratios, a side
    that drifted during the session."""
    pairs_to_decide: int | None = None
    """An inconclusive verdict's estimate of the pairs a decision would take (:func:`pairs_to_decide`)."""

    @property
    def message(self) -> str:
        text = (f"current/reference {self.ratio.text(3)} "
                f"over {self.pairs} pairs, Wilcoxon p={self.p_value:.3g}, minimum effect {self.min_effect:.0%}")
        if self.pairs_needed:
            text += f"; {self.pairs_needed}"
        return text + "".join(f"; {flag}" for flag in self.flags)

    @property
    def pairs_needed(self) -> str | None:
        """What an inconclusive verdict would take to decide, in words."""
        return pairs_needed(self.pairs_to_decide)


def pairs_needed(pairs_to_decide: int | None) -> str | None:
    """:func:`pairs_to_decide`'s estimate in words (None for none)."""
    if pairs_to_decide is None:
        return None
    if pairs_to_decide <= MOST_PAIRS_TOLD:
        return f"about {pairs_to_decide} pairs would decide it at this spread"
    return f"more than {MOST_PAIRS_TOLD} pairs would be needed at this spread"


def signed_rank_null(n: int) -> np.ndarray:
    """P(T+ = t) for t = 0..n(n+1)/2 under no difference: each rank's sign a fair coin."""
    counts = np.zeros(n * (n + 1) // 2 + 1)
    counts[0] = 1.0
    for rank in range(1, n + 1):
        counts[rank:] = counts[rank:] + counts[:-rank].copy()
    return counts / 2.0 ** n


def median_interval(log_ratios: Sequence[float], confidence: float = 0.95) -> Estimate:
    """Hodges-Lehmann estimate of the median log ratio and its signed-rank interval, as ratios:
    with ``M`` Walsh averages sorted, the interval is ``[W_d, W_(M+1-d)]`` where ``d - 1`` is the
    largest ``t`` with ``P(T+ <= t) <= (1 - confidence) / 2``. Too few pairs: an infinite interval."""
    x = np.asarray(log_ratios, dtype=float)
    n = len(x)
    if n == 0:
        raise ValueError("no pairs to judge")
    walsh = np.sort([(x[i] + x[j]) / 2 for i in range(n) for j in range(i, n)])
    centre = math.exp(float(np.median(walsh)))
    below = np.cumsum(signed_rank_null(n))
    d = int(np.searchsorted(below, (1 - confidence) / 2, side="right"))  # P(T+ <= d-1) <= tail
    if d == 0:
        return Estimate(value=centre, low=-math.inf, high=math.inf, confidence=confidence, n_steps=n)
    return Estimate(value=centre, low=math.exp(walsh[d - 1]), high=math.exp(walsh[len(walsh) - d]),
                    confidence=confidence, n_steps=n)


def pairs_to_decide(ratio: Estimate, min_effect: float) -> int | None:
    """About how many pairs would turn an inconclusive verdict into ``regressed``, ``improved`` or
    ``same``, were the median ratio to stay where it is: the interval narrows as the square root of
    the pairs, so ``n * (half-width / room)**2``, where room is the distance from the median to the
    edge the interval must clear (beyond the edge for a change, inside both edges for ``same``).
    None where the interval is unbounded (fewer than :data:`MIN_PAIRS`)."""
    if not (math.isfinite(ratio.low) and math.isfinite(ratio.high)):
        return None
    centre, half_width = math.log(ratio.value), (math.log(ratio.high) - math.log(ratio.low)) / 2
    low_edge, high_edge = math.log(1 - min_effect), math.log(1 + min_effect)
    if centre < low_edge:
        room = low_edge - centre
    elif centre > high_edge:
        room = centre - high_edge
    else:
        room = min(high_edge - centre, centre - low_edge)
    if room <= 0:
        return MOST_PAIRS_TOLD + 1
    return min(MOST_PAIRS_TOLD + 1, math.ceil(ratio.n_steps * (half_width / room) ** 2))


def judge_pairs(pairs: Sequence[Pair], *, min_effect: float, alpha: float = ALPHA) -> PairedVerdict:
    """``regressed`` (or ``improved``) only when the signed-rank test says the sides differ and the
    whole interval lies beyond ``min_effect``; ``same`` when the whole interval lies within it;
    else ``inconclusive``, which more pairs may settle."""
    from scipy import stats

    logs = [pair.log_ratio for pair in pairs]
    ratio = median_interval(logs, 1 - alpha)
    if len(logs) < MIN_PAIRS or not any(logs):
        p_value = 1.0
    else:
        p_value = float(stats.wilcoxon(logs, zero_method="wilcox").pvalue)
    low_edge, high_edge = 1 - min_effect, 1 + min_effect
    if p_value < alpha and ratio.high < low_edge:
        kind = PairedKind.REGRESSED
    elif p_value < alpha and ratio.low > high_edge:
        kind = PairedKind.IMPROVED
    elif low_edge < ratio.low and ratio.high < high_edge:
        kind = PairedKind.SAME
    else:
        kind = PairedKind.INCONCLUSIVE
    flags = tuple(flag for flag in (bimodal(logs), drifted(pairs, "reference"), drifted(pairs, "current")) if flag)
    return PairedVerdict(kind=kind, ratio=ratio, p_value=p_value, pairs=len(logs), min_effect=min_effect,
                         flags=flags,
                         pairs_to_decide=pairs_to_decide(ratio, min_effect) if kind == PairedKind.INCONCLUSIVE else None)


def cause_of(verdict: PairedVerdict) -> str:
    """Where a stored-baseline regression lies, by the A/B of the current environment against the
    baseline's on the same node now: ``software`` where the current one is slower, ``system`` where
    they run the same (or the current one is faster: the node lost more than the software), else
    ``unknown``."""
    return {PairedKind.REGRESSED: "software", PairedKind.SAME: "system", PairedKind.IMPROVED: "system"}.get(
        verdict.kind, "unknown")


def bimodal(log_ratios: Sequence[float]) -> str | None:
    """The ratios fall into two groups: the widest gap between neighbours, with at least a quarter
    of the pairs on each side of it, is more than three times the spread within the groups (the
    interquartile range of each group, pooled). Such pairs answer two questions, not one."""
    x = np.sort(np.asarray(log_ratios, dtype=float))
    n = len(x)
    if n < 8:
        return None
    least = max(2, n // 4)
    gaps = [(x[i + 1] - x[i], i + 1) for i in range(least - 1, n - least)]
    gap, split = max(gaps)
    within = max(float(np.subtract(*np.percentile(x[:split], [75, 25]))),
                  float(np.subtract(*np.percentile(x[split:], [75, 25]))), 1e-4)
    if gap <= 3 * within:
        return None
    return (f"bimodal: {split} pair(s) near {math.exp(np.median(x[:split])):.3f}, {n - split} near "
            f"{math.exp(np.median(x[split:])):.3f}")


def drifted(pairs: Sequence[Pair], side: str, alpha: float = ALPHA) -> str | None:
    """A side's throughput trended through the session (Kendall's tau against the pair's place,
    significant, and the fitted change from first to last pair larger than 5%): the node changed
    under the pairs. The ratios may still hold, as both sides drifted; the flag says to look."""
    from scipy import stats

    values = [getattr(pair, side) for pair in pairs]
    if len(values) < 8:
        return None
    tau = stats.kendalltau(range(len(values)), values)
    slope = stats.theilslopes(np.log(values)).slope * (len(values) - 1)
    if tau.pvalue >= alpha or abs(slope) < 0.05:
        return None
    return f"{side} drifted {math.expm1(slope):+.0%} over the session (Kendall tau {tau.statistic:+.2f})"


def next_orders(count: int, kept: Sequence[str], rng: random.Random) -> list[str]:
    """Orders for ``count`` more pairs that bring the kept pairs' orders closest to half each way,
    in random sequence."""
    first = sum(order == ORDERS[0] for order in kept)
    total = len(kept) + count
    want_first = min(count, max(0, total // 2 - first + (rng.random() < 0.5 if total % 2 else 0)))
    orders = [ORDERS[0]] * want_first + [ORDERS[1]] * (count - want_first)
    rng.shuffle(orders)
    return orders


def pairs_wanted(pairs_now: int, first: int, most: int) -> int | None:
    """How many pairs the next round should bring the comparison to (``first``, then doubling, at
    most ``most``), or None when it has ``most`` already."""
    target = first
    while pairs_now >= target and target < most:
        target *= 2
    target = min(target, most)
    return target if pairs_now < target else None
