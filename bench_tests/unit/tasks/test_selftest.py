"""Unit tests of harness.tasks.selftest's own parts: its regressions, the suite it builds and its report
(measuring and judging are the suite's, tested in test_judging.py and the launch tests)."""
from __future__ import annotations

import pytest

from harness.judging.stats import Estimate
from harness.judging.verdicts import Reference
from harness.tasks.selftest import (UNCHANGED, Regression, Rerun, SelftestConfig, SelftestReport,
                                    compute_regression, format_report, main, parse_regression, suite_for)

ZEN4 = "avx2 avx512f avx512_bf16"


def test_the_compute_regression_sends_atens_kernels_down_their_path_without_vector_instructions():
    assert compute_regression(ZEN4).launch_env == ("ATEN_CPU_CAPABILITY=default",)
    assert compute_regression("avx2").launch_env == ("ATEN_CPU_CAPABILITY=default",)
    with pytest.raises(ValueError, match="neither AVX-512 nor AVX2"):
        compute_regression("none of avx2 avx512f")
    assert compute_regression(ZEN4).fault is None and compute_regression(ZEN4).expected_change is None  # its size is measured, not known


@pytest.mark.parametrize("text, fraction", [("slow:0.15", 0.15), (" slow:0.2", 0.2)])
def test_a_slow_regression_is_a_slow_fault_of_known_size(text, fraction):
    regression = parse_regression(text, ZEN4)
    assert regression.fault == {"kind": "slow", "fraction": fraction} and not regression.launch_env
    assert regression.expected_change == pytest.approx(-fraction / (1 + fraction))


@pytest.mark.parametrize("text", ["slow", "slow:0", "slow:-0.1", "slow:fast", "kernel", "compute:avx"])
def test_an_unknown_regression_says_what_is_valid(text):
    with pytest.raises(ValueError, match="give compute or slow:F"):
        parse_regression(text, ZEN4)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="at least 2 runs"):
        SelftestConfig(baseline_runs=1)
    with pytest.raises(ValueError, match="repeats must be at least 1"):
        SelftestConfig(repeats=0)


def test_the_cli_refuses_an_accuracy_cell_and_an_unknown_regression(capsys):
    for argv, why in ((["--cell", "accuracy-ddp-cosine-b64-g2"], "not an accuracy cell"),
                      (["--regressions", "kernel"], "unknown regression")):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2 and why in capsys.readouterr().err


def test_the_suite_it_builds_is_the_default_suite_on_one_series_with_the_regression_injected(tmp_path):
    regression = Regression(name="both", launch_env=("ONEDNN_MAX_CPU_ISA=AVX2",), slow_fraction=0.1)
    config = SelftestConfig(workdir=tmp_path, baseline_runs=3, suite_options={"launch_env": ("SITE=1",)})
    recording = suite_for(config, record=True).options
    assert recording.update_baselines and recording.repeat == 3 and recording.fault is None
    rerun = suite_for(config, regression).options
    assert (rerun.update_baselines, rerun.repeat) == (False, 1)
    assert rerun.fault == {"kind": "slow", "fraction": 0.1}
    assert rerun.launch_env == ("SITE=1", "ONEDNN_MAX_CPU_ISA=AVX2")
    assert rerun.baselines_dir == tmp_path / "baselines" and rerun.history_dir is None
    # everything else as ci/suite runs it: the default profile, precision, budget, ranks, launcher
    assert (rerun.profile, rerun.gpus, rerun.launcher, rerun.cores_per_rank) == ("auto", None, None, None)
    assert (rerun.precision, rerun.measure_budget, rerun.yardstick) == (0.02, 90.0, True)


def rerun(regression: Regression, verdict: str, value: float = 100.0, neighbour: bool = False) -> Rerun:
    return Rerun(regression=regression, neighbour=neighbour, verdict=verdict, message="", launches=1,
                 throughput=Estimate(value=value, low=value - 1, high=value + 1, n_steps=50), machine_speed=1.01,
                 contended_launches=0, cpu_wait_share=0.01, outside_share=0.0, wall_s=30.0)


def test_the_report_counts_the_suites_verdicts_and_rates():
    compute = compute_regression(ZEN4)
    config = SelftestConfig(repeats=3, regressions=(compute,), neighbour_runs=1)
    reruns = [rerun(UNCHANGED, "pass"), rerun(UNCHANGED, "inconclusive"), rerun(UNCHANGED, "machine-differs"),
              rerun(UNCHANGED, "pass", neighbour=True),
              rerun(compute, "fail", 85.0), rerun(compute, "fail", 84.0), rerun(compute, "inconclusive", 92.0)]
    report = SelftestReport(config=config, regressions=(compute,), launcher="srun", cores_per_rank=1,
                            workload={"image_size": 32, "batch_size": 16, "steps": 50, "warmup_steps": 5},
                            reference=Reference(value=100.0, lower=-0.08, upper=0.08, unit="img/s"),
                            baseline=[rerun(UNCHANGED, "no-baseline", v) for v in (99.0, 101.0)], reruns=reruns,
                            wall_s=600.0)
    unchanged, neighbour, regressed = report.rows()
    assert unchanged.counts == {"fail": 0, "inconclusive": 1, "pass": 1, "faster": 0, "other": 1}
    assert neighbour.neighbour and neighbour.runs == 1
    assert regressed.counts["fail"] == 2 and regressed.fail_rate == pytest.approx(2 / 3)
    assert report.false_alarms() == 0
    text = format_report(report)
    assert "false alarms: 0 of 3 unchanged reruns" in text
    assert "compute: ATen kernels without vector instructions: caught in 2 of 3 reruns, NOT reliably" in text
    assert "85.00 (-15.0%)" in text and "launcher srun, 1 core(s) per rank, 32 px, batch 16" in text


def report_of(reruns: list[Rerun], *regressions: Regression, neighbour_runs: int = 0) -> SelftestReport:
    return SelftestReport(config=SelftestConfig(repeats=10, regressions=regressions, neighbour_runs=neighbour_runs),
                          regressions=regressions, launcher="srun", cores_per_rank=1, workload={},
                          reference=Reference(value=100.0, lower=-0.08, upper=0.08, unit="img/s"),
                          baseline=[], reruns=reruns, wall_s=60.0)


def test_a_self_test_whose_rates_hold_has_no_shortfalls():
    slow = parse_regression("slow:0.15", ZEN4)
    reruns = ([rerun(UNCHANGED, "pass")] * 8 + [rerun(UNCHANGED, "inconclusive"), rerun(UNCHANGED, "faster")]
              + [rerun(UNCHANGED, "inconclusive", neighbour=True)] + [rerun(slow, "fail", 87.0)] * 9
              + [rerun(slow, "inconclusive", 95.0)])
    assert report_of(reruns, slow, neighbour_runs=1).shortfalls() == []


@pytest.mark.parametrize("unchanged, neighbour, caught, missed", [
    (["inconclusive"] * 10, [], 10, ["only 0 of 10 unchanged reruns judged pass (under 80%): 10 inconclusive, 0 without"]),
    (["error"] * 3 + ["pass"] * 7, [], 10, ["only 7 of 10 unchanged reruns judged pass (under 80%): 0 inconclusive, "
                                             "3 without a verdict"]),
    (["fail"] + ["pass"] * 9, ["fail"], 10, ["1 false alarm(s) in 10 unchanged reruns",
                                            "1 false alarm(s) in 1 unchanged reruns with a neighbour's job"]),
    (["pass"] * 10, [], 8, ["slow: steps 15% longer caught in 8 of 10 reruns (under 90%)"]),
    (["pass"] * 10, [], 0, ["slow: steps 15% longer caught in 0 of 10 reruns (under 90%)"]),
])
def test_a_self_test_that_never_decides_or_misses_names_each_shortfall(unchanged, neighbour, caught, missed):
    slow = parse_regression("slow:0.15", ZEN4)
    reruns = ([rerun(UNCHANGED, verdict) for verdict in unchanged]
              + [rerun(UNCHANGED, verdict, neighbour=True) for verdict in neighbour]
              + [rerun(slow, "fail", 87.0)] * caught + [rerun(slow, "pass", 99.0)] * (10 - caught))
    shortfalls = report_of(reruns, slow, neighbour_runs=len(neighbour)).shortfalls()
    assert [line[:len(expected)] for line, expected in zip(shortfalls, missed)] == missed and len(shortfalls) == len(missed)
