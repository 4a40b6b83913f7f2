"""The wait for the slowest rank (harness.report.stragglers): its extreme-value growth with the
rank count, and its spread and delay estimated back from step times with known delays."""
import math
import random

import pytest

from harness.report.stragglers import (RankDelay, busy_collision, delays_with_wait, estimate_rank_delay,
                                       expected_max_standard_normal, expected_wait)


def test_one_rank_waits_for_nobody_and_more_ranks_wait_longer():
    delay = RankDelay(spread_s=0.001, mean_s=0.0005, duration_s=0.05)
    assert expected_wait(delay, 1) == 0
    waits = [expected_wait(delay, g) for g in (2, 4, 16, 64, 256, 1024)]
    assert waits == sorted(waits) and waits[0] > 0
    assert expected_max_standard_normal(1) == 0
    assert expected_max_standard_normal(2) == pytest.approx(1 / math.sqrt(math.pi), abs=1e-6)  # exact for two


def test_a_fixed_duration_delay_grows_linearly_while_rare_and_saturates_at_its_duration():
    delay = RankDelay(mean_s=0.05 * 1e-3, duration_s=0.05)  # 50 ms in one step in a thousand
    assert expected_wait(delay, 2) == pytest.approx(0.05 * 1e-3, rel=0.01)  # about p d (G - 1)
    assert expected_wait(delay, 100_000) == pytest.approx(0.05, rel=0.01)  # every step waits one whole delay
    rare = RankDelay(mean_s=0.05 * 1e-3)  # the rare-delay limit: only p d known
    assert expected_wait(rare, 1024) == pytest.approx(0.05 * 1e-3 * 1023)
    assert expected_wait(delay, 1024) < expected_wait(rare, 1024)


def test_the_spread_grows_like_the_largest_of_g_normal_draws():
    assert expected_wait(RankDelay(spread_s=0.01), 1024) == pytest.approx(0.01 * expected_max_standard_normal(1024))
    assert 3.0 < expected_max_standard_normal(1024) < 3.4


def test_the_spread_and_the_delay_are_estimated_back_from_step_times():
    rng = random.Random(7)
    ranks = []
    for _ in range(4):
        steps = [0.1 + rng.gauss(0, 0.002) for _ in range(2000)]
        for i in rng.sample(range(2000), 100):  # 5% of the steps held up 40 ms
            steps[i] += 0.04
        ranks.append(steps)
    delay = estimate_rank_delay(ranks)
    assert delay.spread_s == pytest.approx(0.002, rel=0.15)
    assert delay.probability == pytest.approx(0.05, rel=0.1)
    assert delay.duration_s == pytest.approx(0.04, rel=0.1)
    assert estimate_rank_delay([[0.1, 0.1, 0.1, 0.1]]) == RankDelay()
    assert estimate_rank_delay([[0.1]]) == RankDelay()  # too few steps to say anything


def test_the_two_delays_that_cost_a_given_wait_bound_the_wait_elsewhere():
    shortest, rarest = delays_with_wait(0.033, ranks=1024, reference_ranks=4)
    for delay in (shortest, rarest):
        assert expected_wait(delay, 1024) - expected_wait(delay, 4) == pytest.approx(0.033)
    assert math.isinf(rarest.duration_s) and shortest.duration_s == pytest.approx(0.033, rel=0.05)
    for gpus in (16, 64, 256):  # below the point they share, the short delay costs more
        assert expected_wait(shortest, gpus) - expected_wait(shortest, 4) > expected_wait(rarest, gpus) - expected_wait(
            rarest, 4)
    with pytest.raises(ValueError, match="ranks > reference"):
        delays_with_wait(0.01, ranks=4, reference_ranks=4)


def test_a_burst_of_other_work_on_the_gpu_delays_a_share_of_steps_by_its_length():
    collision = busy_collision(0.01, 0.1)
    assert (collision.duration_s, collision.probability) == pytest.approx((0.01, 0.1))
    assert busy_collision(0.0, 0.1) == RankDelay()
    with pytest.raises(ValueError, match="does not fit"):
        busy_collision(0.2, 0.1)
    with pytest.raises(ValueError, match="cannot cost"):
        RankDelay(mean_s=0.2, duration_s=0.1)
