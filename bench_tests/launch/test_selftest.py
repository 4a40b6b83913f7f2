"""The self-test's acceptance, through the suite's own code path in the configuration ``ci/suite``
runs (the default launcher, workload, cores per rank, precision and measuring budget): 10
unchanged reruns of ddp-synthetic-resnet50-g1 never fail and at least 8 pass, a real compute
regression (torch's ATen kernels without vector instructions: -17% to -22% in this cell here) is
caught in at least 9 of 10, as is a 15% sleep inside every step, and 3 unchanged reruns while
another job competes for the cores never fail. The baseline is 10 measurements, as
``--update-baselines --cell-repeats 10`` records it (with 5, the band's t-factor of 4.6 would make it as
wide as the regressions). About 35 minutes on a 2-core machine, so it runs only when asked for:
``pytest -m selftest bench_tests/launch/test_selftest.py -s``. A five-measurement run of the same
machinery on a tiny cell, with no claim on power, runs with the other launch tests (with ResNet50:
ResNet44's ten steps end before a neighbour's three-second burst does)."""
import pytest

from harness.machine.node import cpu_identity
from harness.tasks.selftest import SelftestConfig, format_report, parse_regression, run_selftest

from ..workloads import TINY

pytestmark = pytest.mark.launch


@pytest.mark.selftest  # opt-in: pytest -m selftest
def test_unchanged_reruns_never_fail_and_real_regressions_are_caught(tmp_path):
    isa = cpu_identity().get("isa", "")
    regressions = (parse_regression("compute", isa), parse_regression("slow:0.15", isa))
    config = SelftestConfig(repeats=10, baseline_runs=10, regressions=regressions, neighbour_runs=3, workdir=tmp_path)
    report = run_selftest(config, on_progress=lambda line: print(f"  [selftest] {line}", flush=True))  # with -s
    text = format_report(report)
    print(text)
    assert report.shortfalls() == [], text


def test_the_self_test_runs_end_to_end_in_small(tmp_path):
    """Not opt-in: five measurements of a tiny cell through the whole self-test (the baseline
    recorded by the suite, reruns with a slowdown and with a neighbour, the report). No claim on power."""
    slow = parse_regression("slow:0.3", "")
    config = SelftestConfig(repeats=1, baseline_runs=2, regressions=(slow,), neighbour_runs=1, neighbour=(0.0, 3.0),
                            workdir=tmp_path, suite_options={
                                "image_size": TINY.image_size, "batch_size": TINY.batch_size, "steps": 10,
                                "warmup_steps": TINY.warmup_steps, "measure_budget": 0.0,
                                # two 10-step launches make no precise baseline (a CI run measured
                                # +-10.6% against the default widest +-10%); this test is about the flow
                                "widest_baseline": float("inf")})
    report = run_selftest(config)
    assert report.reference.value > 0 and len(report.baseline) == 2
    assert [(row.regression.name, row.neighbour, row.runs, row.counts["other"]) for row in report.rows()] == [
        ("unchanged", False, 1, 0), ("unchanged", True, 1, 0), (slow.name, False, 1, 0)]
    assert all(rerun.machine_speed and rerun.cpu_wait_share is not None and rerun.outside_share is not None
               for rerun in report.reruns)
    assert (tmp_path / "baselines" / "selftest.json").exists()
    text = format_report(report)
    assert "unchanged + neighbour" in text and "false alarms: " in text
