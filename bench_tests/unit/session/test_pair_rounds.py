"""Rounds of pairs on fixed launch outcomes: the rounds double while the verdict is unclear, a pair
with a failed launch is dropped and made up for, and a side that keeps failing ends the comparison
with its error. (The launches themselves: bench_tests/plugin/test_against.py.)"""
import itertools
from pathlib import Path

import pytest

from harness.launch.runner import CellRun
from harness.machine.references import Environment
from harness.rank.cell import Cell
from harness.report.tables import paired_rows
from harness.session.paired import PairSettings, PairsInterrupted, confirmed_by, measure_pairs

CELL = Cell(framework="ddp", loader="synthetic", model="resnet44", ranks=1)
REFERENCE = Environment(label="reference: X=1", source=Path("."), launch_environment={"X": "1"}, commit=None)
SETTINGS = PairSettings(first=8, most=32, min_effect=0.03, budget_s=3600)


def launch_of(seconds_per_step, fail=lambda side, n: False):
    """Launches whose one rank takes ``seconds_per_step(side, n)`` for each of 8 steps of 16 images."""
    count = itertools.count()

    def launch(side):
        n = next(count)
        step = seconds_per_step(side, n)
        record = {"rank": 0, "step_times": [step] * 8, "images": 128, "window_s": 8 * step, "losses": [1.0] * 8,
                  "data_wait": [0.0] * 8}
        failed = fail(side, n)
        return CellRun(cell=CELL, launcher="torchrun", command=[], status="failed" if failed else "ok",
                       records=[] if failed else [record], error="rank 0: boom\ntraceback" if failed else None,
                       wall_s=1.0, log_path=Path("log"), token="t", orphans_killed=[])
    return launch


def test_a_clear_slowdown_is_judged_after_the_first_round():
    result = measure_pairs(CELL, REFERENCE, launch_of(lambda side, n: 0.2 if side == "reference" else 0.25),
                           SETTINGS, seed=1)
    assert result.verdict.kind == "regressed" and len(result.pairs) == 8 and result.launches == 16
    assert result.verdict.ratio.value == 0.2 / 0.25


def test_an_unclear_answer_gets_more_pairs_up_to_the_most():
    noise = [1.0, 1.3, 0.8, 1.2, 0.75, 1.25, 0.9, 1.1] * 8
    result = measure_pairs(CELL, REFERENCE, launch_of(lambda side, n: 0.2 * noise[n % len(noise)]), SETTINGS, seed=2)
    assert len(result.pairs) == 32 and result.verdict.kind == "inconclusive"


def test_a_failed_launch_drops_its_pair_and_the_rest_stay_balanced():
    result = measure_pairs(CELL, REFERENCE, launch_of(lambda side, n: 0.2 if side == "reference" else 0.25,
                                                      fail=lambda side, n: n in (3, 6)), SETTINGS, seed=3)
    assert len(result.dropped) == 2 and len(result.pairs) == 8
    assert all(": rank 0: boom" in line and "failed" in line for line in result.dropped)
    orders = [pair.order for pair in result.pairs]
    assert orders.count("reference-first") == orders.count("current-first") == 4


def test_a_side_that_keeps_failing_ends_the_comparison_with_its_error():
    result = measure_pairs(CELL, REFERENCE, launch_of(lambda side, n: 0.2, fail=lambda side, n: side == "reference"),
                           SETTINGS, seed=4)
    assert result.verdict is None and not result.ok and result.launches <= 4
    assert "the reference launch failed: rank 0: boom" in result.error
    assert confirmed_by(result, "none").cause == "unknown"


def test_an_interrupt_keeps_the_pairs_measured_and_judges_them():
    def launch(side, inner=launch_of(lambda side, n: 0.2 if side == "reference" else 0.25), count=itertools.count()):
        if next(count) == 13:  # the 14th launch: the second side of the 7th pair
            raise KeyboardInterrupt
        return inner(side)

    with pytest.raises(PairsInterrupted) as interrupt:  # a KeyboardInterrupt: any caller lets it go on
        measure_pairs(CELL, REFERENCE, launch, SETTINGS, seed=5)
    assert isinstance(interrupt.value, KeyboardInterrupt)
    result = interrupt.value.result
    assert result.interrupted and len(result.pairs) == 6 and result.launches == 13
    assert result.verdict.kind == "regressed" and result.to_json()["interrupted"] is True


def test_the_summary_shows_the_stored_baselines_verdict_only_where_a_cell_has_one():
    judged = measure_pairs(CELL, REFERENCE, launch_of(lambda side, n: 0.2), SETTINGS, seed=1)
    assert paired_rows([judged])[0][-1] == "verdict"
    judged.stored_baseline = {"verdict": "fail", "throughput": None, "launches": 8, "reasons": ["fail: far below"]}
    unjudged = measure_pairs(CELL, REFERENCE, launch_of(lambda side, n: 0.2), SETTINGS, seed=2)
    header, first, second = paired_rows([judged, unjudged])
    assert header[-2:] == ["verdict", "stored baseline"] and first[-2:] == ["same", "fail"] and second[-1] == "-"
    assert judged.to_json()["stored_baseline"]["verdict"] == "fail"
