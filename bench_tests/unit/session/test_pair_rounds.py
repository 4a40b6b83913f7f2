"""Rounds of pairs on fixed launch outcomes: the rounds double while the verdict is unclear, each look
at the level its spending gives, a failed launch ends the comparison with an error naming its side,
a pair whose launches saw different outside work is left out and made up for, and a duet's halves
are balanced. (The launches themselves: bench_tests/plugin/test_against.py.)"""
import itertools
from pathlib import Path

import pytest

from harness.launch.runner import CellRun
from harness.machine.references import Environment
from harness.rank.cell import Cell
from harness.report.tables import paired_rows
from harness.judging.paired import DUET_ORDERS
from harness.judging.sequential import look_levels
from harness.session.paired import PairSettings, PairsInterrupted, measure_pairs

CELL = Cell(framework="ddp", loader="synthetic", model="resnet44", ranks=1)
REFERENCE = Environment(label="reference: X=1", source=Path("."), launch_environment={"X": "1"}, commit=None)
SETTINGS = PairSettings(first=8, most=32, min_effect=0.03, budget_s=3600)


def launch_of(seconds_per_step, fail=lambda side, n: False, outside=lambda side, n: None, status="failed"):
    """Launches whose one rank takes ``seconds_per_step(side, n)`` for each of 8 steps of 16 images;
    ``outside(side, n)``: the seconds of its core that outside work took in each step (None: not
    read, the rank owning no core)."""
    count = itertools.count()

    def launch(side):
        n = next(count)
        step = seconds_per_step(side, n)
        record = {"rank": 0, "step_times": [step] * 8, "images": 128, "window_s": 8 * step, "losses": [1.0] * 8,
                  "data_wait": [0.0] * 8}
        if (taken := outside(side, n)) is not None:
            record.update(outside_cpu=[taken] * 8, cores=[0])
        failed = fail(side, n)
        return CellRun(cell=CELL, launcher="torchrun", command=[], status=status if failed else "ok",
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


def test_the_first_look_is_judged_at_the_level_its_spending_gives():
    result = measure_pairs(CELL, REFERENCE, launch_of(lambda side, n: 0.2 if side == "reference" else 0.25),
                           SETTINGS, seed=1)
    assert result.looks == [8] and result.verdict.look.level == pytest.approx(look_levels([8], 32, 0.05)[0])
    assert result.verdict.ratio.confidence == pytest.approx(1 - result.verdict.look.level)
    assert result.to_json()["look"]["rule_name"].startswith("Lan-DeMets alpha spending, Pocock-type")


def test_a_failed_launch_ends_the_comparison_with_an_error_that_names_its_side():
    result = measure_pairs(CELL, REFERENCE, launch_of(lambda side, n: 0.2 if side == "reference" else 0.25,
                                                      fail=lambda side, n: side == "current" and n > 4,
                                                      status="timeout"), SETTINGS, seed=3)
    assert not result.ok and result.verdict_kind == "error"
    assert result.failed_launches("current") == 1 and result.failed_launches("reference") == 0
    assert "the current side's launch timed out" in result.error and ": rank 0: boom" in result.error
    assert result.to_json()["failed_launches"] == {"reference": 0, "current": 1}
    assert len(result.pairs) < 8  # no pair is made up for a failure


def test_a_side_that_fails_at_once_ends_the_comparison_with_its_error():
    result = measure_pairs(CELL, REFERENCE, launch_of(lambda side, n: 0.2, fail=lambda side, n: side == "reference"),
                           SETTINGS, seed=4)
    assert result.verdict is None and not result.ok and result.launches <= 2
    assert "the reference side's launch failed in pair 1" in result.error


def test_a_pair_whose_launches_saw_different_outside_work_is_left_out_and_made_up_for():
    busy = {5, 9}  # launches during which another job took about 4% of the rank's core
    result = measure_pairs(CELL, REFERENCE, launch_of(lambda side, n: 0.2 if side == "reference" else 0.25,
                                                      outside=lambda side, n: 0.011 if n in busy else 0.0),
                           SETTINGS, seed=6)
    assert len(result.left_out) == 2 and len(result.pairs) == 8 and result.launches == 20
    assert "a difference beyond the minimum effect" in result.left_out[0]["why"]
    orders = [pair.order for pair in result.pairs]
    assert orders.count("reference-first") == orders.count("current-first") == 4


def test_a_pair_whose_launches_were_both_contended_is_left_out():
    result = measure_pairs(CELL, REFERENCE, launch_of(lambda side, n: 0.2 if side == "reference" else 0.25,
                                                      outside=lambda side, n: 0.08 if n in (2, 3) else 0.0),
                           SETTINGS, seed=6)
    assert len(result.left_out) == 1 and "contended (more than 5%)" in result.left_out[0]["why"]


def test_a_node_too_busy_to_compare_on_holds_the_verdict_inconclusive():
    result = measure_pairs(CELL, REFERENCE, launch_of(lambda side, n: 0.2 if side == "reference" else 0.25,
                                                      outside=lambda side, n: 0.04 if side == "current" else 0.0),
                           SETTINGS, seed=7)
    assert result.verdict is None or result.verdict.kind == "inconclusive"
    assert len(result.left_out) == 3 and not result.pairs and "too busy to compare on" in result.error


def test_a_node_that_gets_busy_after_pairs_were_kept_holds_the_verdict_inconclusive_not_error():
    """Four clean pairs, then another job takes 4% of the current side's core: its pairs are left out
    until the node is too busy to compare on. With pairs to judge, the verdict is held
    ``inconclusive`` for the busy node (as docs/verdicts.md says), not ended in an ``error``."""
    result = measure_pairs(CELL, REFERENCE, launch_of(lambda side, n: 0.2 if side == "reference" else 0.25,
                                                      outside=lambda side, n: 0.04 if side == "current" and n > 8
                                                      else 0.0), SETTINGS, seed=7)
    assert len(result.pairs) == 4 and len(result.left_out) == 5
    assert result.error is None and result.ok and result.verdict_kind == "inconclusive"
    assert any("too busy to compare on" in flag for flag in result.verdict.flags)


class Clock:
    """Monotonic seconds that pass only as the fake launches take them."""
    def __init__(self):
        self.now = 1000.0

    def monotonic(self):
        return self.now


def test_no_round_starts_that_the_budget_would_not_fit_even_within_a_look(monkeypatch):
    """Each launch takes 10 s and the budget is 100 s: the first look wants 8 pairs (160 s), so the
    pairs stop once one more would not fit, judged as they stand at a look of their own."""
    from harness.session import paired, rounds
    clock = Clock()
    monkeypatch.setattr(rounds, "time", clock)
    monkeypatch.setattr(paired, "time", clock)
    inner = launch_of(lambda side, n: 0.2 if side == "reference" else 0.25)

    def launch(side):
        clock.now += 10.0
        return inner(side)

    settings = PairSettings(first=8, most=32, min_effect=0.03, budget_s=100)
    result = measure_pairs(CELL, REFERENCE, launch, settings, seed=1)
    assert result.launches == 10 and result.wall_s <= settings.budget_s
    assert result.looks == [5] and result.verdict.pairs == 5  # too few to decide at the level a sixth look spends


def test_duet_pairs_balance_which_side_takes_which_half():
    launched = []

    def together(halves):
        launched.append(dict(halves))
        inner = launch_of(lambda side, n: 0.2 if side == "reference" else 0.25)
        return {side: inner(side) for side in halves}

    result = measure_pairs(CELL, REFERENCE, None, SETTINGS, seed=8, together=together)
    assert result.duet and result.verdict.kind == "regressed" and len(launched) == 8
    assert sorted(halves["reference"] for halves in launched) == [0, 0, 0, 0, 1, 1, 1, 1]
    assert {pair.order for pair in result.pairs} == set(DUET_ORDERS)


def failed_launch(status, error, **ended):
    """A duet side's launch that failed, started at 1000 s (epoch) and ended, as the runner saw it, at
    ``ended_epoch`` where given; its wall time, as a duet's, runs until both sides were over."""
    return CellRun(cell=CELL, launcher="torchrun", command=[], status=status, records=[], error=error, wall_s=190.0,
                   log_path=Path("log"), token="t", orphans_killed=[], started_epoch=1000.0, **ended)


def test_a_duet_names_the_side_that_failed_first_not_the_one_left_waiting_at_the_gate():
    """The current side dies in its set-up; the reference's first rank waits at the gate, silent,
    until the runner ends it as hung. Both failed, the reference first in the pair's order."""
    runs = {"reference": failed_launch("hung", "no progress from any rank for 180 s (heartbeat timeout); least "
                                               "recent: rank 0 at warmup step 2/2", ended_epoch=1185.0),
            "current": failed_launch("failed", "rank0 on vm (pid 7): ImportError: cannot import name 'fused_sgd'",
                                     ended_epoch=1004.0)}
    result = measure_pairs(CELL, REFERENCE, None, SETTINGS, seed=8, together=lambda halves: dict(runs))
    assert result.failed_launches("current") == 1 and result.failed_launches("reference") == 0
    assert result.error.startswith("the current side's launch failed in pair 1 (")
    assert "before the reference's, which then hung: rank0 on vm (pid 7): ImportError" in result.error


def test_a_duet_side_whose_ranks_timed_out_at_the_gate_is_not_named():
    """With more silence allowed (--hang-timeout 600) than the gate waits (300 s), the reference's
    gate times out before the runner ends the current side, hung before its window."""
    runs = {"reference": failed_launch("failed", "rank0 on vm (pid 9): GateTimeout: the duet's other side did not "
                                                 "reach its timed window within 300 s (gate /tmp/g)"),
            "current": failed_launch("hung", "no progress from any rank for 600 s (heartbeat timeout)")}
    result = measure_pairs(CELL, REFERENCE, None, SETTINGS, seed=8, together=lambda halves: dict(runs))
    assert result.failed_launches("current") == 1 and result.failed_launches("reference") == 0
    assert result.error.startswith("the current side's launch hung in pair 1 (")


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
    # judged at a look of its own, 6 of up to 32 pairs: too early to spend enough error for a verdict
    assert result.looks == [6] and result.verdict.pairs == 6 and result.verdict.kind == "inconclusive"
    assert result.to_json()["interrupted"] is True


def test_the_summary_shows_the_stored_baselines_verdict_only_where_a_cell_has_one():
    judged = measure_pairs(CELL, REFERENCE, launch_of(lambda side, n: 0.2), SETTINGS, seed=1)
    assert paired_rows([judged])[0][-1] == "verdict"
    judged.stored_baseline = {"verdict": "fail", "throughput": None, "launches": 8, "reasons": ["fail: far below"]}
    unjudged = measure_pairs(CELL, REFERENCE, launch_of(lambda side, n: 0.2), SETTINGS, seed=2)
    header, first, second = paired_rows([judged, unjudged])
    assert header[-2:] == ["verdict", "stored baseline"] and first[-2:] == ["same", "fail"] and second[-1] == "-"
    assert judged.to_json()["stored_baseline"]["verdict"] == "fail"


def test_where_a_launchs_time_went_is_read_from_rank_0s_marks():
    from harness.session.rounds import where_time_went

    run = launch_of(lambda side, n: 0.05)("current")
    assert where_time_went(run) is None  # a worker that marks nothing (an older commit's)
    run.started_epoch = 1000.0
    run.wall_s = 4.0
    run.records[0]["timeline"] = {"worker_start": 1001.5, "set_up": 1002.0, "window_start": 1002.4,
                                  "window_end": 1002.8, "done": 1002.9}
    assert where_time_went(run) == {"start-up": 1.5, "set-up": 0.5, "warm-up": 0.4, "window": 0.4, "teardown": 0.1,
                                    "exit": 1.1}


def test_the_first_pairs_work_is_said_before_any_speed_verdict():
    said = []
    measure_pairs(CELL, REFERENCE, launch_of(lambda side, n: 0.2), SETTINGS, seed=1, on_progress=said.append)
    assert said[0].startswith(f"{CELL.id}: work: not compared (the reference and the current side counted no work")
    with_work = launch_of(lambda side, n: 0.2)

    def counted(side):
        run = with_work(side)
        flops = 1000 if side == "reference" else 1100
        for record in run.records:
            record["work"] = {"flops": {"total": flops, "by_operator": {"aten::convolution": flops}},
                              "not_counted": {}}
        return run

    said.clear()
    result = measure_pairs(CELL, REFERENCE, counted, SETTINGS, seed=1, on_progress=said.append)
    assert said[0] == f"{CELL.id}: work: +10.0% FLOPs (aten::convolution) (the first pair's counted work)"
    assert result.to_json()["work"]["launches_differ"] == []
