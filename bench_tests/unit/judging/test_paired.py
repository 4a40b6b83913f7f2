"""The A/B statistics on fixed pairs: the signed-rank null distribution, the median ratio's
interval and its coverage, the four verdicts, the flags, and the rounds' orders."""
import math
import random
from collections import Counter

import numpy as np
import pytest

from harness.judging.paired import (MOST_PAIRS_TOLD, ORDERS, Pair, bimodal, cause_of, drifted, hold, judge_pairs,
                                    judge_sequentially, median_interval, next_orders, order_effect, pairs_to_decide,
                                    pairs_wanted, signed_rank_null, speed_steps)

MIN_EFFECT = 0.03


def pairs_of(ratios, reference=100.0):
    return [Pair(order=ORDERS[i % 2], reference=reference, current=reference * ratio) for i, ratio in enumerate(ratios)]


def test_the_signed_rank_null_matches_the_published_critical_values():
    # n=8: P(T+ <= 3) = 5/256, the two-sided 5% critical value 3 of the tables; n=6: P(T+ <= 0) = 1/64.
    below = np.cumsum(signed_rank_null(8))
    assert below[3] == pytest.approx(5 / 256) and below[4] > 0.025
    assert signed_rank_null(6)[0] == pytest.approx(1 / 64)
    assert signed_rank_null(10).sum() == pytest.approx(1.0)


def test_the_interval_is_the_walsh_averages_order_statistics():
    logs = [0.01 * k for k in (-3, -1, 0, 2, 4, 5, 7, 9)]
    walsh = sorted((a + b) / 2 for i, a in enumerate(logs) for b in logs[i:])
    estimate = median_interval(logs)
    assert estimate.low == pytest.approx(math.exp(walsh[3]))  # d = 4 at n = 8
    assert estimate.high == pytest.approx(math.exp(walsh[-4]))
    assert estimate.value == pytest.approx(math.exp(np.median(walsh)))


def test_the_interval_covers_the_true_ratio_as_often_as_it_says():
    rng = np.random.default_rng(7)
    hits = 0
    for _ in range(1000):
        estimate = median_interval(rng.normal(math.log(0.9), 0.05, 10))
        hits += estimate.low < 0.9 < estimate.high
    assert 0.93 <= hits / 1000 <= 0.98  # the exact level at n=10: 0.951


def test_five_pairs_have_no_interval():
    assert median_interval([0.1] * 5).too_few_samples


@pytest.mark.parametrize("ratios, kind", [
    ([0.85, 0.86, 0.84, 0.85, 0.87, 0.83, 0.86, 0.85], "regressed"),
    ([1.15, 1.12, 1.18, 1.14, 1.16, 1.13, 1.17, 1.15], "improved"),
    ([1.0, 1.01, 0.99, 1.005, 0.995, 1.0, 1.01, 0.99], "same"),
    ([0.80, 1.20, 0.90, 1.10, 0.85, 1.15, 0.95, 1.05], "inconclusive"),  # too noisy to say either
    ([0.975, 0.97, 0.98, 0.972, 0.978, 0.974, 0.976, 0.971], "same"),  # different, but by less than the effect
    ([0.95, 0.98, 0.96, 0.975, 0.955, 0.97, 0.965, 0.96], "inconclusive"),  # the interval spans the effect's edge
])
def test_the_four_verdicts(ratios, kind):
    verdict = judge_pairs(pairs_of(ratios), min_effect=MIN_EFFECT)
    assert verdict.kind == kind, verdict.message
    assert verdict.pairs == len(ratios)


def test_regressed_needs_the_whole_interval_beyond_the_minimum_effect():
    ratios = [0.85, 0.86, 0.84, 0.85, 0.87, 0.83, 0.86, 0.85]
    assert judge_pairs(pairs_of(ratios), min_effect=0.10).kind == "regressed"
    assert judge_pairs(pairs_of(ratios), min_effect=0.16).kind == "inconclusive"


def test_an_inconclusive_verdict_says_about_how_many_pairs_would_decide_it():
    ratios = [0.86, 1.02, 0.91, 0.99, 0.88, 0.97, 0.90, 1.00]  # about 6% slower, too noisy for 8 pairs
    verdict = judge_pairs(pairs_of(ratios), min_effect=MIN_EFFECT)
    assert verdict.kind == "inconclusive" and 8 < verdict.pairs_to_decide < 200
    assert f"about {verdict.pairs_to_decide} pairs would decide it" in verdict.message
    more = ratios * math.ceil(1.5 * verdict.pairs_to_decide / len(ratios))  # the same spread, more pairs
    assert judge_pairs(pairs_of(more), min_effect=MIN_EFFECT).kind == "regressed"
    assert judge_pairs(pairs_of([0.85] * 8), min_effect=MIN_EFFECT).pairs_to_decide is None  # decided


def test_pairs_to_decide_has_no_answer_without_an_interval_and_none_worth_giving_on_an_edge():
    assert pairs_to_decide(median_interval([0.1, -0.1, 0.05]), MIN_EFFECT) is None
    on_the_edge = median_interval([math.log(0.97) + d for d in (-0.05, 0.05, -0.03, 0.03, -0.01, 0.01, 0.0, 0.0)])
    assert pairs_to_decide(on_the_edge, MIN_EFFECT) > MOST_PAIRS_TOLD
    assert "more than 1000 pairs would be needed" in judge_pairs(
        pairs_of([0.92, 1.02, 0.95, 0.99, 0.93, 1.01, 0.97, 0.97]), min_effect=MIN_EFFECT).message


def test_a_ratio_is_current_over_reference_whatever_the_order():
    first, second = Pair(order=ORDERS[0], reference=100, current=80), Pair(order=ORDERS[1], reference=100, current=80)
    assert first.log_ratio == second.log_ratio == pytest.approx(math.log(0.8))


def test_bimodal_pairs_are_flagged_and_one_group_is_not():
    assert bimodal([math.log(r) for r in [0.90, 0.91, 0.90, 0.89, 1.10, 1.11, 1.09, 1.10]]).startswith("bimodal: 4")
    assert bimodal([math.log(r) for r in np.linspace(0.9, 1.1, 8)]) is None
    assert bimodal([0.0] * 7) is None  # too few to say


def test_a_side_that_drifts_through_the_session_is_flagged():
    slowing = [Pair(order=ORDERS[i % 2], reference=100 * (1 - 0.03 * i), current=100 * (1 - 0.03 * i))
               for i in range(10)]
    assert "reference drifted -2" in drifted(slowing, "reference")
    assert drifted(pairs_of([1.0] * 10), "reference") is None
    flags = judge_pairs(slowing, min_effect=MIN_EFFECT).flags
    assert len(flags) == 2 and judge_pairs(slowing, min_effect=MIN_EFFECT).kind == "same"


def test_orders_are_balanced_and_random():
    rng = random.Random(1)
    first = next_orders(8, [], rng)
    assert Counter(first) == {ORDERS[0]: 4, ORDERS[1]: 4}
    assert len({tuple(next_orders(8, [], random.Random(seed))) for seed in range(20)}) > 5
    # two pairs of one order were dropped: the next round makes up for them
    kept = [ORDERS[0]] * 4 + [ORDERS[1]] * 2
    assert Counter(kept + next_orders(10, kept, rng)) == {ORDERS[0]: 8, ORDERS[1]: 8}


def test_rounds_double_up_to_the_most():
    assert [pairs_wanted(n, 8, 32) for n in (0, 7, 8, 15, 16, 31, 32)] == [8, 8, 16, 16, 32, 32, None]
    assert [pairs_wanted(n, 6, 20) for n in (0, 6, 12, 20)] == [6, 12, 20, None]


@pytest.mark.parametrize("ratios, cause", [
    ([0.85, 0.86, 0.84, 0.85, 0.87, 0.83, 0.86, 0.85], "software"),  # slower than the baseline's environment
    ([1.0, 1.01, 0.99, 1.005, 0.995, 1.0, 1.01, 0.99], "system"),  # the same: the node changed
    ([1.15, 1.12, 1.18, 1.14, 1.16, 1.13, 1.17, 1.15], "system"),
    ([0.80, 1.20, 0.90, 1.10, 0.85, 1.15, 0.95, 1.05], "unknown"),
])
def test_a_confirmation_puts_the_change_on_the_software_or_the_system(ratios, cause):
    assert cause_of(judge_pairs(pairs_of(ratios), min_effect=MIN_EFFECT)) == cause


def test_a_step_in_the_ratio_holds_a_verdict_one_part_of_the_session_contradicts():
    rng = np.random.default_rng(4)
    ratios = [0.85 * math.exp(e) for e in rng.normal(0, 0.01, 14)] + [math.exp(e) for e in rng.normal(0, 0.01, 6)]
    verdict = judge_pairs(pairs_of(ratios), min_effect=MIN_EFFECT)
    assert verdict.kind == "regressed"  # the pooled median lies beyond the edge
    reasons = speed_steps(pairs_of(ratios), verdict, min_effect=MIN_EFFECT)
    assert any("the ratio stepped from 0.85" in reason for reason in reasons), reasons
    held = hold(verdict, reasons)
    assert held.kind == "inconclusive" and held.flags[-1].startswith("regressed held inconclusive: the ratio stepped")


def test_a_step_in_the_nodes_speed_that_both_sides_saw_holds_nothing():
    rng = np.random.default_rng(5)
    pairs = [Pair(order=ORDERS[i % 2], reference=(100 if i < 10 else 60) * math.exp(rng.normal(0, 0.01)),
                  current=(85 if i < 10 else 51) * math.exp(rng.normal(0, 0.01))) for i in range(20)]
    verdict = judge_pairs(pairs, min_effect=MIN_EFFECT)
    assert verdict.kind == "regressed" and speed_steps(pairs, verdict, min_effect=MIN_EFFECT) == []


def test_the_order_effect_is_half_the_difference_between_the_orders():
    pairs = [Pair(order=ORDERS[i % 2], reference=100.0, current=100.0 * (1.06 if i % 2 == 0 else 1 / 1.06))
             for i in range(16)]
    effect = order_effect(pairs)
    assert effect.value == pytest.approx(1.06, rel=1e-6)
    assert "order effect: a side launched second runs +6.0%" in judge_pairs(pairs, min_effect=MIN_EFFECT).message
    assert order_effect(pairs[:4]) is None  # two of each order: too few to say


def test_recorded_pairs_judged_again_stop_at_their_first_decision():
    pairs = pairs_of([0.85, 0.86, 0.84, 0.85, 0.87, 0.83, 0.86, 0.85] * 4)
    verdict = judge_sequentially(pairs, min_effect=MIN_EFFECT, first=8, most=32)
    assert verdict.kind == "regressed" and verdict.pairs == 8 and verdict.look.looks == (8,)
    noisy = pairs_of([0.80, 1.20, 0.90, 1.10, 0.85, 1.15, 0.95, 1.05] * 4)
    assert judge_sequentially(noisy, min_effect=MIN_EFFECT, first=8, most=32).look.looks == (8, 16, 32)
