"""The judging core's verdict order and its two readings of a CPU throughput, without launching
anything: evidence and a baseline entry in, verdicts out."""
from __future__ import annotations

import itertools
import json

import pytest

from harness.judging.kinds import MOST_SERIOUS_FIRST, UNJUDGED, VerdictKind
from harness.judging.stats import Estimate
from harness.judging.tunables import Tunables
from harness.judging.verdicts import (Evidence, Reference, agreed, judge_accuracy, judge_cell, judge_throughput,
                                      Verdict, measured_enough, overall)
from harness.judging.yardstick import Yardstick

BAND = Reference(value=100.0, lower=-0.1, upper=0.1, unit="img/s")
HARDWARE = {"cpu": "AMD EPYC", "cpu_id": "AuthenticAMD family 25 model 17 stepping 1", "cores": 2,
            "cores_per_rank": 1, "ranks": 1}
STACK = {"python": "3.11.7", "torch": "2.14.1"}


def interval(value: float, half: float = 1.0) -> Estimate:
    return Estimate(value=value, low=value - half, high=value + half, n_steps=50)


def yardstick(seconds: float, drift: float = 0.0) -> Yardstick:
    return Yardstick(seconds=seconds, spread=0.01, drift=drift)


def entry(**changes) -> dict:
    base = {"throughput": {"value": 100.0}, "config_hash": "abc", "config": {"batch_size": 16},
            "fingerprint": {"hardware": HARDWARE, "stack": STACK}, "yardstick": yardstick(1.0).to_json()}
    return {**base, **changes}


def evidence(value: float = 100.0, *, seconds: float = 1.0, hardware=None, stack=None, **changes) -> Evidence:
    fields = dict(cell_id="ddp-synthetic-resnet50-g1", config_hash="abc", config={"batch_size": 16},
                  throughput=interval(value), fingerprint={"hardware": hardware or HARDWARE, "stack": stack or STACK},
                  yardstick=yardstick(seconds))
    return Evidence(**{**fields, **changes})


def kinds(judgement) -> list[str]:
    return [v.kind for v in judgement.verdicts]


def test_the_verdict_order_no_baseline_then_stale_then_machine_then_band():
    refs = {"throughput": BAND}
    assert kinds(judge_cell(evidence(), None, refs)) == ["no-baseline"]
    # another workload and other hardware are stale even when the machine also differs
    stale_config = judge_cell(evidence(config_hash="zzz", config={"batch_size": 32}, seconds=0.3), entry(), refs)
    assert kinds(stale_config) == ["stale"] and "batch_size: 16 -> 32" in stale_config.verdicts[0].message
    other_cpu = judge_cell(evidence(hardware={**HARDWARE, "cores": 4}, seconds=0.3), entry(), refs)
    assert kinds(other_cpu) == ["stale"] and "hardware.cores: 2 -> 4" in other_cpu.verdicts[0].message
    # the same hardware facts, but the yardstick runs 3x faster: another machine, never a fail
    faster_machine = judge_cell(evidence(40.0, seconds=1 / 3), entry(), refs)
    assert kinds(faster_machine) == ["machine-differs"] and faster_machine.machine_speed == pytest.approx(3.0)
    assert kinds(judge_cell(evidence(100.0), entry(), refs)) == ["pass"]
    assert kinds(judge_cell(evidence(80.0), entry(), refs)) == ["fail"]


def test_the_configuration_is_compared_field_by_field_over_what_the_cell_measures():
    refs = {"throughput": BAND}
    recorded = entry(config_hash="old-recipe", config={"batch_size": 16, "dali_threads": 2, "data_dir": "/a"})
    # another hash, the same fields: a new recipe for the hash, or a knob only DALI cells read
    same = judge_cell(evidence(config_hash="new", config={"batch_size": 16, "dali_threads": 8}), recorded, refs)
    assert kinds(same) == ["pass"]
    dali = evidence(cell_id="ddp-dali-cpu-resnet50-g1", config_hash="new", config={"batch_size": 16, "dali_threads": 8})
    stale = judge_cell(dali, recorded, refs)
    assert kinds(stale) == ["stale"] and "dali_threads: 2 -> 8" in stale.verdicts[0].message
    # an entry that keeps only its hash: any other hash is stale
    bare = {key: value for key, value in recorded.items() if key != "config"}
    assert kinds(judge_cell(evidence(config_hash="new"), bare, refs)) == ["stale"]


def test_a_software_change_is_judged_and_named_not_stale():
    judgement = judge_cell(evidence(80.0, stack={**STACK, "torch": "2.15.0"}), entry(), {"throughput": BAND})
    assert kinds(judgement) == ["fail"] and judgement.stack_changes == ["torch 2.14.1 -> 2.15.0"]
    assert "software changed since the baseline: torch 2.14.1 -> 2.15.0" in judgement.verdicts[0].message


def test_a_baseline_recorded_without_the_huge_pages_is_stale_naming_them_not_a_regression():
    refs = {"throughput": BAND}
    with_thp = judge_cell(evidence(80.0, stack={**STACK, "huge_pages": "thp"}), entry(), refs)
    assert kinds(with_thp) == ["stale"] and with_thp.verdicts[0].message == (
        "baseline measured with other huge pages (stack.huge_pages: off -> thp); re-record it on this machine with "
        "--update-baselines")
    assert kinds(judge_cell(evidence(80.0), entry(), refs)) == ["fail"]  # without them, as the baseline was


def test_a_fail_while_other_work_took_the_cores_is_inconclusive_but_the_cells_own_wait_is_not():
    refs = {"throughput": BAND}
    contended = judge_cell(evidence(80.0, cpu_wait_share=0.30), entry(), refs, baseline_wait=0.02)
    assert kinds(contended) == ["inconclusive"] and "waited for a CPU" in contended.verdicts[0].message
    # a cell whose own loader workers always wait as much did so at the baseline too: a real fail
    own_wait = judge_cell(evidence(80.0, cpu_wait_share=0.30), entry(), refs, baseline_wait=0.28)
    assert kinds(own_wait) == ["fail"]


def test_efficiency_is_judged_as_measured_and_the_reference_cell_is_not_judged():
    refs = {"throughput": BAND, "efficiency": Reference(value=0.8, lower=-0.1, upper=0.1, unit="")}
    low = Estimate(value=0.5, low=0.48, high=0.52, n_steps=50)
    judged = judge_cell(evidence(efficiency=low, efficiency_source="measured"), entry(), refs)
    assert kinds(judged) == ["pass", "fail"] and overall(judged.verdicts) == "fail"
    itself = judge_cell(evidence(efficiency=Estimate(value=1.0, low=1.0, high=1.0), efficiency_source="by definition"),
                        entry(), refs)
    assert kinds(itself) == ["pass"]


@pytest.mark.parametrize("as_measured, normalised, expected", [
    ("pass", "pass", "pass"), ("fail", "fail", "fail"), ("faster", "faster", "faster"),
    ("pass", "faster", "pass"), ("faster", "pass", "pass"),
    ("fail", "pass", "inconclusive"), ("pass", "fail", "inconclusive"),
    ("inconclusive", "fail", "inconclusive"), ("pass", "inconclusive", "inconclusive"),
])
def test_only_a_verdict_both_readings_give_stands(as_measured, normalised, expected):
    assert agreed(as_measured, normalised) == expected


def test_agreement_never_turns_two_non_fails_into_a_fail():
    kinds_ = ("pass", "fail", "inconclusive", "faster")
    for a, b in itertools.product(kinds_, kinds_):
        assert (agreed(a, b) == "fail") == (a == b == "fail")


def test_the_same_machine_false_fail_seen_here_is_inconclusive():
    """Measured on this project's CI machine an hour after recording: -7.9% as measured, the
    yardstick 19.9% faster, so -23.2% normalised. The yardstick alone moved that much between
    launches, so this is no verdict."""
    verdict = judge_throughput(interval(92.1), BAND, machine_speed=1.199, machine_drift=0.02)
    assert verdict.kind == "inconclusive"
    assert "normalised fail" in verdict.message and "as measured pass" in verdict.message


def test_both_readings_of_a_real_regression_fail():
    # 20% fewer images per second with the machine as fast as at the baseline, or faster
    for speed in (1.0, 1.1, 1.2):
        verdict = judge_throughput(interval(80.0), BAND, machine_speed=speed)
        assert verdict.kind == "fail", (speed, verdict.message)
    assert "throughput -33.3% normalised" in judge_throughput(interval(80.0), BAND, machine_speed=1.2).message


def test_a_drop_the_slower_machine_explains_is_inconclusive_not_a_pass():
    verdict = judge_throughput(interval(80.0), BAND, machine_speed=0.8)
    assert verdict.kind == "inconclusive"
    assert "machine -20.0% by the yardstick, 0.0% apart before and after the window), -20.0% as measured" in \
        verdict.message


def test_a_machine_drifting_within_the_launch_cannot_pin_a_loss_down():
    steady, drifting = (judge_throughput(interval(88.0), BAND, machine_speed=1.0, machine_drift=drift)
                        for drift in (0.0, 0.1))
    assert (steady.kind, drifting.kind) == ("fail", "inconclusive")
    assert "10.0% apart before and after the window" in drifting.message


def test_without_a_machine_speed_the_throughput_is_judged_as_measured_and_says_why():
    verdict = judge_throughput(interval(95.0), BAND, raw_because="--no-yardstick")
    assert verdict.kind == "pass" and "as measured (--no-yardstick)" in verdict.message
    assert judge_throughput(interval(95.0), None).kind == "no-baseline"


def test_a_machine_speed_within_the_yardsticks_own_noise_is_shown_but_not_used():
    """The yardstick moves by itself from launch to launch; normalising by such a move corrects
    nothing and adds its noise, so within the baseline's measured noise the cell is judged as
    measured (a 12% loss fails though the yardstick says the machine ran 5% faster), and beyond it
    both readings count."""
    refs = {"throughput": BAND}
    quiet = entry(yardstick=Yardstick(seconds=1.0, spread=0.01, noise=0.08).to_json())
    judged = judge_cell(evidence(88.0, seconds=1 / 1.05), quiet, refs)
    assert kinds(judged) == ["fail"] and judged.machine_speed == pytest.approx(1.05)
    assert "as measured (machine +5.0% by the yardstick, within the +-8.0% it strays by itself" in \
        judged.verdicts[0].message
    moved = judge_cell(evidence(88.0, seconds=1 / 1.15), quiet, refs)
    assert kinds(moved) == ["fail"] and "normalised to the baseline's machine speed" in moved.verdicts[0].message
    slower = judge_cell(evidence(88.0, seconds=1 / 0.85), quiet, refs)
    assert kinds(slower) == ["inconclusive"]  # the machine's own slowdown explains the loss
    # a baseline recorded from one launch does not know its noise: the measured default stands in
    assert "within the +-10.0%" in judge_cell(evidence(100.0, seconds=1 / 1.09), entry(), refs).verdicts[0].message


def test_a_band_from_repeats_narrows_for_a_measurement_pooled_from_several_launches():
    from_ten = Reference(value=100.0, lower=-0.15, upper=0.15, unit="img/s", repeats=10)
    assert from_ten.for_launches(1) == from_ten
    assert from_ten.for_launches(3).lower == pytest.approx(-0.15 * ((1 / 3 + 1 / 10) / (1 + 1 / 10)) ** 0.5)
    assert BAND.for_launches(3) == BAND  # a hand-written band is taken as it is


def test_a_pass_that_one_more_launch_could_turn_into_a_fail_is_not_settled():
    """A 12% loss inside a one-launch band of -15% (10 repeats) is below the edge two launches
    would have (-11.1%): inconclusive, so the cell is launched again; pooled from two launches it
    fails. An unchanged figure passes at once."""
    from_ten = Reference(value=100.0, lower=-0.15, upper=0.15, unit="img/s", repeats=10)
    once = judge_throughput(interval(88.0, half=0.5), from_ten)
    assert once.kind == "inconclusive" and "one more launch could make it a fail" in once.message
    twice = judge_throughput(interval(88.0, half=0.5), from_ten, launches=2)
    assert twice.kind == "fail" and "band -11.1% for 2 launches" in twice.message
    assert judge_throughput(interval(97.0, half=0.5), from_ten).kind == "pass"
    unchanged = judge_cell(evidence(97.0, launches=3), entry(), {"throughput": from_ten})
    assert kinds(unchanged) == ["pass"]


def test_a_cell_is_launched_again_while_imprecise_or_inconclusive_and_the_budget_allows():
    wide, narrow = interval(100.0, half=5.0), interval(100.0, half=1.0)
    enough = dict(precision=0.02, spent_s=10.0, next_launch_s=10.0, budget_s=45.0)
    assert not measured_enough(wide, "pass", **enough)
    assert not measured_enough(narrow, "inconclusive", **enough)
    assert measured_enough(narrow, "pass", **enough)
    assert measured_enough(narrow, "inconclusive", **{**enough, "spent_s": 40.0})


@pytest.mark.parametrize("final, verdict", [(0.97, "pass"), (0.90, "fail"), (0.999, "pass")])
def test_an_accuracy_is_judged_against_its_band_and_a_baseline_of_other_settings_is_stale(final, verdict):
    reference = Reference(value=0.97, lower=-0.02, upper=None, unit="")
    assert judge_accuracy(final, {"config_hash": "abc"}, reference, config_hash="abc").kind == verdict
    assert judge_accuracy(final, {"config_hash": "old"}, reference, config_hash="abc").kind == "stale"
    assert judge_accuracy(final, None, None, config_hash="abc").kind == "no-baseline"


def test_every_verdict_kind_is_ranked_once_and_written_as_its_name():
    """The files the suite writes (results.json, the history, the report) hold a kind's name, and
    a reader of them compares plain strings with the kinds."""
    assert sorted(MOST_SERIOUS_FIRST) == sorted(VerdictKind) and len(set(MOST_SERIOUS_FIRST)) == len(VerdictKind)
    assert UNJUDGED < set(VerdictKind)
    assert json.dumps({"verdict": VerdictKind.MACHINE_DIFFERS}) == '{"verdict": "machine-differs"}'
    assert f"{VerdictKind.NO_BASELINE}: x" == "no-baseline: x" and VerdictKind("stale") == "stale"
    verdicts = [Verdict(kind=VerdictKind(kind), message="") for kind in ("faster", "stale", "inconclusive")]
    assert overall(verdicts) == "stale" and overall([]) == VerdictKind.PASS


def test_a_cell_far_below_its_band_fails_whatever_work_outside_it_took():
    """CI once judged a 1e6 img/s baseline against 100 img/s `inconclusive` because the ranks read
    5% outside work: no neighbour that stood the cell still for a tenth of its window explains that."""
    neighbour = dict(outside_share=0.2, outside_stall=0.1)
    far = judge_cell(evidence(10.0, **neighbour), entry(), {"throughput": BAND})
    assert kinds(far) == ["fail"] and "too little for this shortfall, so the fail stands" in far.verdicts[0].message
    near = judge_cell(evidence(85.0, **neighbour), entry(), {"throughput": BAND})
    assert kinds(near) == ["inconclusive"] and "not trusted: work outside the cell took 20%" in near.verdicts[0].message


def test_a_systems_tunables_move_the_thresholds_they_name():
    refs = {"throughput": BAND}
    # a yardstick 1.4x as fast: another machine by default, a drift where the system allows 50%
    assert kinds(judge_cell(evidence(140.0, seconds=1 / 1.4), entry(), refs)) == ["machine-differs"]
    lenient = Tunables(same_machine_drift=0.5)
    assert kinds(judge_cell(evidence(140.0, seconds=1 / 1.4), entry(), refs, tunables=lenient)) == ["pass"]
    # outside work on 8% of the cores: contended by default (5%), not where the system puts the mark at 10%
    neighbour = dict(outside_share=0.08, cpu_wait_share=0.3)
    assert kinds(judge_cell(evidence(80.0, **neighbour), entry(), refs)) == ["inconclusive"]
    assert kinds(judge_cell(evidence(80.0, **neighbour), entry(), refs, tunables=Tunables(notable_wait=0.1))) == ["fail"]
