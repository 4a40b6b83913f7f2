"""Unit tests of harness.judging.stats: interval coverage on simulated step times, and every rule's edges."""
from __future__ import annotations

import json
import math
from collections import Counter

import numpy as np
import pytest
from scipy import stats as scipy_stats

from harness.judging.stats import (
                                   Estimate,
                                   change_points,
                                   detect_warmup,
                                   efficiency_interval,
                                   needs_more_samples,
                                   throughput_interval,
                                   tolerance_from_repeats,
                                   verdict,
                                   )


def ar1(rng: np.random.Generator, n: int, phi: float, mean: float = 0.1, cv: float = 0.05) -> np.ndarray:
    """Step times with mean ``mean``, relative sd ``cv`` and lag-1 autocorrelation ``phi``."""
    z = np.empty(n)
    z[0] = rng.normal()
    innovations = rng.normal(size=n) * math.sqrt(1 - phi**2)
    for i in range(1, n):
        z[i] = phi * z[i - 1] + innovations[i]
    return mean * (1 + cv * z)


# --- throughput -----------------------------------------------------------------------------------


def test_point_value_is_total_images_over_total_time_of_the_slowest_rank():
    rank0 = [0.1, 0.2, 0.1, 0.1, 0.5, 0.1]
    rank1 = [0.2, 0.1, 0.1, 0.1, 0.1, 0.1]
    estimate = throughput_interval([rank0, rank1], [8, 16])
    slowest = [0.2, 0.2, 0.1, 0.1, 0.5, 0.1]
    assert estimate.value == pytest.approx(6 * 24 / sum(slowest))
    mean_of_rates = float(np.mean([24 / t for t in slowest]))
    assert estimate.value < mean_of_rates  # the ratio estimator, not the mean of per-step rates
    assert estimate.n_steps == 6
    assert estimate.low < estimate.value < estimate.high


def test_a_single_batch_size_applies_to_every_rank():
    steps = [[0.1, 0.11, 0.09, 0.1, 0.1]] * 3
    assert throughput_interval(steps, 32).value == pytest.approx(throughput_interval(steps, [32] * 3).value)


def test_too_few_steps_give_the_point_value_and_no_interval():
    estimate = throughput_interval([[0.1, 0.2, 0.1]], 10)
    assert estimate.value == pytest.approx(30 / 0.4)
    assert estimate.too_few_samples
    assert (estimate.low, estimate.high) == (-math.inf, math.inf)
    assert estimate.half_width_rel == math.inf
    assert needs_more_samples(estimate)
    assert verdict(estimate, reference=75.0, lower_rel=-0.1).kind == "inconclusive"


def test_same_seed_same_interval():
    steps = [list(ar1(np.random.default_rng(1), 40, 0.5))]
    assert throughput_interval(steps, 32, seed=7) == throughput_interval(steps, 32, seed=7)
    assert throughput_interval(steps, 32, seed=7).low != throughput_interval(steps, 32, seed=8).low


@pytest.mark.parametrize(
    "steps, batch",
    [
        ([[0.1] * 6, [0.1] * 5], 8),  # ranks timed different numbers of steps
        ([[0.1] * 6, [0.1] * 6], [8]),  # one batch size for two ranks
        ([[0.1, 0.0, 0.1, 0.1, 0.1]], 8),  # a zero step time
        ([], 8),
    ],
)
def test_malformed_records_are_refused(steps, batch):
    with pytest.raises(ValueError):
        throughput_interval(steps, batch)


@pytest.mark.parametrize("phi, seeds, band", [(0.0, 100, (0.90, 1.0)), (0.5, 200, (0.85, 0.99))])
def test_interval_covers_the_true_throughput_of_correlated_steps(phi, seeds, band):
    # 50 steps, 5% noise: mean step 0.1 s and 32 images a step, so the true throughput is 320/s.
    covered, widths = 0, []
    for seed in range(seeds):
        steps = ar1(np.random.default_rng(seed), 50, phi)
        estimate = throughput_interval([steps], 32, seed=seed, reps=500)
        covered += estimate.low <= 320.0 <= estimate.high
        widths.append(estimate.half_width_rel)
    assert band[0] <= covered / seeds <= band[1]
    # Not covering by being useless: within twice the half-width the known long-run variance gives.
    ideal = 1.96 * 0.05 * math.sqrt((1 + phi) / (1 - phi) / 50)
    assert np.median(widths) < 2 * ideal


# --- efficiency -----------------------------------------------------------------------------------


def _two_rank_run(rng: np.random.Generator, mean: float) -> list[list[float]]:
    slow = ar1(rng, 40, 0.3, mean=mean)
    return [list(slow), list(0.9 * slow)]  # rank 1 is always faster: the slowest rank is rank 0


def test_efficiency_interval_contains_the_true_ratio():
    # G=2 at 0.125 s a step against G_ref=1 at 0.1 s, same batch: E = 0.1 / 0.125 = 0.8.
    covered = 0
    for seed in range(40):
        rng = np.random.default_rng(1000 + seed)
        measured = _two_rank_run(rng, 0.125)
        reference = [list(ar1(rng, 40, 0.3, mean=0.1))]
        estimate = efficiency_interval(measured, 32, reference, seed=seed, reps=500)
        covered += estimate.low <= 0.8 <= estimate.high
    assert covered >= 34


def test_efficiency_point_value_is_per_rank_throughput_over_the_references():
    measured = [[0.2] * 3 + [0.25] * 3, [0.1] * 6]
    reference = [[0.1] * 6]
    estimate = efficiency_interval(measured, 32, reference)
    x_g = 6 * 64 / (3 * 0.2 + 3 * 0.25)
    x_ref = 6 * 32 / 0.6
    assert estimate.value == pytest.approx((x_g / 2) / (x_ref / 1))


def test_efficiency_against_a_baseline_value_with_an_interval():
    rng = np.random.default_rng(5)
    measured = _two_rank_run(rng, 0.125)
    exact = Estimate(value=320.0, low=320.0, high=320.0)
    uncertain = Estimate(value=320.0, low=300.0, high=340.0)
    sharp = efficiency_interval(measured, 32, exact, reference_ranks=1)
    wide = efficiency_interval(measured, 32, uncertain, reference_ranks=1)
    assert sharp.value == pytest.approx(wide.value)
    assert sharp.low <= 0.8 <= sharp.high
    assert wide.half_width_rel > sharp.half_width_rel * 1.3  # the reference's own +-6% adds in
    with pytest.raises(ValueError, match="reference_ranks"):
        efficiency_interval(measured, 32, exact)


def test_efficiency_without_enough_reference_steps_has_no_interval():
    rng = np.random.default_rng(6)
    estimate = efficiency_interval(_two_rank_run(rng, 0.125), 32, [[0.1, 0.1, 0.1]])
    assert estimate.too_few_samples and math.isfinite(estimate.value)


# --- stopping and warm-up -------------------------------------------------------------------------


def test_needs_more_samples_until_the_target_half_width():
    assert needs_more_samples(Estimate(value=100.0, low=95.0, high=105.0), 0.02)
    assert not needs_more_samples(Estimate(value=100.0, low=99.0, high=101.0), 0.02)
    with pytest.raises(ValueError):
        needs_more_samples(Estimate(value=100.0, low=99.0, high=101.0), 0.0)


def test_more_steps_narrow_the_interval():
    steps = ar1(np.random.default_rng(3), 400, 0.3)
    short = throughput_interval([steps[:25]], 32, reps=500)
    long = throughput_interval([steps], 32, reps=500)
    assert long.half_width_rel < short.half_width_rel / 2


@pytest.mark.parametrize("slow_steps, expected", [(10, 10), (20, 20), (12, 15)])
def test_warmup_finds_an_injected_slow_start(slow_steps, expected):
    found = []
    for seed in range(30):
        steps = ar1(np.random.default_rng(seed), 100, 0.0)
        steps[:slow_steps] *= 1.5
        found.append(detect_warmup(steps))
    assert min(found) >= slow_steps  # never keeps a slow step
    # MSER-5 cuts at whole batches of 5; it often cuts deeper too (see detect_warmup), never less.
    assert Counter(found).most_common(1)[0][0] == expected


def test_warmup_is_bounded_to_half_and_zero_for_short_series():
    assert detect_warmup(np.linspace(0.3, 0.1, 40)) == 20  # a trend throughout: cut at half
    assert detect_warmup([0.5, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1]) == 0  # one batch of 5
    steady = [detect_warmup(ar1(np.random.default_rng(seed), 100, 0.0)) for seed in range(30)]
    assert sorted(steady)[len(steady) // 2] == 0


# --- verdicts -------------------------------------------------------------------------------------


def interval(low: float, high: float) -> Estimate:
    return Estimate(value=(low + high) / 2, low=low, high=high, n_steps=50)


@pytest.mark.parametrize(
    "low, high, upper_rel, kind",
    [
        (80, 85, 0.1, "fail"),  # wholly below the lower edge, 90
        (85, 95, 0.1, "inconclusive"),  # straddles 90
        (92, 98, 0.1, "pass"),
        (105, 115, 0.1, "pass"),  # straddles the improvement edge, 110: not clearly faster
        (112, 120, 0.1, "faster"),  # wholly above 110
        (112, 120, None, "pass"),  # no improvement edge
        (90, 95, 0.1, "pass"),  # touching the lower edge is inside the band
    ],
)
def test_verdict_higher_is_better(low, high, upper_rel, kind):
    assert verdict(interval(low, high), 100.0, -0.1, upper_rel).kind == kind


@pytest.mark.parametrize(
    "low, high, lower_rel, kind",
    [
        (112, 120, -0.1, "fail"),  # wholly above the upper edge, 110
        (105, 115, -0.1, "inconclusive"),
        (102, 108, -0.1, "pass"),
        (85, 95, -0.1, "pass"),
        (80, 85, -0.1, "faster"),  # wholly below 90
        (80, 85, None, "pass"),
    ],
)
def test_verdict_lower_is_better(low, high, lower_rel, kind):
    assert verdict(interval(low, high), 100.0, lower_rel, 0.1, higher_is_better=False).kind == kind


def test_verdict_messages_say_what_to_do():
    assert "update?" in verdict(interval(112, 120), 100.0, -0.1, 0.1).message
    assert "measure longer" in verdict(interval(85, 95), 100.0, -0.1).message


@pytest.mark.parametrize(
    "lower_rel, upper_rel, higher_is_better",
    [(0.1, None, True), (-0.1, -0.1, True), (None, 0.1, True), (-0.1, None, False)],
)
def test_verdict_refuses_a_malformed_band(lower_rel, upper_rel, higher_is_better):
    with pytest.raises(ValueError):
        verdict(interval(90, 95), 100.0, lower_rel, upper_rel, higher_is_better=higher_is_better)


# --- bands from repeats ---------------------------------------------------------------------------


def test_tolerance_never_tighter_than_the_floor():
    assert tolerance_from_repeats([100.0, 100.1, 99.9, 100.0]) == (-0.05, 0.05)
    assert tolerance_from_repeats([100.0, 100.1, 99.9], floor_rel=0.08) == (-0.08, 0.08)


def test_tolerance_is_the_prediction_interval_of_one_more_run():
    values = [90.0, 100.0, 110.0]
    lower, upper = tolerance_from_repeats(values, floor_rel=0.0, confidence=0.95)
    expected = scipy_stats.t.ppf(0.975, 2) * 10.0 * math.sqrt(1 + 1 / 3) / 100.0
    assert (lower, upper) == (pytest.approx(-expected), pytest.approx(expected))
    # A new run lands inside the band as often as the confidence says.
    rng = np.random.default_rng(0)
    inside = 0
    for _ in range(2000):
        runs = rng.normal(100.0, 3.0, size=6)
        lower, upper = tolerance_from_repeats(runs[:5], floor_rel=0.0, confidence=0.9)
        mean = runs[:5].mean()
        inside += mean * (1 + lower) <= runs[5] <= mean * (1 + upper)
    assert 0.87 <= inside / 2000 <= 0.93


def test_tolerance_needs_two_repeats_and_clips_at_zero():
    with pytest.raises(ValueError):
        tolerance_from_repeats([100.0])
    lower, upper = tolerance_from_repeats([10.0, 100.0, 190.0])
    assert lower == -1.0 and upper > 1.0


# --- change points --------------------------------------------------------------------------------


def _matches(found: list[int], expected: list[int]) -> bool:
    """Exactly the expected change points, each within a night (noise can blur the edge)."""
    return len(found) == len(expected) and all(abs(f - e) <= 1 for f, e in zip(found, expected))


def nightly(seed: int, nights: int = 30, noise: float = 0.03) -> np.ndarray:
    return 100.0 * (1 + noise * np.random.default_rng(seed).normal(size=nights))


@pytest.mark.parametrize("start", [15, 20, 25])
def test_change_points_find_a_persistent_15_percent_shift(start):
    found = 0
    for seed in range(20):
        history = nightly(seed)
        history[start:] *= 0.85
        found += _matches(change_points(history), [start])
    assert found >= 18


def test_change_points_find_both_ends_of_a_temporary_shift():
    found = 0
    for seed in range(20):
        history = nightly(seed)
        history[10:16] *= 1.15
        found += _matches(change_points(history), [10, 16])
    assert found >= 18


@pytest.mark.parametrize("spike", [0.5, 1.4])
def test_change_points_ignore_a_single_spike_and_steady_noise(spike):
    flagged = 0
    for seed in range(20):
        history = nightly(seed)
        history[12] *= spike
        flagged += bool(change_points(history))
        flagged += bool(change_points(nightly(100 + seed)))
    assert flagged <= 2


def test_change_points_on_short_or_constant_histories():
    assert change_points([100.0, 90.0, 80.0, 70.0, 60.0]) == []
    assert change_points([100.0] * 20) == []
    assert change_points([100.0] * 10 + [85.0] * 10) == [10]


def test_an_estimate_is_written_read_and_printed_one_way():
    """Results files, the history and the compare command hold an estimate as to_json writes it;
    a missing end is null there and no interval when read back."""
    measured = Estimate(value=101.25, low=99.5, high=103.0, n_steps=40)
    assert Estimate.from_json(json.loads(json.dumps(measured.to_json()))) == measured
    unknown = Estimate(value=7.0, low=-math.inf, high=math.inf)
    assert unknown.to_json()["low"] is None and Estimate.from_json(unknown.to_json()) == unknown
    assert Estimate.from_json({"value": None}) is None and Estimate.from_json("101") is None
    assert [measured.text(1), unknown.text(2), Estimate(value=1.0, low=1.0, high=1.0).text(3)] == [
        "101.2 [99.5, 103.0]", "7.00 [no CI]", "1.000"]
