"""Where a bisect step places its midpoint, from fixed rounds: like either end, between them (two
culprits), beyond one (a change each way), or unclear, at looks whose error is spent; the rounds'
orders; which midpoint is tried next; whether the changes found account for the range's."""
import math
import random
import statistics
from collections import Counter

import pytest

from harness.judging.bisection import (BETWEEN, BEYOND, LIKE_BAD, LIKE_GOOD, ORDERS, UNCLEAR, Round, account, lean,
                                       midpoint_candidates, pairs_of, place, place_by_counts, position, product,
                                       ratio_of, round_orders, undoes)
from harness.judging.paired import judge_pairs
from harness.judging.sequential import look_levels
from harness.judging.stats import Estimate

MIN_EFFECT = 0.03
NOISE = [0.99, 1.01, 1.0, 0.98, 1.02, 1.005, 0.995, 1.0]
"""Each round's node speed: what all three points of a round share, and the ratios cancel."""


def rounds(mid, bad, jitter=(1.0,) * 8):
    """Eight rounds with the good end at 100 img/s, the midpoint and the bad end at these fractions of it."""
    return [Round(order=ORDERS[i % 6], good=100 * speed, mid=100 * mid * speed * jitter[i], bad=100 * bad * speed)
            for i, speed in enumerate(NOISE)]


def placed(rounds_, **looks):
    """The placement at one look that spends the whole error (the looks' spending: its own test)."""
    return place(rounds_, min_effect=MIN_EFFECT, **(looks or {"looks": [len(rounds_)], "most": len(rounds_)}))


@pytest.mark.parametrize(("mid", "kind"), [(1.0, LIKE_GOOD), (0.7, LIKE_BAD), (0.85, BETWEEN)])
def test_a_midpoint_is_placed_by_which_end_it_runs_like(mid, kind):
    placement = placed(rounds(mid=mid, bad=0.7))
    assert placement.kind == kind, placement.message
    assert placement.ends.kind == "regressed" and placement.ends.ratio.value == pytest.approx(0.7)


def test_a_midpoint_the_noise_hides_is_unclear_and_leans_to_the_nearer_end():
    # ends 6% apart, the midpoint's own launches +-10%: neither comparison is sure
    placement = placed(rounds(mid=0.95, bad=0.94, jitter=[1.1, 0.9, 1.08, 0.92, 1.1, 0.9, 1.05, 0.95]))
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
    placement = placed(measured)
    assert placement.against_bad.kind == "improved" and placement.against_good.kind == "inconclusive"
    assert placement.kind == UNCLEAR, placement.message
    assert lean(placement) == BETWEEN  # position 0.48, should the most rounds not settle it


def test_two_rounds_never_decide():
    placement = placed(rounds(mid=0.7, bad=0.7)[:2])
    assert placement.kind == UNCLEAR


def test_a_steps_looks_spend_its_error_as_an_ab_does():
    """A midpoint 6.5% slower than the good end with an interval that clears 3% at one look of 8
    rounds: at the first of the looks at 8, 16 and 32 rounds the interval is wider (its level spends
    only part of the error) and the place is not yet clear. The evidence says the level. (The
    ratios come in no trend: a step in the midpoint's speed would hold its comparison.)"""
    mid = [0.93, 0.88, 0.975, 0.92, 0.95, 0.9, 0.985, 0.94]
    measured = [Round(order=ORDERS[i % 6], good=100.0, mid=100 * ratio, bad=70.0) for i, ratio in enumerate(mid)]
    assert placed(measured).kind == BETWEEN
    first = placed(measured, looks=[8], most=32)
    assert first.kind == UNCLEAR and first.against_good.kind == "inconclusive", first.message
    assert first.look.level == pytest.approx(look_levels([8], 32, 0.05)[0])
    assert first.against_good.ratio.confidence == pytest.approx(1 - first.look.level)
    evidence = first.to_json()
    assert evidence["look"]["looks"] == [8] and evidence["ends"]["level"] == first.look.level
    assert "98.2% intervals at look 1 of up to 32 rounds" in first.message
    second = placed(measured * 2, looks=[8, 16], most=32)
    assert second.look.level == pytest.approx(look_levels([8, 16], 32, 0.05)[1])
    with pytest.raises(ValueError, match="must be the rounds judged"):
        placed(measured, looks=[6], most=32)


@pytest.mark.parametrize(("mid", "bad", "kind"), [
    (0.4, 0.57, BEYOND),   # slower than the bad end: a regression, then a fix and a smaller one
    (1.1, 0.7, BEYOND),    # faster than the good end: a fix, then a larger regression
    (2.5, 1.43, BEYOND),   # a range that got faster (a slow first end), its midpoint faster than both
    (1.0, 1.43, LIKE_GOOD),  # the same range, the change that made it faster after the midpoint
    (1.43, 1.43, LIKE_BAD),  # ... at the midpoint or before it
    (1.2, 1.43, BETWEEN),
])
def test_a_midpoint_beyond_an_end_means_a_change_each_way(mid, bad, kind):
    placement = placed(rounds(mid=mid, bad=bad))
    assert placement.kind == kind, placement.message


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


def test_rounds_that_make_up_for_left_out_ones_use_the_orders_used_least():
    kept = list(ORDERS[:4])  # two orders short of a block: a round of each was left out
    assert sorted(round_orders(2, random.Random(1), kept=kept)) == sorted(ORDERS[4:])


def test_the_midpoint_nearest_the_middle_is_tried_first_then_its_neighbours():
    assert midpoint_candidates(0, 5) == [2, 3, 1, 4]
    assert midpoint_candidates(3, 6) == [4, 5]
    assert midpoint_candidates(0, 1) == []


def ratio(value, half_width):
    """A ratio with an interval ``half_width`` wide each way in log terms."""
    return Estimate(value=value, low=value * math.exp(-half_width), high=value * math.exp(half_width))


def test_a_product_of_ratios_combines_their_log_half_widths_in_quadrature():
    found = product([ratio(0.5, 0.03), ratio(0.8, 0.04)])
    assert found.value == pytest.approx(0.4)
    assert math.log(found.value / found.low) == pytest.approx(0.05) and math.log(found.high / found.value) == \
        pytest.approx(0.05)
    assert product([]) == Estimate(value=1.0, low=1.0, high=1.0)
    unbounded = product([ratio(0.5, 0.03), Estimate(value=0.9, low=-math.inf, high=math.inf)])
    assert unbounded.too_few_samples and unbounded.value == pytest.approx(0.45)


def test_a_product_combines_intervals_of_different_levels_at_one_level():
    """Verifications stop at different looks, so their intervals have different levels: each is read
    as standard errors at its own level (here 0.02 each in log terms), and the product's interval is
    at the accounting's one level, 95%, and says so."""
    z = statistics.NormalDist().inv_cdf
    at_99 = Estimate(value=0.5, low=0.5 * math.exp(-z(0.995) * 0.02), high=0.5 * math.exp(z(0.995) * 0.02),
                     confidence=0.99)
    at_90 = Estimate(value=0.8, low=0.8 * math.exp(-z(0.95) * 0.02), high=0.8 * math.exp(z(0.95) * 0.02),
                     confidence=0.90)
    found = product([at_99, at_90])
    assert found.confidence == 0.95
    assert math.log(found.value / found.low) == pytest.approx(z(0.975) * math.sqrt(2) * 0.02)
    alone = product([at_99])
    assert alone.confidence == 0.95 and math.log(alone.high / alone.value) == pytest.approx(z(0.975) * 0.02)
    assert account([at_90], at_99).range == alone  # the range's interval at the same level


def test_a_verifications_kept_ratio_reads_back_at_its_looks_level():
    kept = {"ratio": 0.9, "low": 0.85, "high": 0.95, "level": 0.018}
    assert ratio_of(kept).confidence == pytest.approx(0.982)
    assert ratio_of({"ratio": 0.9, "low": None, "high": 0.95}).too_few_samples


def test_a_ratio_that_stepped_within_the_rounds_holds_the_comparison():
    """The midpoint ran as the good end for six rounds, then 20% slower for ten: the pairs alone say
    ``regressed``, but judged as an A/B's pairs are, the step in the ratio holds that comparison
    ``inconclusive``, said in its flags."""
    steady = rounds(mid=1.0, bad=0.7, jitter=NOISE)[:6]
    slower = rounds(mid=0.8, bad=0.7, jitter=NOISE) + rounds(mid=0.8, bad=0.7, jitter=NOISE[::-1])[:2]
    placement = placed(steady + slower)
    alone = judge_pairs(pairs_of(steady + slower, "good", "mid"), min_effect=MIN_EFFECT, look=placement.look)
    assert alone.kind == "regressed" and placement.against_good.kind == "inconclusive", placement.message
    assert "regressed held inconclusive: the ratio stepped from 1.002 to 0.800 at pair 7" in \
        " ".join(placement.against_good.flags)


def test_the_changes_found_must_account_for_the_ranges_slowdown():
    """A regression to 0.4 fixed later, then a second one to 0.57: the first alone does not account
    for the range's 0.57; with its fix and the second, the changes do."""
    range_ratio = ratio(0.57, 0.04)
    first, fix, second = ratio(0.4, 0.04), ratio(2.5, 0.05), ratio(0.57, 0.04)
    missing = account([first], range_ratio)
    assert not missing.holds
    assert missing.message.startswith("the culprits account for 0.400 [0.384, 0.416] of the range's 0.570 "
                                      "[0.548, 0.593] (bad/good): the range holds a change the bisect did not find")
    assert missing.to_json()["holds"] is False and missing.to_json()["found"]["value"] == pytest.approx(0.4)
    found = account([first, fix, second], range_ratio)
    assert found.holds and found.message.startswith("the changes found account for the range's: 0.570")
    assert account([second], range_ratio).holds
    assert not account([], range_ratio).holds  # none found: 1.000 of the range's 0.570
    assert account([Estimate(value=0.4, low=-math.inf, high=math.inf)], range_ratio).holds  # cannot tell


def test_a_fix_undoes_the_culprit_whose_slowdown_it_takes_back():
    assert undoes(ratio(0.4, 0.04), ratio(2.5, 0.05), 0.03)
    assert not undoes(ratio(0.4, 0.04), ratio(1.43, 0.05), 0.03)


def test_a_midpoint_is_placed_by_the_work_it_counts():
    assert place_by_counts(like_good=False, like_bad=True) == LIKE_BAD
    assert place_by_counts(like_good=True, like_bad=False) == LIKE_GOOD
    assert place_by_counts(like_good=False, like_bad=False) == BETWEEN  # the count moved before it and after it
