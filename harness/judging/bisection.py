"""Where a bisect step's midpoint lies between the ends of its range (``dlscale-bisect``).

A step launches the range's good end, its midpoint and its bad end in rounds, the three in random
order within each round, so that each round's ratios cancel what the node did to all three (as an
A/B's pairs do, :mod:`harness.judging.paired`). Each round gives two pairs: the midpoint against the
good end and against the bad end, each judged as an A/B is. The midpoint is

- ``like-good`` where it is faster than the bad end (the whole interval beyond the minimum effect)
  and surely near the good one (the whole interval within :func:`sameness_margin` of it: the
  minimum effect, or a third of the range's slowdown where wider): the culprit lies after it;
- ``like-bad`` where it is slower than the good end and surely near the bad one: the culprit is the
  midpoint or before it;
- ``between`` where it is slower than the good end and faster than the bad one, both with
  confidence: part of the slowdown came before it and part after, so the range holds two culprits
  and both halves are searched;
- ``beyond`` where it lies beyond either end with confidence: slower than the bad end, or faster
  than the good one. A change went each way in the range (a regression, then a fix of it and a second
  regression of another size; or a fix of an earlier change, then a larger regression), so both halves are
  searched, each toward its own ends: a range whose first end is the slower is searched for the
  change that made its last end faster, as a regression's range is for the one that made it slower;
- ``unclear`` otherwise, which more rounds may settle. Where the most rounds still leave it unclear,
  :func:`lean` places it by where its median effect lies between the ends (in the middle half:
  ``between``), and the step says that it was so placed.

A step judges its three comparisons at each of its looks (8, 16 and 32 rounds by default) and stops
at the first that places the midpoint, so each look's intervals are repeated intervals whose level
spends the error across the looks (:func:`harness.judging.paired.sequential_look`), as an A/B's are.

"Surely near" is one side of the interval, not the two that "the same" asks; on a noisy node an
A/B reaches ``same`` only after many pairs, while the ends of a range differ by the culprit's whole
effect. But not the mere absence of a sure slowdown either: with two culprits of 10% each, a
midpoint between them ran 0.927 [0.863, 0.998] of the good end over 8 rounds (inconclusive against
the 3% minimum effect) and 1.132 [1.073, 1.273] of the bad end; taking that for ``like-good`` would
have dropped the first culprit's half.

A bisect that misjudges each of its steps with probability e finds the culprit with (1 - e)^steps,
so each step is held to an A/B's standard, not to one launch per point. Where the range's ends
differ in the work a step does (harness.judging.work), one launch a point is enough:
:func:`place_by_work` places a midpoint by its counted work, which does not depend on the node.

At the end, the changes the bisect verified must account for the range's own change (:func:`account`):
the product of their ratios against the bad end's ratio to the good end. A regression fixed later
in the range, then a second one of the same size, leaves no midpoint beyond an end and no gap in
that product; one of another size leaves both. Pure functions.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
import random
import statistics
from statistics import NormalDist
from typing import Sequence

from harness.common.jsonio import finite_or_none
from harness.judging.kinds import PairedKind
from harness.judging.paired import ALPHA, SPENDING_RULE, Look, Pair, PairedVerdict, judge, sequential_look
from harness.judging.stats import Estimate

POINTS = ("good", "mid", "bad")
"""A range's ends keep their names whichever runs faster: ``good`` is its first point, ``bad`` its last."""
ORDERS = tuple(",".join(order) for order in itertools.permutations(POINTS))
LIKE_GOOD, LIKE_BAD, BETWEEN, BEYOND, UNCLEAR = "like-good", "like-bad", "between", "beyond", "unclear"
BOTH_HALVES = (BETWEEN, BEYOND)
"""Placements after which both halves of the range are searched."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Round:
    order: str
    """The order the three points launched in: one of :data:`ORDERS`."""
    good: float
    mid: float
    bad: float
    """Each point's throughput in this round (images/s)."""

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Placement:
    kind: str
    """:data:`LIKE_GOOD`, :data:`LIKE_BAD`, :data:`BETWEEN` or :data:`UNCLEAR`."""
    against_good: PairedVerdict
    """The midpoint against the good end (current: the midpoint)."""
    against_bad: PairedVerdict
    """The midpoint against the bad end."""
    ends: PairedVerdict
    """The bad end against the good one: the range's regression, measured in the same rounds."""
    position: float
    """Where the midpoint's median effect lies: 0 at the good end, 1 at the bad end."""
    look: Look
    """The look the three comparisons were judged at: their intervals' level."""

    @property
    def message(self) -> str:
        look = self.look
        return (f"mid/good {_ratio(self.against_good)} ({self.against_good.kind}), mid/bad "
                f"{_ratio(self.against_bad)} ({self.against_bad.kind}), bad/good {_ratio(self.ends)}, "
                f"position {self.position:.2f} over {self.ends.pairs} rounds ({1 - look.level:.1%} intervals at "
                f"look {len(look.looks)} of up to {look.most} rounds)")

    def to_json(self) -> dict:
        return {"kind": self.kind, "position": finite_or_none(self.position), "message": self.message,
                "look": self.look.to_json(),
                **{name: _verdict_json(getattr(self, name)) for name in ("against_good", "against_bad", "ends")}}


def _ratio(verdict: PairedVerdict) -> str:
    return verdict.ratio.text(3)


def _verdict_json(verdict: PairedVerdict) -> dict:
    """A comparison as a step's evidence keeps it; an interval's missing end is null
    (:func:`ratio_of` reads it back)."""
    return {"kind": verdict.kind, "ratio": verdict.ratio.value, "low": finite_or_none(verdict.ratio.low),
            "high": finite_or_none(verdict.ratio.high), "level": verdict.look.level, "p_value": verdict.p_value,
            "pairs": verdict.pairs, "flags": list(verdict.flags)}


def ratio_of(evidence: dict) -> Estimate:
    """A ratio with its interval as :meth:`Placement.to_json` or a verification keeps it: ``ratio``,
    ``low`` and ``high`` (a null end: no interval on that side), at the confidence its look's
    ``level`` leaves."""
    def end(key: str, missing: float) -> float:
        return float(evidence[key]) if evidence.get(key) is not None else missing
    return Estimate(value=float(evidence["ratio"]), low=end("low", -math.inf), high=end("high", math.inf),
                    **({"confidence": 1 - float(evidence["level"])} if evidence.get("level") is not None else {}))


def pairs_of(rounds: Sequence[Round], reference: str, current: str) -> list[Pair]:
    """Each round as a pair of two of its points; the pair's order is which of the two launched first."""
    return [Pair(order="reference-first" if r.order.index(reference) < r.order.index(current) else "current-first",
                 reference=getattr(r, reference), current=getattr(r, current)) for r in rounds]


def place(rounds: Sequence[Round], *, min_effect: float, looks: Sequence[int], most: int, alpha: float = ALPHA,
          rule: str = SPENDING_RULE, holds: Sequence[str] = ()) -> Placement:
    """The midpoint's place from ``rounds``, judged at the last of ``looks`` (the round counts the
    step has judged at, this one's ``len(rounds)``) in a step of at most ``most`` rounds, with the
    error ``alpha`` spent across the looks by ``rule``. Each of its three comparisons is judged as an
    A/B's pairs are (:func:`harness.judging.paired.judge`): held ``inconclusive`` where the node's
    speed stepped within the rounds, or for the caller's ``holds``.

    The range's direction is its ends': where the bad end runs faster than the good one (a range
    that a ``beyond`` step left between a slow midpoint and a faster end), "slower" and "faster"
    below swap, and the step looks for the change that made it faster."""
    if not looks or looks[-1] != len(rounds):
        raise ValueError(f"the last look ({list(looks)}) must be the rounds judged ({len(rounds)})")
    look = sequential_look(looks, most, alpha, rule)

    def judged(reference: str, current: str) -> PairedVerdict:
        return judge(pairs_of(rounds, reference, current), min_effect=min_effect, look=look, holds=holds)

    against_good, against_bad, ends = judged("good", "mid"), judged("bad", "mid"), judged("good", "bad")
    toward, back = (PairedKind.REGRESSED, PairedKind.IMPROVED) if ends.ratio.value <= 1 else \
        (PairedKind.IMPROVED, PairedKind.REGRESSED)
    margin = sameness_margin(ends, min_effect)
    near_good = against_good.ratio.low > 1 - margin if toward == PairedKind.REGRESSED else \
        against_good.ratio.high < 1 + margin
    near_bad = against_bad.ratio.high < 1 + margin if toward == PairedKind.REGRESSED else \
        against_bad.ratio.low > 1 - margin
    moved, short = against_good.kind == toward, against_bad.kind == back
    if against_bad.kind == toward or against_good.kind == back:
        kind = BEYOND
    elif moved and short:
        kind = BETWEEN
    elif short and near_good:
        kind = LIKE_GOOD
    elif moved and near_bad:
        kind = LIKE_BAD
    else:
        kind = UNCLEAR
    return Placement(kind=kind, against_good=against_good, against_bad=against_bad, ends=ends,
                     position=position(rounds), look=look)


SECOND_CULPRIT_SHARE = 3
"""A midpoint is like an end where it surely lies within a third of the range's slowdown of it (or
within the minimum effect, whichever is wider)."""


def place_by_counts(like_good: bool, like_bad: bool) -> str:
    """Where a midpoint lies by what one launch of it counts (its work, its host instructions)
    against its range's ends': counts are exact, or nearly, so one launch a point places it.
    ``between`` where it counts like neither end: the count moved before it and after it."""
    if like_bad:
        return LIKE_BAD
    return LIKE_GOOD if like_good else BETWEEN


def sameness_margin(ends: PairedVerdict, min_effect: float) -> float:
    """How near an end the midpoint must surely be to count as like it: within the minimum effect,
    or within a third of the range's own slowdown where that is wider. A midpoint between two
    culprits of more than a third each is not taken for either end; a smaller second culprit beside
    a large first may be taken for the noise around it. With the
    minimum effect alone, telling a midpoint within 3% of an end took 32 rounds where 8 told which
    end (two culprits of 10% on this VM, docs/measurements.md)."""
    return max(min_effect, abs(1 - ends.ratio.value) / SECOND_CULPRIT_SHARE)


def position(rounds: Sequence[Round]) -> float:
    """The median log ratio of the midpoint to the good end over that of the bad end to the good end:
    0 where the midpoint runs as the good end does, 1 where it runs as the bad end. NaN where the
    ends run the same."""
    to_mid = statistics.median(math.log(r.mid / r.good) for r in rounds)
    to_bad = statistics.median(math.log(r.bad / r.good) for r in rounds)
    return to_mid / to_bad if to_bad else math.nan


LEAN_BETWEEN = (0.25, 0.75)
"""Positions an unclear midpoint is placed ``between`` at: searching both halves costs steps, missing
a second culprit costs the answer."""


def lean(placement: Placement) -> str:
    """An unclear midpoint placed by its position alone: like the end it lies nearer to, or between
    them where it lies in the middle half (NaN, ends that ran alike: like the bad end). A position
    beyond an end leans to that end: ``beyond`` is said only with confidence."""
    if LEAN_BETWEEN[0] <= placement.position <= LEAN_BETWEEN[1]:
        return BETWEEN
    return LIKE_GOOD if placement.position < LEAN_BETWEEN[0] else LIKE_BAD


def round_orders(count: int, rng: random.Random, kept: Sequence[str] = ()) -> list[str]:
    """Orders for ``count`` more rounds: each of the six orders once per six rounds with those
    ``kept``, shuffled, so that no point is favoured by always launching first or last (a round left
    out is made up for by the orders used least)."""
    used = {order: sum(order == k for k in kept) for order in ORDERS}
    orders: list[str] = []
    while len(orders) < count:
        fewest = min(used.values())
        block = [order for order in ORDERS if used[order] == fewest]
        rng.shuffle(block)
        for order in block:
            used[order] += 1
        orders += block
    return orders[:count]


def sequence(order: str) -> list[str]:
    """The points a round launches, in its order's sequence."""
    return order.split(",")


def midpoint_candidates(low: int, high: int) -> list[int]:
    """The points strictly inside ``(low, high)``, nearest the middle first: where the middle cannot
    be built or run, the next is tried (``git bisect skip``)."""
    middle = (low + high) / 2
    return sorted(range(low + 1, high), key=lambda index: (abs(index - middle), index))


ACCOUNTING_CONFIDENCE = 1 - ALPHA
"""The one level the accounting's intervals are combined and compared at."""


def product(ratios: Sequence[Estimate], confidence: float = ACCOUNTING_CONFIDENCE) -> Estimate:
    """The product of independent ratios, with its interval at ``confidence``: each factor's log
    half-widths below and above, taken as standard errors at the factor's own level, combined in
    quadrature and widened to ``confidence``.

    The verifications are separate A/Bs of separate launches, so their errors are independent, but
    each stopped at its own look, whose repeated interval has its own level (98.2% at the first of
    three looks, 97.4% at the third): half-widths at different levels do not add, standard errors
    do. The product of the ends instead (every factor at its low end at once) would be the interval
    that holds where all the factors' intervals hold together, Bonferroni-wide: with three changes it
    is as wide as their three half-widths added, and would hide a missing change as large as one of
    them. The signed-rank intervals are not symmetric, so each side is combined on its own. A factor
    without an interval (too few pairs) leaves the product without one. The product of none is 1,
    exactly; of one, the ratio with its interval at ``confidence``."""
    z = NormalDist().inv_cdf((1 + confidence) / 2)
    value, below, above = 1.0, 0.0, 0.0
    for ratio in ratios:
        value *= ratio.value
        if ratio.too_few_samples:
            below = above = math.inf
            continue
        own = NormalDist().inv_cdf((1 + ratio.confidence) / 2)
        below += (math.log(ratio.value / ratio.low) / own) ** 2
        above += (math.log(ratio.high / ratio.value) / own) ** 2
    if not ratios:
        return Estimate(value=1.0, low=1.0, high=1.0, confidence=confidence)
    return Estimate(value=value, low=value * math.exp(-z * math.sqrt(below)) if math.isfinite(below) else -math.inf,
                    high=value * math.exp(z * math.sqrt(above)) if math.isfinite(above) else math.inf,
                    confidence=confidence)


def _overlap(one: Estimate, other: Estimate) -> bool:
    return one.low <= other.high and other.low <= one.high


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Accounting:
    """Whether the changes a bisect verified account for its range's change (:func:`account`)."""
    found: Estimate
    """The product of the verified changes' ratios (:func:`product`)."""
    range: Estimate
    """The bad end's ratio to the good end, as the range's first step measured it."""

    @property
    def holds(self) -> bool:
        return _overlap(self.found, self.range)

    @property
    def message(self) -> str:
        if self.holds:
            return (f"the changes found account for the range's: {self.found.text(3)} against bad/good "
                    f"{self.range.text(3)}")
        return (f"the culprits account for {self.found.text(3)} of the range's {self.range.text(3)} (bad/good): "
                "the range holds a change the bisect did not find (a regression fixed later in the range, then "
                "another; or a culprit a step passed over)")

    def to_json(self) -> dict:
        return {"holds": self.holds, "found": self.found.to_json(), "range": self.range.to_json(),
                "message": self.message}


def account(changes: Sequence[Estimate], range_ratio: Estimate) -> Accounting:
    """The verified changes' ratios (each its verification's current/reference, a fix's above 1)
    against the range's bad/good, both intervals at :data:`ACCOUNTING_CONFIDENCE`: they account for
    it where the product's interval and the range's overlap. Two intervals that just fail to overlap
    differ by more than either's error, so the check says a change is missing only where the gap is
    sure, not where the product merely misses the range's centre."""
    return Accounting(found=product(changes), range=product([range_ratio]))


def undoes(culprit: Estimate, fix: Estimate, min_effect: float) -> bool:
    """Whether ``fix`` (a later verified change that made the cell faster) undid ``culprit``: their
    product's interval reaches within the minimum effect of no change."""
    return _overlap(product([culprit, fix]), Estimate(value=1.0, low=1 - min_effect, high=1 + min_effect))
