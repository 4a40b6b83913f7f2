"""harness.session.paired.confirmed_by: an A/B's pairs against the baseline's environment, rebuilt,
become a confirmation: the reference side's launches are the baseline environment's figure on this
node now, judged against the stored band; the split in numbers in its JSON. (The rules:
bench_tests/unit/judging/test_confirmation.py; the launches: bench_tests/plugin/test_against.py.)"""
from pathlib import Path

import pytest

from harness.judging.confirmation import Rebuild
from harness.judging.kinds import PairedKind
from harness.judging.paired import Pair, PairedVerdict
from harness.judging.stats import Estimate
from harness.judging.verdicts import Reference
from harness.machine.references import Environment
from harness.rank.cell import Cell
from harness.session.paired import PairedResult, confirmed_by

CELL = Cell(framework="ddp", loader="synthetic", model="resnet44", ranks=1)
REFERENCE = Environment(label="reference: git aaaaaaaaaa", source=Path("."), launch_environment={}, commit="a" * 40)
BAND = Reference(value=100.0, lower=-0.1, upper=0.1, unit="img/s")
STORED = Estimate(value=0.60, low=0.59, high=0.61)  # the cell ran at 60% of its stored figure
EXACT = Rebuild(commit="a" * 40, parts=("pkg:numpy==2.4.6",))


def paired(reference: list[float], current: list[float], kind: PairedKind | None) -> PairedResult:
    pairs = [Pair(order="reference-first" if i % 2 else "current-first", reference=r, current=c)
             for i, (r, c) in enumerate(zip(reference, current))]
    ratios = sorted(c / r for r, c in zip(reference, current))
    verdict = PairedVerdict(kind=kind, ratio=Estimate(value=ratios[len(ratios) // 2], low=ratios[1], high=ratios[-2]),
                            p_value=0.008, pairs=len(pairs), min_effect=0.03) if kind else None
    # each launch's figure as a stored figure is computed (its warm-up trimmed): the figure now
    launch_log = [{"side": side, "pair": index, "status": "ok", "throughput_as_stored": figure, "wall_s": 4.0,
                   "window_s": 0.5}
                  for index, (r, c) in enumerate(zip(reference, current)) for side, figure in (("reference", r),
                                                                                             ("current", c))]
    return PairedResult(cell=CELL, reference=REFERENCE, pairs=pairs, verdict=verdict, launch_log=launch_log,
                        error=None if kind else "the reference side's launch failed in pair 3")


NODE_SLOW = [60.0, 61.0, 59.0, 60.5, 59.5, 60.0, 61.5, 58.5]


def test_the_reference_sides_launches_reproducing_the_shortfall_make_it_the_systems():
    confirmation = confirmed_by(paired(NODE_SLOW, [f * 1.002 for f in NODE_SLOW], PairedKind.SAME), EXACT,
                                stored=STORED, band=BAND)
    assert confirmation.cause == "system"
    split = confirmation.to_json()["split"]
    assert split["baseline_environment_now"]["value"] == pytest.approx(0.60, abs=0.005)
    assert split["baseline_environment_now_verdict"] == "fail"
    assert split["software"]["value"] == pytest.approx(1.002) and split["system"]["value"] == pytest.approx(0.6 / 1.002)
    assert confirmation.to_json()["not_rebuilt"] == []


def test_the_reference_side_at_the_stored_figure_leaves_the_cause_unknown():
    """The A/B says ``same`` but the baseline's own environment runs as stored: the shortfall was the
    cell's launches' alone, which nothing here reproduces."""
    at_baseline = [99.0, 101.0, 100.0, 98.5, 101.5, 100.5, 99.5, 100.0]
    confirmation = confirmed_by(paired(at_baseline, at_baseline, PairedKind.SAME), EXACT, stored=STORED, band=BAND)
    assert confirmation.cause == "unknown" and "the stored move is not reproduced" in confirmation.message
    assert confirmation.to_json()["split"]["baseline_environment_now_verdict"] == "pass"


def test_a_part_not_rebuilt_is_named_in_the_message_and_the_json():
    rebuild = EXACT.with_missing("stack: mpi 4.1.4 -> 4.1.6")
    confirmation = confirmed_by(paired(NODE_SLOW, NODE_SLOW, PairedKind.SAME), rebuild, stored=STORED, band=BAND)
    assert confirmation.cause == "unknown" and "not rebuilt: stack: mpi 4.1.4 -> 4.1.6" in confirmation.message
    assert confirmation.to_json()["not_rebuilt"] == ["stack: mpi 4.1.4 -> 4.1.6"]


def test_a_regression_is_the_softwares_and_a_failed_ab_is_unknown():
    slower = confirmed_by(paired(NODE_SLOW, [f * 0.8 for f in NODE_SLOW], PairedKind.REGRESSED), EXACT,
                          stored=STORED, band=BAND, difference="1 commit(s): abc slower steps")
    assert slower.cause == "software" and slower.message.endswith("changed since the baseline: 1 commit(s): abc "
                                                                  "slower steps")
    failed = confirmed_by(paired(NODE_SLOW[:2], NODE_SLOW[:2], None), EXACT, stored=STORED, band=BAND)
    assert failed.cause == "unknown" and failed.message.startswith(
        "unknown: the A/B against the baseline's environment failed: the reference side's launch failed in pair 3")
    assert failed.to_json()["split"]["software"] is None


@pytest.mark.parametrize("kind, current", [(PairedKind.SAME, NODE_SLOW + [60.0]),
                                           (PairedKind.REGRESSED, [f * 0.8 for f in NODE_SLOW + [60.0]])])
def test_a_launch_that_failed_after_a_verdict_leaves_the_cause_unknown_naming_the_failure(kind, current):
    """Nine pairs, then the current side's launch failed: the pairs' verdict comes from a look the plan
    did not make (the A/B judges what it has when a launch fails), and the failure may be the change's
    own. Neither ``system`` nor ``software`` can stand on it."""
    result = paired(NODE_SLOW + [60.0], current, kind)
    result.error = ("the current side's launch failed in pair 10 (reference-first) where the reference's completed: "
                    "RuntimeError: CUDA error; 0 of the reference's and 1 of the current side's launches failed")
    confirmation = confirmed_by(result, EXACT, stored=STORED, band=BAND)
    assert confirmation.cause == "unknown"
    assert confirmation.message.startswith(
        "unknown: the A/B against the baseline's environment failed: the current side's launch failed in pair 10 "
        "(reference-first) where the reference's completed: RuntimeError: CUDA error")
