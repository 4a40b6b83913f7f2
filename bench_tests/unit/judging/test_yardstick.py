"""harness.judging.yardstick: the machine's speed from the ranks' yardstick times, and normalising by it
(and the workload they time, harness.machine.yardstick)."""
import math

import pytest

from harness.judging.stats import Estimate
from harness.judging.tunables import DEFAULT_TUNABLES
from harness.judging.yardstick import (Yardstick, another_machine, from_records, beyond_noise,
                                       launch_drifts, normalise, normalise_estimate, speed_ratio)
from harness.machine.yardstick import REPEATS, VERSION, run_yardstick


def test_the_workload_runs_and_times_each_repeat():
    times = run_yardstick(repeats=3)
    assert len(times) == 3 and all(0 < t < 5 for t in times)


def test_every_rank_must_have_timed_it():
    records = [{"rank": 0, "yardstick": [0.1, 0.1, 0.3, 0.3]}, {"rank": 1, "yardstick": [0.2] * REPEATS}]
    found = from_records(records)
    assert found.seconds == pytest.approx(0.2) and found.version == VERSION and found.spread > 0
    assert from_records([records[0], {"rank": 1}]) is None
    assert from_records([]) is None


def test_speed_ratio_is_then_over_now_and_needs_the_same_workload():
    then, now = Yardstick(seconds=0.2, spread=0.01), Yardstick(seconds=0.1, spread=0.01)
    assert speed_ratio(now, then) == pytest.approx(2.0)  # the machine is twice as fast now
    assert speed_ratio(now, None) is None and speed_ratio(None, then) is None
    assert speed_ratio(now, Yardstick(seconds=0.2, spread=0.01, version=VERSION + 1)) is None


def test_normalising_brings_a_figure_to_the_reference_machine_speed():
    assert normalise(60.0, 1.2) == pytest.approx(50.0)
    assert normalise(60.0, None) == 60.0
    scaled = normalise_estimate(Estimate(value=60.0, low=54.0, high=66.0, n_steps=30), 1.2)
    assert (scaled.value, scaled.low, scaled.high, scaled.n_steps) == pytest.approx((50.0, 45.0, 55.0, 30))
    unbounded = normalise_estimate(Estimate(value=60.0, low=-math.inf, high=math.inf), 2.0)
    assert unbounded.value == 30.0 and unbounded.too_few_samples


@pytest.mark.parametrize("stored", [None, "0.1", {}, {"seconds": 0}, {"seconds": -1.0}, {"seconds": True}])
def test_a_missing_or_unusable_stored_yardstick_is_none(stored):
    assert Yardstick.from_json(stored) is None


def test_stored_form_round_trips():
    original = Yardstick(seconds=0.0781234, spread=0.0213)
    assert Yardstick.from_json(original.to_json()) == Yardstick(seconds=0.078123, spread=0.0213)
    assert Yardstick.from_json({"seconds": 0.1}).version == 0  # hand-written: no version, never compared


def test_a_baselines_noise_is_stored_and_read_back():
    stored = Yardstick(seconds=0.02, spread=0.05, noise=0.104).to_json()
    assert stored["noise"] == 0.104 and Yardstick.from_json(stored).noise == 0.104
    assert "noise" not in Yardstick(seconds=0.02, spread=0.05).to_json()


@pytest.mark.parametrize("ratio, noise, beyond", [(1.05, None, False), (1.11, None, True), (0.91, None, False),
                                                  (0.90, None, True), (1.05, 0.03, True), (None, None, False)])
def test_only_a_move_beyond_the_yardsticks_own_noise_counts(ratio, noise, beyond):
    baseline = Yardstick(seconds=0.02, spread=0.05, noise=noise)
    assert beyond_noise(ratio, baseline) is beyond


def test_drift_is_how_far_apart_the_speed_before_and_after_each_window_was():
    steady, slowing = [0.1] * (2 * REPEATS), [0.1] * REPEATS + [0.125] * REPEATS
    assert launch_drifts(steady) == [0.0]
    assert launch_drifts(slowing + steady) == pytest.approx([0.025 / 0.1125, 0.0])  # two pooled launches
    assert launch_drifts([0.1, 0.2, 0.3]) == []  # not the worker's shape: unknown
    found = from_records([{"rank": 0, "yardstick": slowing}, {"rank": 1, "yardstick": steady}])
    assert found.drift == pytest.approx(0.025 / 0.1125 / 2)
    assert Yardstick.from_json(found.to_json()).drift == pytest.approx(found.drift, abs=1e-4)


def test_a_drifting_machine_widens_the_normalised_interval_not_its_value():
    measured = Estimate(value=60.0, low=54.0, high=66.0, n_steps=30)
    widened = normalise_estimate(measured, 1.2, drift=0.2)  # the window ran at 1.08 to 1.32 times the speed
    assert widened.value == pytest.approx(50.0)
    assert (widened.low, widened.high) == pytest.approx((54.0 / 1.32, 66.0 / 1.08))


@pytest.mark.parametrize("ratio", [1.0, 1.25, 1 / 1.25, 1 + DEFAULT_TUNABLES.same_machine_drift,
                                   1 / (1 + DEFAULT_TUNABLES.same_machine_drift), None])
def test_a_drift_within_the_measured_range_is_the_same_machine(ratio):
    assert another_machine(ratio) is None


@pytest.mark.parametrize("ratio, words", [(2.5, "2.50x as fast as"), (1.35, "1.35x as fast as"),
                                          (0.5, "2.00x slower than")])
def test_a_speed_beyond_it_is_another_machine_never_a_regression(ratio, words):
    why = another_machine(ratio)
    assert words in why and "another machine" in why and "--update-baselines" in why
