"""Statistics of an A/B comparison in one session: pairs of launches, the reference environment's
and the current one's, on the same nodes, the order inside each pair balanced and random.

A stored baseline from another day cannot tell the software from the node (a VM whose kernels run
25-30% slower on the second day fails unchanged cells). Pairs measured back to back can: each
pair's log ratio ``log(current / reference)`` cancels what the node did to both. As in Chromium's
Pinpoint, the per-pair log ratios are judged by a Wilcoxon signed-rank test, and the median ratio
gets the distribution-free interval that belongs to that test (Hodges-Lehmann: the Walsh averages'
order statistics). Judged at several looks (8, 16, 32 pairs), each look's interval is a repeated
confidence interval whose level spends the error across the looks (:mod:`harness.judging.sequential`),
so that a verdict's error is what it says however many looks it took. Pure functions; scipy only
inside functions.
"""
from __future__ import annotations

import bisect
import dataclasses
import functools
import math
import random
import statistics
from typing import Sequence

import numpy as np

from harness.judging.kinds import PairedKind
from harness.judging.sequential import RULE_CITATIONS, benjamini_hochberg, look_levels, spending
from harness.judging.stats import Estimate

ALPHA = 0.05
"""The two-sided error of an A/B's intervals over all its looks together: each verdict
(``regressed``, ``improved``, ``same``) is wrong with probability at most ``ALPHA / 2``."""
SPENDING_RULE = "pocock"
MIN_PAIRS = 6
"""The fewest pairs with a 95% signed-rank interval (at 5, even all five the same way give p=0.0625)."""
ORDERS = ("reference-first", "current-first")
DUET_ORDERS = ("reference-on-first-half", "current-on-first-half")
"""A duet pair's arrangements: which side ran on the node's first half (its lower cores or GPUs)."""
MOST_PAIRS_TOLD = 1000
"""Beyond this, an inconclusive verdict says only that more would be needed: a ratio on the edge of
the minimum effect is undecidable at any count."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Pair:
    order: str
    """Which side launched first (one of :data:`ORDERS`), or in a duet which took the node's first
    half (:data:`DUET_ORDERS`)."""
    reference: float
    current: float
    """Each side's throughput in this pair (images/s)."""

    @property
    def log_ratio(self) -> float:
        return math.log(self.current / self.reference)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Look:
    """Where in a sequential A/B its pairs are judged, and the level that look's interval has."""
    looks: tuple[int, ...]
    """The pair counts judged at so far, this look's last."""
    most: int
    """The most pairs the A/B may take: the information fraction of a look is ``pairs / most``."""
    level: float
    """The two-sided level of this look's repeated interval (its confidence is ``1 - level``)."""
    spent: float
    """The two-sided error spent by this look and those before it: a verdict reached here is wrong
    with probability at most ``spent / 2``."""
    rule: str | None
    """The spending rule (:data:`harness.judging.sequential.RULES`); None for a single look."""
    alpha: float = ALPHA

    @property
    def text(self) -> str:
        if self.rule is None:
            return f"{1 - self.level:.1%} interval"
        return (f"{1 - self.level:.1%} repeated interval at look {len(self.looks)} ({self.looks[-1]} of up to "
                f"{self.most} pairs), error spent {self.spent / 2:.2%} a verdict")

    def to_json(self) -> dict:
        return {"looks": list(self.looks), "most": self.most, "level": self.level, "spent": self.spent,
                "rule": self.rule, "rule_name": RULE_CITATIONS.get(self.rule or "", "one look, no spending"),
                "alpha": self.alpha, "error_bound": self.spent / 2}


def single_look(alpha: float = ALPHA) -> Look:
    """One look that spends all of ``alpha``: the judgement of a fixed set of pairs."""
    return Look(looks=(), most=0, level=alpha, spent=alpha, rule=None, alpha=alpha)


def sequential_look(looks: Sequence[int], most: int, alpha: float = ALPHA, rule: str = SPENDING_RULE) -> Look:
    """The last of ``looks`` (pair counts, increasing) in an A/B of at most ``most`` pairs, its level
    spent by ``rule`` (:func:`harness.judging.sequential.look_levels`)."""
    looks = tuple(looks)
    most = max(most, looks[-1])
    return Look(looks=looks, most=most, level=look_levels(looks, most, alpha, rule)[-1],
                spent=spending(rule, alpha)(looks[-1] / most), rule=rule, alpha=alpha)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PairedVerdict:
    kind: PairedKind
    ratio: Estimate
    """Median of current over reference throughput, with its interval at the look's level."""
    p_value: float
    """Wilcoxon's two-sided p against no change at all (reported; the verdict is the interval's)."""
    pairs: int
    min_effect: float
    look: Look = dataclasses.field(default_factory=single_look)
    order_effect: Estimate | None = None
    """How much faster a side runs when it launches second, as a ratio (:func:`order_effect`)."""
    flags: tuple[str, ...] = ()
    """What makes the pairs less trustworthy than their interval says: bimodal ratios, a side
    that drifted during the session."""
    pairs_to_decide: int | None = None
    """An inconclusive verdict's estimate of the pairs a decision would take (:func:`pairs_to_decide`)."""

    @property
    def message(self) -> str:
        text = (f"current/reference {self.ratio.text(3)} ({self.look.text}) over {self.pairs} pairs, "
                f"Wilcoxon p={self.p_value:.3g}, minimum effect {self.min_effect:.0%}")
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
    walsh = np.sort(((x[:, None] + x[None, :]) / 2)[_upper_triangle(n)])
    middle = len(walsh) // 2
    centre = math.exp(float(walsh[middle] if len(walsh) % 2 else (walsh[middle - 1] + walsh[middle]) / 2))
    below = _null_below(n)
    # P(T+ <= d-1) <= tail; the tolerance keeps a level that equals a null probability on its side
    d = int(np.searchsorted(below, (1 - confidence) / 2 * (1 + 1e-9), side="right"))
    if d == 0:
        return Estimate(value=centre, low=-math.inf, high=math.inf, confidence=confidence, n_steps=n)
    return Estimate(value=centre, low=math.exp(walsh[d - 1]), high=math.exp(walsh[len(walsh) - d]),
                    confidence=confidence, n_steps=n)


@functools.lru_cache(maxsize=128)
def _upper_triangle(n: int) -> tuple[np.ndarray, np.ndarray]:
    return np.triu_indices(n)


@functools.lru_cache(maxsize=128)
def _null_below(n: int) -> np.ndarray:
    """P(T+ <= t) for t = 0..n(n+1)/2."""
    return np.cumsum(signed_rank_null(n))


def signed_rank_p_below(log_ratios: Sequence[float], edge: float) -> float:
    """The exact one-sided signed-rank p-value against a median log ratio of ``edge`` or more (small
    where the ratios lie below ``edge``)."""
    shifted = np.asarray(log_ratios, dtype=float) - edge
    shifted = shifted[shifted != 0]
    n = len(shifted)
    if n == 0:
        return 1.0
    ranks = np.argsort(np.argsort(np.abs(shifted))) + 1
    t_plus = int(ranks[shifted > 0].sum())
    return float(_null_below(n)[t_plus])


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


def decide(ratio: Estimate, min_effect: float) -> PairedKind:
    """``regressed`` (``improved``) where the whole interval lies beyond the minimum effect below
    (above) no change, ``same`` where it lies wholly within it, else ``inconclusive``. An interval
    that excludes the minimum effect's edge excludes no change too, so a Wilcoxon test at the
    interval's level would agree."""
    low_edge, high_edge = 1 - min_effect, 1 + min_effect
    if ratio.high < low_edge:
        return PairedKind.REGRESSED
    if ratio.low > high_edge:
        return PairedKind.IMPROVED
    if low_edge < ratio.low and ratio.high < high_edge:
        return PairedKind.SAME
    return PairedKind.INCONCLUSIVE


def judge_pairs(pairs: Sequence[Pair], *, min_effect: float, look: Look | None = None) -> PairedVerdict:
    """The pairs' verdict (:func:`decide`) on their median ratio's interval at ``look``'s level (a
    sequential A/B's look, :func:`sequential_look`; by default one look at :data:`ALPHA`)."""
    from scipy import stats

    look = look or single_look()
    logs = [pair.log_ratio for pair in pairs]
    ratio = median_interval(logs, 1 - look.level)
    if len(logs) < MIN_PAIRS or not any(logs):
        p_value = 1.0
    else:
        p_value = float(stats.wilcoxon(logs, zero_method="wilcox").pvalue)
    kind = decide(ratio, min_effect)
    order = order_effect(pairs)
    flags = tuple(flag for flag in (bimodal(logs), drifted(pairs, "reference"), drifted(pairs, "current"),
                                    order_flag(order, min_effect)) if flag)
    return PairedVerdict(kind=kind, ratio=ratio, p_value=p_value, pairs=len(logs), min_effect=min_effect,
                         look=look, order_effect=order, flags=flags,
                         pairs_to_decide=pairs_to_decide(ratio, min_effect) if kind == PairedKind.INCONCLUSIVE else None)


def judge_sequentially(pairs: Sequence[Pair], *, min_effect: float, first: int, most: int, alpha: float = ALPHA,
                       rule: str = SPENDING_RULE) -> PairedVerdict:
    """The verdict a sequential A/B reaches on ``pairs`` arriving in this order: judged at its
    looks (:func:`harness.judging.sequential.planned_looks`, as far as the pairs go), stopping at
    the first decision. A session's A/B also leaves out and holds what this does not see
    (:mod:`harness.session.paired`); this re-judges its recorded pairs, e.g. at another minimum
    effect."""
    from harness.judging.sequential import planned_looks

    looks = [look for look in planned_looks(first, most) if look <= len(pairs)] or [len(pairs)]
    verdict = None
    for index, look in enumerate(looks):
        verdict = judge_pairs(pairs[:look], min_effect=min_effect,
                              look=sequential_look(looks[:index + 1], most, alpha, rule))
        if verdict.kind != PairedKind.INCONCLUSIVE:
            break
    return verdict


def order_effect(pairs: Sequence[Pair]) -> Estimate | None:
    """How much faster a side runs when launched second (in a duet: on the node's second half), as
    a ratio: half the Hodges-Lehmann difference between the log ratios of the pairs where the
    reference went first and those where the current side did (a second launch that runs ``e``
    faster adds ``e`` to the first kind and takes it from the second), with the 95% interval of
    that difference (Mann-Whitney). None with fewer than three pairs of either arrangement."""
    from scipy import stats

    first = [pair.log_ratio for pair in pairs if pair.order in (ORDERS[0], DUET_ORDERS[0])]
    second = [pair.log_ratio for pair in pairs if pair.order not in (ORDERS[0], DUET_ORDERS[0])]
    if min(len(first), len(second)) < 3:
        return None
    differences = np.sort(np.subtract.outer(np.asarray(first), np.asarray(second)).ravel())
    m, n = len(first), len(second)
    k = max(0, int(math.floor(m * n / 2 - stats.norm.isf(0.025) * math.sqrt(m * n * (m + n + 1) / 12))))
    low, high = (differences[k], differences[-k - 1]) if k > 0 else (-math.inf, math.inf)
    return Estimate(value=math.exp(float(np.median(differences)) / 2), low=math.exp(low / 2),
                    high=math.exp(high / 2), confidence=0.95, n_steps=m + n)


def order_flag(effect: Estimate | None, min_effect: float) -> str | None:
    """The flag where launching second changes a side's speed by more than the minimum effect, with
    confidence: the ratios' median still holds with balanced orders, but each pair is less exact."""
    if effect is None or not (effect.low > 1 + min_effect or effect.high < 1 - min_effect):
        return None
    return (f"order effect: a side launched second runs {effect.value - 1:+.1%} "
            f"[{effect.low - 1:+.1%}, {effect.high - 1:+.1%}] against first (more than the minimum effect)")


STEP_SEGMENT = 4
"""The fewest pairs on either side of a step in the node's speed or in the ratio that is looked for."""


def speed_steps(pairs: Sequence[Pair], verdict: PairedVerdict, *, min_effect: float) -> list[str]:
    """Why a step within the session holds ``verdict`` back, if one does (a decided verdict only):

    - the node's speed stepped (a change point in a side's throughput,
      :func:`harness.judging.stats.change_points`) and the verdict, judged again without the pairs
      around the step (whose two launches may lie on either side of it), is another;
    - the ratio itself stepped and one segment's median lies on the other side of the minimum
      effect's edge from the verdict: the change is in part of the session only.
    """
    from harness.judging.stats import change_points

    if verdict.kind == PairedKind.INCONCLUSIVE or len(pairs) < 2 * STEP_SEGMENT:
        return []
    reasons = []
    for side in ("reference", "current"):
        series = [math.log(getattr(pair, side)) for pair in pairs]
        for at in change_points(series, min_size=STEP_SEGMENT):
            around = {at - 1, at}
            rest = [pair for index, pair in enumerate(pairs) if index not in around]
            again = judge_pairs(rest, min_effect=min_effect, look=verdict.look)
            if again.kind != verdict.kind:
                before, after = (statistics.median(getattr(pair, side) for pair in part)
                                 for part in (pairs[:at], pairs[at:]))
                reasons.append(f"the {side} side's speed stepped from {before:.4g} to {after:.4g} at pair {at + 1}; "
                               f"without the pairs around the step the verdict would be {again.kind}")
    logs = [pair.log_ratio for pair in pairs]
    for at in change_points(logs, min_size=STEP_SEGMENT):
        segments = [math.exp(statistics.median(part)) for part in (logs[:at], logs[at:])]
        if any(decide(Estimate(value=ratio, low=ratio, high=ratio), min_effect) != verdict.kind for ratio in segments):
            reasons.append(f"the ratio stepped from {segments[0]:.3f} to {segments[1]:.3f} at pair {at + 1}: "
                           "the pairs measured different differences in the two parts of the session")
    return reasons


def judge(pairs: Sequence[Pair], *, min_effect: float, look: Look, holds: Sequence[str] = ()) -> PairedVerdict:
    """The one judgement of a comparison's pairs at a look, whichever caller measured them
    (``--against``, ``--confirm``, a bisect's step and its verification): the pairs' verdict at the
    look's level (:func:`judge_pairs`), held ``inconclusive`` where the node's speed stepped within
    them (:func:`speed_steps`) or for the caller's ``holds`` (the node too busy to compare on)."""
    verdict = judge_pairs(pairs, min_effect=min_effect, look=look)
    return hold(verdict, [*speed_steps(pairs, verdict, min_effect=min_effect), *holds])


def hold(verdict: PairedVerdict, reasons: Sequence[str]) -> PairedVerdict:
    """``verdict`` held ``inconclusive`` for ``reasons`` (said in its flags); as it is without any."""
    if not reasons:
        return verdict
    said = "" if verdict.kind == PairedKind.INCONCLUSIVE else f"{verdict.kind} held inconclusive: "
    return dataclasses.replace(verdict, kind=PairedKind.INCONCLUSIVE,
                               flags=verdict.flags + tuple(f"{said}{reason}" for reason in reasons))


P_VALUE_FLOOR = 1e-8
"""The smallest repeated p-value told: a change called at any error below it is told at this one."""
_ALPHAS = tuple(float(alpha) for alpha in np.geomspace(P_VALUE_FLOOR, 1.0, 65))
"""The errors at which :func:`repeated_p_value` looks for the first crossing (eight to a factor of 10)."""


CALLS = (PairedKind.REGRESSED, PairedKind.IMPROVED, PairedKind.SAME)
"""The verdicts that claim something of the change: beyond the minimum effect either way, or within
it. Each is a discovery, held by the false-discovery control across a session's A/Bs
(:func:`calls_that_stand`); ``inconclusive`` claims nothing."""


def look_p_value(log_ratios: Sequence[float], kind: PairedKind, min_effect: float) -> float:
    """The exact one-sided signed-rank p-value of ``kind``'s claim at one look, which is below half
    a look's level exactly where that look's interval (:func:`decide`) calls it: ``regressed``
    against a median log ratio at or above the minimum effect's lower edge, ``improved`` against one
    at or below its upper edge, ``same`` the larger of the two one-sided p-values against a median
    at or beyond either edge (the interval lies within both edges where both tests reject at its
    level: an intersection-union test, as in Schuirmann's two one-sided tests)."""
    low_edge, high_edge = math.log(1 - min_effect), math.log(1 + min_effect)

    def above(edge: float) -> float:  # small where the ratios lie above edge
        return signed_rank_p_below([-x for x in log_ratios], -edge)

    if kind == PairedKind.REGRESSED:
        return signed_rank_p_below(log_ratios, low_edge)
    if kind == PairedKind.IMPROVED:
        return above(high_edge)
    if kind == PairedKind.SAME:
        return max(above(low_edge), signed_rank_p_below(log_ratios, high_edge))
    raise ValueError(f"{kind} claims nothing to test")


def repeated_p_value(log_ratios: Sequence[float], looks: Sequence[int], most: int, kind: PairedKind,
                     min_effect: float, rule: str = SPENDING_RULE) -> float:
    """The smallest error ``alpha`` at which the sequential A/B would have called ``kind`` (one of
    :data:`CALLS`) at one of ``looks`` (the counts of the kept pairs it judged, in order; a look
    beyond ``log_ratios`` was not reached by them and is not counted): the p-value the
    false-discovery control across cells ranks (Jennison and Turnbull's repeated p-value). A look
    calls ``kind`` at ``alpha`` where its :func:`look_p_value` is within half its level at ``alpha``:
    for ``same``, both edges at that one look, as :func:`judge_pairs` judges it. ``1.0`` for a
    verdict that claims nothing.

    It is a p-value only where the tests at the errors it ranks are nested: where every look's level
    grows with ``alpha`` (:func:`nested_alphas`). Beyond that a spending function can take a later
    look's level back (O'Brien-Fleming's spends everything at the first look at ``alpha`` = 1), so the
    smallest crossing is searched for among those errors only: the first of them at which a look
    crosses, then the root between it and the one before. ``1.0`` where none does."""
    if kind not in CALLS:
        return 1.0
    looks = tuple(look for look in looks if 0 < look <= len(log_ratios))
    if not looks:
        return 1.0
    one_sided = [look_p_value(log_ratios[:look], kind, min_effect) for look in looks]

    def margin(alpha: float) -> float:  # >= 0 where some look would have called it at alpha
        levels = look_levels(looks, most, alpha, rule)
        return max(level / 2 - p for p, level in zip(one_sided, levels))

    alphas = nested_alphas(looks, most, rule)
    first = bisect.bisect_left(alphas, True, key=lambda alpha: margin(alpha) >= 0)  # margin grows with alpha there
    if first == len(alphas):
        return 1.0
    if first == 0:
        return alphas[0]
    from scipy.optimize import brentq

    return math.exp(brentq(lambda log_alpha: margin(math.exp(log_alpha)), math.log(alphas[first - 1]),
                           math.log(alphas[first]), xtol=1e-4))


def calls_that_stand(calls: Sequence[tuple[str, float]], cells: int, rate: float = ALPHA) -> list[bool]:
    """Which of a session's A/B verdicts stand under the false-discovery control across the
    ``cells`` it compared (at least ``len(calls)``; a cell not judged claims nothing). ``calls``:
    each A/B's verdict kind and repeated p-value (:func:`repeated_p_value`). Every verdict that
    claims something (:data:`CALLS`) is a discovery ranked by its p-value and stands where
    Benjamini and Hochberg's step-up procedure at ``rate`` rejects it
    (:func:`harness.judging.sequential.benjamini_hochberg`); one that claims nothing
    (``inconclusive``, ``error``) stands as it is. The procedure needs a cell's p-value to fall
    below ``u`` with its claim wrong at most ``u`` of the time, and so it does: a claim that is wrong
    (``regressed`` or ``same`` at a true ratio on the lower edge) is made at error ``u`` only where a
    look's interval at ``u`` misses the true ratio, which the looks' intervals together do at most
    ``u`` of the time. One cell: its call stands (its looks spent the error already)."""
    cells = max(cells, len(calls))
    called = [kind in CALLS for kind, _ in calls]
    if cells < 2:
        return [True] * len(calls)
    p_values = [p_value if claims else 1.0 for (_, p_value), claims in zip(calls, called)]
    rejected = benjamini_hochberg(p_values + [1.0] * (cells - len(calls)), rate)
    return [stands or not claims for stands, claims in zip(rejected, called)]


def surely_stands(p_value: float, cells: int, rate: float = ALPHA) -> bool:
    """Whether a call with repeated p-value ``p_value`` stands under :func:`calls_that_stand` whatever
    the session's other ``cells`` - 1 A/Bs find: within Bonferroni's share ``rate / cells``, the
    first step of Benjamini and Hochberg's procedure, which rejects it whatever the rest."""
    return cells < 2 or p_value <= rate / cells


@functools.lru_cache(maxsize=64)
def nested_alphas(looks: tuple[int, ...], most: int, rule: str) -> tuple[float, ...]:
    """The errors of :data:`_ALPHAS`, from the smallest, up to the last at which no look's level has
    yet fallen as ``alpha`` grew: within them a test at a larger error rejects wherever one at a
    smaller error does, so the smallest error that rejects is a p-value."""
    nested, before = [], None
    for alpha in _ALPHAS:
        levels = look_levels(looks, most, alpha, rule)
        if before is not None and any(level < earlier for level, earlier in zip(levels, before)):
            break
        nested.append(alpha)
        before = levels
    return tuple(nested)


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


def next_orders(count: int, kept: Sequence[str], rng: random.Random,
                arrangements: Sequence[str] = ORDERS) -> list[str]:
    """Orders (or a duet's arrangements) for ``count`` more pairs that bring the kept pairs' to
    closest to half each way, in random sequence."""
    first = sum(order == arrangements[0] for order in kept)
    total = len(kept) + count
    want_first = min(count, max(0, total // 2 - first + (rng.random() < 0.5 if total % 2 else 0)))
    orders = [arrangements[0]] * want_first + [arrangements[1]] * (count - want_first)
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
