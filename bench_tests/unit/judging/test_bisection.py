"""Where a bisect step places its midpoint, from fixed rounds: like either end, between them (two
culprits), or unclear; the rounds' orders; which midpoint is tried next."""
import math
import random
from collections import Counter

import pytest

from harness.judging.bisection import (BETWEEN, LIKE_BAD, LIKE_GOOD, ORDERS, UNCLEAR, Round, lean,
                                       midpoint_candidates, pairs_of, place, position, round_orders)

MIN_EFFECT = 0.03
NOISE = [0.99, 1.01, 1.0, 0.98, 1.02, 1.005, 0.995, 1.0]
"""Each round's node speed: what all three points of a round share, and the ratios cancel."""


def rounds(mid, bad, jitter=(1.0,) * 8):
    """Eight rounds with the good end at 100 img/s, the midpoint and the bad end at these fractions of it."""
    return [Round(order=ORDERS[i % 6], good=100 * speed, mid=100 * mid * speed * jitter[i], bad=100 * bad * speed)
            for i, speed in enumerate(NOISE)]


@pytest.mark.parametrize(("mid", "kind"), [(1.0, LIKE_GOOD), (0.7, LIKE_BAD), (0.85, BETWEEN)])
def test_a_midpoint_is_placed_by_which_end_it_runs_like(mid, kind):
    placement = place(rounds(mid=mid, bad=0.7), min_effect=MIN_EFFECT)
    assert placement.kind == kind, placement.message
    assert placement.ends.kind == "regressed" and placement.ends.ratio.value == pytest.approx(0.7)


def test_a_midpoint_the_noise_hides_is_unclear_and_leans_to_the_nearer_end():
    # ends 6% apart, the midpoint's own launches +-10%: neither comparison is sure
    placement = place(rounds(mid=0.95, bad=0.94, jitter=[1.1, 0.9, 1.08, 0.92, 1.1, 0.9, 1.05, 0.95]),
                      min_effect=MIN_EFFECT)
    assert placement.kind == UNCLEAR, placement.message
    expected = BETWEEN if 0.25 <= placement.position <= 0.75 else LIKE_BAD if placement.position > 0.75 else LIKE_GOOD
    assert lean(placement) == expected


MEASURED_BETWEEN = [(0.894, 0.783), (0.898, 0.808), (0.887, 0.771), (1.0, 0.897), (0.967, 0.881), (0.834, 0.807),
                    (0.893, 0.744), (1.03, 0.726)]
"""(mid/good, bad/good) of the 8 rounds of a real step with two culprits of about 10% in its range,
one on either side of the midpoint (docs/measurements.md, 2026-11-27)."""


def test_a_midpoint_not_surely_as_fast_as_the_good_end_is_not_like_it():
    """Faster than the bad end, and slower than the good one by 7% with an interval that reaches 0.998:
    not a sure regression beyond 3%, but not surely "not slower" either. Taken for like-good, the
    bisect dropped the half that held the first culprit."""
    measured = [Round(order=ORDERS[i % 6], good=100.0, mid=100 * mid, bad=100 * bad)
                for i, (mid, bad) in enumerate(MEASURED_BETWEEN)]
    placement = place(measured, min_effect=MIN_EFFECT)
    assert placement.against_bad.kind == "improved" and placement.against_good.kind == "inconclusive"
    assert placement.kind == UNCLEAR, placement.message
    assert lean(placement) == BETWEEN  # position 0.48, should the most rounds not settle it


def test_two_rounds_never_decide():
    placement = place(rounds(mid=0.7, bad=0.7)[:2], min_effect=MIN_EFFECT)
    assert placement.kind == UNCLEAR


def test_position_is_zero_at_the_good_end_one_at_the_bad_end():
    assert position(rounds(mid=1.0, bad=0.8)) == pytest.approx(0.0, abs=1e-12)
    assert position(rounds(mid=0.8, bad=0.8)) == pytest.approx(1.0)
    assert position(rounds(mid=math.sqrt(0.8), bad=0.8)) == pytest.approx(0.5)  # halfway in log terms
    assert math.isnan(position(rounds(mid=0.9, bad=1.0)))


def test_a_rounds_pair_order_is_which_of_the_two_launched_first():
    rounds_ = [Round(order="mid,good,bad", good=100, mid=90, bad=80),
               Round(order="good,bad,mid", good=100, mid=90, bad=80)]
    assert [p.order for p in pairs_of(rounds_, "good", "mid")] == ["current-first", "reference-first"]
    assert [(p.reference, p.current) for p in pairs_of(rounds_, "bad", "mid")] == [(80, 90), (80, 90)]


def test_every_order_comes_once_in_each_six_rounds():
    orders = round_orders(12, random.Random(3))
    assert Counter(orders) == {order: 2 for order in ORDERS}
    assert Counter(order.split(",")[0] for order in orders[:6]) == {"good": 2, "mid": 2, "bad": 2}
    assert len(round_orders(4, random.Random(3))) == 4


def test_the_midpoint_nearest_the_middle_is_tried_first_then_its_neighbours():
    assert midpoint_candidates(0, 5) == [2, 3, 1, 4]
    assert midpoint_candidates(3, 6) == [4, 5]
    assert midpoint_candidates(0, 1) == []
