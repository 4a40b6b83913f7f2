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
- ``unclear`` otherwise, which more rounds may settle. Where the most rounds still leave it unclear,
  :func:`lean` places it by where its median effect lies between the ends (in the middle half:
  ``between``), and the step says that it was so placed.

"Surely near" is one side of the interval, not the two that "the same" asks; on a noisy node an
A/B reaches ``same`` only after many pairs, while the ends of a range differ by the culprit's whole
effect. But not the mere absence of a sure slowdown either: with two culprits of 10% each, a
midpoint between them ran 0.927 [0.863, 0.998] of the good end over 8 rounds (inconclusive against
the 3% minimum effect) and 1.132 [1.073, 1.273] of the bad end; taking that for ``like-good`` would
have dropped the first culprit's half.

A bisect that misjudges each of its steps with probability e finds the culprit with (1 - e)^steps,
so each step is held to an A/B's standard, not to one launch per point. Pure functions.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
import random
import statistics
from typing import Sequence

from harness.judging.kinds import PairedKind
from harness.judging.paired import Pair, PairedVerdict, judge_pairs

POINTS = ("good", "mid", "bad")
ORDERS = tuple(",".join(order) for order in itertools.permutations(POINTS))
LIKE_GOOD, LIKE_BAD, BETWEEN, UNCLEAR = "like-good", "like-bad", "between", "unclear"


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

    @property
    def message(self) -> str:
        return (f"mid/good {_ratio(self.against_good)} ({self.against_good.kind}), mid/bad "
                f"{_ratio(self.against_bad)} ({self.against_bad.kind}), bad/good {_ratio(self.ends)}, "
                f"position {self.position:.2f} over {self.ends.pairs} rounds")

    def to_json(self) -> dict:
        return {"kind": self.kind, "position": self.position, "message": self.message,
                **{name: _verdict_json(getattr(self, name)) for name in ("against_good", "against_bad", "ends")}}


def _ratio(verdict: PairedVerdict) -> str:
    return verdict.ratio.text(3)


def _verdict_json(verdict: PairedVerdict) -> dict:
    return {"kind": verdict.kind, "ratio": verdict.ratio.value, "low": verdict.ratio.low,
            "high": verdict.ratio.high, "p_value": verdict.p_value, "pairs": verdict.pairs,
            "flags": list(verdict.flags)}


def pairs_of(rounds: Sequence[Round], reference: str, current: str) -> list[Pair]:
    """Each round as a pair of two of its points; the pair's order is which of the two launched first."""
    return [Pair(order="reference-first" if r.order.index(reference) < r.order.index(current) else "current-first",
                 reference=getattr(r, reference), current=getattr(r, current)) for r in rounds]


def place(rounds: Sequence[Round], *, min_effect: float) -> Placement:
    against_good = judge_pairs(pairs_of(rounds, "good", "mid"), min_effect=min_effect)
    against_bad = judge_pairs(pairs_of(rounds, "bad", "mid"), min_effect=min_effect)
    ends = judge_pairs(pairs_of(rounds, "good", "bad"), min_effect=min_effect)
    slower_than_good = against_good.kind == PairedKind.REGRESSED
    faster_than_bad = against_bad.kind == PairedKind.IMPROVED
    margin = sameness_margin(ends, min_effect)
    if slower_than_good and faster_than_bad:
        kind = BETWEEN
    elif faster_than_bad and against_good.ratio.low > 1 - margin:
        kind = LIKE_GOOD
    elif slower_than_good and against_bad.ratio.high < 1 + margin:
        kind = LIKE_BAD
    else:
        kind = UNCLEAR
    return Placement(kind=kind, against_good=against_good, against_bad=against_bad, ends=ends,
                     position=position(rounds))


SECOND_CULPRIT_SHARE = 3
"""A midpoint is like an end where it surely lies within a third of the range's slowdown of it (or
within the minimum effect, whichever is wider)."""


def sameness_margin(ends: PairedVerdict, min_effect: float) -> float:
    """How near an end the midpoint must surely be to count as like it: within the minimum effect,
    or within a third of the range's own slowdown where that is wider. A midpoint between two
    culprits of more than a third each is not taken for either end; a smaller second culprit beside
    a large first may be taken for the noise around it. With the
    minimum effect alone, telling a midpoint within 3% of an end took 32 rounds where 8 told which
    end (two culprits of 10% on this VM, docs/measurements.md)."""
    return max(min_effect, (1 - ends.ratio.value) / SECOND_CULPRIT_SHARE)


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
    them where it lies in the middle half (NaN, ends that ran alike: like the bad end)."""
    if LEAN_BETWEEN[0] <= placement.position <= LEAN_BETWEEN[1]:
        return BETWEEN
    return LIKE_GOOD if placement.position < LEAN_BETWEEN[0] else LIKE_BAD


def round_orders(count: int, rng: random.Random) -> list[str]:
    """Orders for ``count`` rounds: each of the six orders once per six rounds, shuffled, so that no
    point is favoured by always launching first or last."""
    orders: list[str] = []
    while len(orders) < count:
        block = list(ORDERS)
        rng.shuffle(block)
        orders += block
    return orders[:count]


def midpoint_candidates(low: int, high: int) -> list[int]:
    """The points strictly inside ``(low, high)``, nearest the middle first: where the middle cannot
    be built or run, the next is tried (``git bisect skip``)."""
    middle = (low + high) / 2
    return sorted(range(low + 1, high), key=lambda index: (abs(index - middle), index))
