"""Unit tests of harness.selftest's judging and report, on simulated step times (no launch)."""
from __future__ import annotations

import numpy as np

from harness.selftest import (Judged, Measurement, SelftestConfig, SelftestReport, baseline_band, format_report,
                              judge, measure)


def records(rng, slowdown=0.0, steps=30, step_s=0.2, cv=0.05, batch=8) -> list[dict]:
    times = step_s * (1 + slowdown) * (1 + cv * rng.standard_normal(steps))
    return [{"rank": 0, "step_times": list(times), "data_wait": [0.0] * steps, "images": batch * steps}]


def test_measure_drops_a_slow_start_and_gives_images_per_second():
    rng = np.random.default_rng(0)
    recs = records(rng, cv=0.01)
    recs[0]["step_times"][:5] = [1.0] * 5
    estimate, dropped = measure(recs)
    assert dropped >= 5
    assert abs(estimate.value - 8 / 0.2) < 1.0


def test_unchanged_runs_pass_and_a_20_percent_slowdown_fails():
    rng = np.random.default_rng(1)
    values = [measure(records(rng))[0].value for _ in range(10)]
    reference, band = baseline_band(values, floor_rel=0.05)
    unchanged = [judge(Measurement(slowdown=0.0, status="ok", throughput=measure(records(rng))[0]), reference, band)
                 for _ in range(10)]
    slowed = [judge(Measurement(slowdown=0.2, status="ok", throughput=measure(records(rng, 0.2))[0]), reference, band)
              for _ in range(10)]
    assert [j.outcome for j in unchanged].count("fail") == 0
    assert [j.outcome for j in slowed] == ["fail"] * 10


def test_a_failed_launch_is_an_error_not_a_verdict():
    assert judge(Measurement(slowdown=0.1, status="hung", throughput=None), 40.0, (-0.1, 0.1)).outcome == "error"


def fake_report(outcomes: dict[float, list[str]]) -> SelftestReport:
    from harness.stats import Estimate, Verdict

    estimate = Estimate(value=40.0, low=39.0, high=41.0)
    judged = [Judged(measurement=Measurement(slowdown=size, status="ok", throughput=estimate),
                     verdict=Verdict(kind=kind, message=""))
              for size, kinds in outcomes.items() for kind in kinds]
    baseline = [Measurement(slowdown=0.0, status="ok", throughput=Estimate(value=v, low=v - 1, high=v + 1))
                for v in (39.0, 40.0, 41.0)]
    return SelftestReport(config=SelftestConfig(sizes=tuple(s for s in outcomes if s)), baseline=baseline,
                          reference=40.0, band=(-0.08, 0.08), judged=judged, wall_s=60.0)


def test_minimum_detected_needs_every_larger_size_reliable_too():
    report = fake_report({0.0: ["pass"] * 10, 0.05: ["fail"] * 9 + ["pass"], 0.1: ["fail"] * 8 + ["pass"] * 2,
                          0.2: ["fail"] * 10})
    assert report.minimum_detected() == 0.2
    assert report.minimum_detected(rate=0.8) == 0.05
    assert fake_report({0.0: ["pass"], 0.2: ["inconclusive"]}).minimum_detected() is None


def test_report_table_counts_and_rates():
    report = fake_report({0.0: ["pass"] * 9 + ["fail"], 0.1: ["fail"] * 5 + ["inconclusive"] * 4 + ["faster"],
                          0.2: ["fail"] * 9 + ["error"]})
    text = format_report(report)
    assert "minimum slowdown detected reliably (>= 90% of runs): 20%" in text
    assert "false alarms: 1 of 10 unchanged reruns" in text
    lines = {line.split()[0]: line.split() for line in text.splitlines() if line[:1].isdigit()}
    assert lines["0%"][5:11] == ["10", "1", "0", "9", "0", "0"] and "10%" in lines["0%"]
    assert lines["10%"][5:11] == ["10", "5", "4", "0", "1", "0"] and "50%" in lines["10%"]
    assert lines["20%"][5:11] == ["10", "9", "0", "0", "0", "1"] and "100%" in lines["20%"]  # of runs that completed
