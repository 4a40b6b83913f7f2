"""harness.judging.pelt against ruptures.Pelt(model="l1", jump=1), the implementation it replaces:
the same optimum on random histories with shifts, spikes and ties, the same change points wherever
the optimum is unique, and a year of nights in a fraction of ruptures' time."""
import math
import time

import numpy as np
import pytest

from harness.judging import pelt

rpt = pytest.importorskip("ruptures", reason="the reference implementation")


def histories(count, seed=1):
    """Random nightly histories: noise, up to three shifts, a spike, some rounded (ties)."""
    rng = np.random.default_rng(seed)
    for trial in range(count):
        values = rng.normal(30, 1, int(rng.integers(6, 60)))
        for _ in range(int(rng.integers(0, 4))):
            values[int(rng.integers(0, values.size)):] *= rng.uniform(0.7, 1.3)
        if trial % 5 == 0:
            values[int(rng.integers(0, values.size))] *= 0.5
        yield np.round(values) if trial % 7 == 0 else values, int(rng.integers(2, 6))


def total(values, breakpoints, penalty):
    bounds = [0, *breakpoints, len(values)]
    return sum(np.abs(values[a:b] - np.median(values[a:b])).sum() for a, b in zip(bounds, bounds[1:])) \
        + penalty * len(breakpoints)


def test_the_optimum_is_ruptures_and_so_are_the_change_points_but_for_ties():
    same = compared = 0
    for values, min_size in histories(80):
        if values.size < 2 * min_size:
            continue
        penalty = 2 * max(float(np.std(np.diff(values))), 1e-3) * math.log(values.size)
        theirs = rpt.Pelt(model="l1", min_size=min_size, jump=1).fit(values).predict(pen=penalty)[:-1]
        ours = pelt.change_points(values.tolist(), min_size=min_size, penalty=penalty)
        assert total(values, ours, penalty) == pytest.approx(total(values, theirs, penalty), rel=1e-9)
        assert all(b - a >= min_size for a, b in zip([0, *ours], [*ours, values.size]))
        same += ours == theirs
        compared += 1
    assert same >= 0.95 * compared


def test_a_year_of_nights_takes_a_fraction_of_a_second():
    values = np.random.default_rng(2).normal(30, 1, 365)
    values[200:] *= 0.85
    started = time.perf_counter()
    assert pelt.change_points(values.tolist(), min_size=3, penalty=2 * 1.0 * math.log(365)) == [200]
    assert time.perf_counter() - started < 1.0


def test_too_short_a_series_has_no_change_point():
    assert pelt.change_points([1.0, 2.0, 3.0, 4.0, 5.0], min_size=3, penalty=1.0) == []
