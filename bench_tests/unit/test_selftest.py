"""Unit tests of harness.selftest's judging and report, on simulated step times (no launch)."""
from __future__ import annotations

import numpy as np
import pytest

from pathlib import Path

from harness.runner import CellRun
from harness.selftest import (SELFTEST_CELL, Judged, Measurement, SelftestConfig, SelftestReport, baseline_reference,
                              baseline_references, format_report, judge, judged_rerun, measure, pooled_measurement)
from harness.stats import Estimate, Verdict
from harness.yardstick import Yardstick


def records(rng, slowdown=0.0, steps=30, step_s=0.2, cv=0.05, batch=8, cpu_wait=0.0) -> list[dict]:
    times = step_s * (1 + slowdown) * (1 + cv * rng.standard_normal(steps))
    return [{"rank": 0, "step_times": list(times), "data_wait": [0.0] * steps, "images": batch * steps,
             "window_s": float(times.sum()), "cpu_wait": list(times * cpu_wait)}]


def simulated_run(records: list[dict], wall_s: float = 10.0, status: str = "ok") -> CellRun:
    """What a launch returns, around simulated records: the re-measuring policy needs no real launch."""
    return CellRun(cell=SELFTEST_CELL, launcher="simulated", command=[], status=status, records=records,
                   error=None if status == "ok" else "rank 0 hung", wall_s=wall_s, log_path=Path("/dev/null"),
                   token="", orphans_killed=[])


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
    references = {"raw": baseline_reference(values, floor_rel=0.05)}
    unchanged = [judge(Measurement(slowdown=0.0, status="ok", throughput=measure(records(rng))[0]), references)
                 for _ in range(10)]
    slowed = [judge(Measurement(slowdown=0.2, status="ok", throughput=measure(records(rng, 0.2))[0]), references)
              for _ in range(10)]
    assert [j.outcome("raw") for j in unchanged].count("fail") == 0
    assert [j.outcome("raw") for j in slowed] == ["fail"] * 10


def test_the_yardstick_takes_a_drift_of_the_machine_out_of_band_and_verdict():
    """Baseline runs on a machine whose speed wanders by +-15%, reruns on one 20% faster: raw, the
    band is wide and a 20% slowdown passes; normalised by a yardstick that saw the same speeds,
    the band stays at its floor and the slowdown fails."""
    rng = np.random.default_rng(2)
    speeds = [0.85, 1.15, 0.9, 1.1, 1.0, 0.95, 1.05, 0.88]

    def run(speed, slowdown=0.0):
        estimate = measure(records(rng, cv=0.02, step_s=0.2 / speed * (1 + slowdown), slowdown=0.0))[0]
        return Measurement(slowdown=slowdown, status="ok", throughput=estimate,
                           yardstick=Yardstick(seconds=0.08 / speed, spread=0.01))

    references, machine = baseline_references([run(speed) for speed in speeds], floor_rel=0.05)
    assert machine.seconds == pytest.approx(np.mean([0.08 / s for s in speeds]))
    assert references["raw"].band[0] < -0.2 and references["yardstick"].band[0] == pytest.approx(-0.05)
    slowed = judge(run(1.2, slowdown=0.2), references, machine)
    assert slowed.speed == pytest.approx(1.2 * np.mean([1 / s for s in speeds]))
    assert (slowed.outcome("yardstick"), slowed.outcome("raw")) == ("fail", "pass")
    unchanged = judge(run(1.2), references, machine)
    assert unchanged.outcome("yardstick") == "pass"


def test_without_yardstick_only_the_raw_judging_is_made():
    rng = np.random.default_rng(3)
    baseline = [Measurement(slowdown=0.0, status="ok", throughput=measure(records(rng))[0]) for _ in range(3)]
    references, machine = baseline_references(baseline, floor_rel=0.05)
    assert set(references) == {"raw"} and machine is None
    rerun = judge(Measurement(slowdown=0.0, status="ok", throughput=measure(records(rng))[0]), references, machine)
    assert set(rerun.verdicts) == {"raw"} and rerun.outcome("yardstick") == "error"


def test_a_failed_launch_is_an_error_not_a_verdict():
    references = {"raw": baseline_reference([40.0, 41.0], floor_rel=0.1)}
    assert judge(Measurement(slowdown=0.1, status="hung", throughput=None), references).outcome("raw") == "error"


def fake_report(outcomes: dict[float, list[str]]) -> SelftestReport:
    estimate = Estimate(value=40.0, low=39.0, high=41.0)
    judged = [Judged(measurement=Measurement(slowdown=size, status="ok", throughput=estimate),
                     verdicts={} if kind == "error" else {"raw": Verdict(kind=kind, message="")})
              for size, kinds in outcomes.items() for kind in kinds]
    baseline = [Measurement(slowdown=0.0, status="ok", throughput=Estimate(value=v, low=v - 1, high=v + 1))
                for v in (39.0, 40.0, 41.0)]
    references = {"raw": baseline_reference([39.0, 40.0, 41.0], floor_rel=0.08)}
    return SelftestReport(config=SelftestConfig(sizes=tuple(s for s in outcomes if s)), baseline=baseline,
                          references=references, judged=judged, wall_s=60.0)


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


def test_pooled_launches_leave_out_the_contended_one():
    rng = np.random.default_rng(4)
    quiet = [simulated_run(records(rng, cv=0.01)) for _ in range(2)]
    busy = simulated_run(records(rng, cv=0.01, step_s=0.4, cpu_wait=0.3))
    pooled = pooled_measurement([quiet[0], busy, quiet[1]], slowdown=0.0, baseline_wait=0.001)
    assert (pooled.launches, pooled.contended_launches, pooled.wall_s) == (3, 1, 30.0)
    assert pooled.throughput.value == pytest.approx(8 / 0.2, rel=0.02)
    assert pooled.cpu_wait_share == pytest.approx(0.0)
    alone = pooled_measurement([busy], slowdown=0.0, baseline_wait=0.001)
    assert alone.contended_launches == 0 and alone.cpu_wait_share == pytest.approx(0.3)
    failed = pooled_measurement([quiet[0], simulated_run([], status="hung")], slowdown=0.0)
    assert failed.throughput is None and failed.status == "hung" and "rank 0" in failed.error


def test_an_inconclusive_rerun_is_launched_again_without_its_neighbour_while_the_budget_allows():
    rng = np.random.default_rng(5)
    neighbours = []

    def launch_once(with_neighbour):
        neighbours.append(with_neighbour)
        return simulated_run(records(rng), wall_s=10.0)

    def inconclusive_below(launches):
        def judge_measurement(measurement):
            kind = "inconclusive" if measurement.launches < launches else "pass"
            return Judged(measurement=measurement, verdicts={"raw": Verdict(kind=kind, message="")})
        return judge_measurement

    judged = judged_rerun(launch_once, inconclusive_below(3), "raw", budget_s=100.0, slowdown=0.0, neighbour=True)
    assert neighbours == [True, False, False]
    assert (judged.measurement.launches, judged.outcome("raw"), judged.measurement.neighbour) == (3, "pass", True)

    neighbours.clear()  # 10 s spent + 10 s more fit in 25 s; 20 s + 10 s do not
    judged = judged_rerun(launch_once, inconclusive_below(5), "raw", budget_s=25.0, slowdown=0.0)
    assert (len(neighbours), judged.outcome("raw")) == (2, "inconclusive")

    neighbours.clear()
    judged_rerun(launch_once, inconclusive_below(5), "raw", budget_s=0.0, slowdown=0.0)
    assert len(neighbours) == 1


def test_a_rerun_whose_launch_fails_is_not_launched_again():
    launches = []

    def launch_once(with_neighbour):
        launches.append(with_neighbour)
        return simulated_run([], status="hung")

    judged = judged_rerun(launch_once, lambda m: judge(m, {"raw": baseline_reference([40.0, 41.0], 0.1)}),
                          "raw", budget_s=1000.0, slowdown=0.1)
    assert len(launches) == 1 and judged.outcome("raw") == "error"
