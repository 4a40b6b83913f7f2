"""harness.session.discoveries (through the session): the false-discovery control over every A/B a session ran. A ``same`` is a
call like a change (it claims the change lies within the minimum effect), and the A/Bs ``--confirm``
runs enter the control too: a confirmation that stood on a call the control holds back reads
``unknown``, saying why. The A/Bs are judged results (or canned ones with the repeated p-value
set, as bench_tests/unit/test_plugin.py sets it); nothing is launched."""
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.judging.confirmation import Rebuild
from harness.judging.kinds import PairedKind
from harness.judging.paired import Pair, PairedVerdict
from harness.judging.stats import Estimate
from harness.judging.verdicts import Reference
from harness.launch.runner import CellRun
from harness.machine import references
from harness.machine.references import Environment
from harness.rank.cell import Cell
from harness.session.paired import PairedResult, PairSettings
from harness.session.results import CellResult
from harness.session.suite import Suite, SuiteOptions

REFERENCE = Environment(label="reference: git aaaaaaaaaa", source=Path("."), launch_environment={}, commit="a" * 40)
BAND = Reference(value=100.0, lower=-0.1, upper=0.1, unit="img/s")
EXACT = Rebuild(commit="a" * 40, parts=("pkg:numpy==2.4.6",))
NODE_SLOW = [60.0, 61.0, 59.0, 60.5, 59.5, 60.0, 61.5, 58.5]
"""The baseline environment's launches on this node now: 60% of its stored figure, as the cell's."""


def cell(model: str) -> Cell:
    return Cell(framework="ddp", loader="synthetic", model=model, ranks=1)


def ab(model: str, kind: PairedKind | None, change_p: float, current_over_reference: float = 1.0) -> PairedResult:
    """An A/B whose pairs say ``kind`` with repeated p-value ``change_p``; its reference side's
    launches at :data:`NODE_SLOW`."""
    pairs = [Pair(order="reference-first" if i % 2 else "current-first", reference=r, current=r * current_over_reference)
             for i, r in enumerate(NODE_SLOW)]
    ratio = current_over_reference
    verdict = PairedVerdict(kind=kind, ratio=Estimate(value=ratio, low=ratio * 0.99, high=ratio * 1.01),
                            p_value=0.008, pairs=len(pairs), min_effect=0.03) if kind else None
    launch_log = [{"side": side, "pair": index, "status": "ok", "throughput_as_stored": figure, "wall_s": 4.0,
                   "window_s": 0.5}
                  for index, pair in enumerate(pairs) for side, figure in (("reference", pair.reference),
                                                                            ("current", pair.current))]
    return PairedResult(cell=cell(model), reference=REFERENCE, pairs=pairs, looks=[8], verdict=verdict,
                        launch_log=launch_log, change_p=change_p,
                        error=None if kind else "the reference side's launch failed in pair 3")


def suite_with(monkeypatch, **options) -> Suite:
    """A suite whose session is prepared (a baseline band for every cell, the current environment)
    without looking at the machine."""
    suite = Suite(SuiteOptions(**options))
    baselines = SimpleNamespace(reference=lambda cell_id, metric, hardware=None: BAND, entry=lambda cell_id, hardware=None: {})
    suite.prepared = SimpleNamespace(baselines=baselines, current_environment=REFERENCE)
    suite.preparation.__dict__["pair_settings"] = PairSettings(first=8, most=32, min_effect=0.03, budget_s=3600)
    monkeypatch.setattr(references, "difference", lambda reference, current: {})
    return suite


def stored_fail(model: str) -> CellResult:
    """A cell that ran at 60% of its stored figure."""
    run = CellRun(cell=cell(model), launcher="torchrun", command=[], status="ok", records=[], error=None, wall_s=1.0,
                  log_path=Path("log"), token="t", orphans_killed=[])
    return CellResult(cell=cell(model), runs=[run], config_hash="h", throughput=Estimate(value=60.0, low=59.0,
                                                                                          high=61.0))


def confirmed(suite: Suite, monkeypatch, paired: PairedResult) -> dict:
    """``Suite.confirm`` of a stored fail whose A/B against the rebuilt baseline environment gives ``paired``."""
    monkeypatch.setattr(suite.confirming_part, "baseline_environment", lambda result: (EXACT, REFERENCE))
    monkeypatch.setattr(suite.launching, "launcher_of", lambda reference: None)
    monkeypatch.setattr(suite.against, "pairs", lambda *args, **kwargs: (paired, None))
    result = stored_fail(paired.cell.model)
    suite.confirm(result)
    return result


def test_a_same_is_a_call_that_must_stand_among_the_cells_compared(monkeypatch):
    """Three A/Bs: a regression (p 0.001) and a ``same`` (p 0.02) stand by Benjamini-Hochberg at 5%
    among 3 (within 1 x and 2 x 0.05/3); a ``same`` at p 0.3 does not, and reads inconclusive."""
    suite = suite_with(monkeypatch, against=("env:X=1",))
    suite.paired_results.extend([ab("resnet20", PairedKind.REGRESSED, 0.001, 0.8),
                                 ab("resnet44", PairedKind.SAME, 0.02), ab("resnet50", PairedKind.SAME, 0.3)])
    held = suite.control_false_discoveries(3)
    assert [result.verdict_kind for result in suite.paired_results] == ["regressed", "same", "inconclusive"]
    assert [result.cell.model for result in held] == ["resnet50"]
    assert suite.paired_results[2].to_json()["pairs_verdict"] == "same"
    assert suite.paired_results[2].false_discovery == {"procedure": "Benjamini-Hochberg", "rate": 0.05, "cells": 3,
                                                       "repeated_p": 0.3, "stands": False}


def test_a_same_stands_at_once_only_within_bonferronis_share(monkeypatch):
    suite = suite_with(monkeypatch, against=("env:X=1",))
    assert suite.change_surely_stands(ab("resnet20", PairedKind.SAME, 0.01), 4)
    assert not suite.change_surely_stands(ab("resnet20", PairedKind.SAME, 0.02), 4)
    assert suite.change_surely_stands(ab("resnet20", PairedKind.INCONCLUSIVE, 1.0), 4)


def test_a_confirmation_whose_ab_call_does_not_stand_reads_unknown(monkeypatch):
    """Two cells confirmed: one A/B regressed at p 0.04, the other inconclusive. Alone it would be
    ``software``; among the two A/Bs the session ran it does not stand (beyond 0.05/2, and the other
    calls nothing), so the cause is ``unknown`` and says why; the A/B keeps its pairs' verdict."""
    suite = suite_with(monkeypatch, confirm=True)
    slower = confirmed(suite, monkeypatch, ab("resnet20", PairedKind.REGRESSED, 0.04, 0.8))
    unclear = confirmed(suite, monkeypatch, ab("resnet44", PairedKind.INCONCLUSIVE, 1.0))
    assert slower.confirmation["cause"] == "software" and unclear.confirmation["cause"] == "unknown"
    held = suite.control_false_discoveries(0)
    assert [result.cell.model for result in held] == ["resnet20"]
    assert slower.confirmation["cause"] == "unknown"
    assert slower.confirmation["message"].startswith("unknown: the A/B against the baseline's environment is "
                                                     "inconclusive (A/B inconclusive: current/reference 0.800")
    assert ("regressed held inconclusive: the call does not stand among the 2 A/Bs of the session "
            "(Benjamini-Hochberg at 5%, repeated p 0.04)") in slower.confirmation["message"]
    kept = slower.confirmation["paired"]
    assert kept["pairs_verdict"] == "regressed" and kept["verdict"] == "inconclusive"
    assert kept["false_discovery"]["stands"] is False
    assert unclear.confirmation["cause"] == "unknown" and "held" not in unclear.confirmation["message"]


def test_a_system_cause_from_a_same_that_does_not_stand_is_unknown(monkeypatch):
    """The A/B says ``same`` and the baseline's own environment reproduces the shortfall: ``system``,
    until the control holds the ``same`` back (p 0.3 among two A/Bs)."""
    suite = suite_with(monkeypatch, confirm=True)
    node = confirmed(suite, monkeypatch, ab("resnet20", PairedKind.SAME, 0.3))
    software = confirmed(suite, monkeypatch, ab("resnet44", PairedKind.REGRESSED, 0.001, 0.8))
    assert node.confirmation["cause"] == "system" and software.confirmation["cause"] == "software"
    suite.control_false_discoveries(0)
    assert node.confirmation["cause"] == "unknown" and "same held inconclusive" in node.confirmation["message"]
    assert software.confirmation["cause"] == "software"
    assert software.confirmation["paired"]["false_discovery"] == {
        "procedure": "Benjamini-Hochberg", "rate": 0.05, "cells": 2, "repeated_p": 0.001, "stands": True}


def test_one_ab_is_not_controlled(monkeypatch):
    suite = suite_with(monkeypatch, confirm=True)
    alone = confirmed(suite, monkeypatch, ab("resnet20", PairedKind.SAME, 0.04))
    assert suite.control_false_discoveries(0) == [] and alone.confirmation["cause"] == "system"
    assert alone.confirmation["paired"]["false_discovery"] is None


@pytest.mark.parametrize("kind", [PairedKind.REGRESSED, PairedKind.SAME])
def test_a_confirming_ab_that_surely_stands_is_final_at_once(monkeypatch, kind):
    suite = suite_with(monkeypatch, confirm=True)
    assert suite.change_surely_stands(ab("resnet20", kind, 0.01), 5)
    assert not suite.change_surely_stands(ab("resnet20", kind, 0.011), 5)
