"""harness.plugin: an A/B cell's test outcome is its final verdict. Where the false-discovery control
at the session's end decides a call (a change, or ``same``), the test's outcome waits for it: the
terminal, the JUnit file and the exit status then say the same. So does a ``--confirm`` cell's,
whose confirmation stands on its A/B's call. The A/Bs are real results judged from canned launches
(as bench_tests/unit/session/test_pair_rounds.py makes them); nothing is launched.

The sessions run in a subprocess: give it this tree (``PYTHONPATH``) where the environment's
editable install points elsewhere."""
import xml.etree.ElementTree as ElementTree

A_B_CELLS = '''
from pathlib import Path

from harness.launch.runner import CellRun
from harness.session.paired import measure_pairs

CELLS = {"resnet20": (0.25, 0.001), "resnet44": (0.25, 0.02), "resnet50": (0.25, 0.045), "resnet101": (0.2, 0.3)}
"""Each cell's current step time (the reference's is 0.2 s) and repeated p-value among 4 cells at 5%: a
regression within Bonferroni's share (0.0125); one beyond it but let stand by Benjamini-Hochberg
(second smallest, within 2 x 0.0125); one held by it (third, beyond 3 x 0.0125); and a ``same``
held by it too."""


def launches(cell, current_step_s):
    def launch(side):
        step = 0.2 if side == "reference" else current_step_s
        record = {"rank": 0, "step_times": [step] * 8, "images": 128, "window_s": 8 * step, "losses": [1.0] * 8,
                  "data_wait": [0.0] * 8}
        return CellRun(cell=cell, launcher="torchrun", command=[], status="ok", records=[record], error=None,
                       wall_s=1.0, log_path=Path("log"), token="t", orphans_killed=[])
    return launch


def test_cell(dlscale_cell, dlscale):
    suite = dlscale.suite
    step_s, p_value = CELLS[dlscale_cell.model]
    result = measure_pairs(dlscale_cell, suite.prepare().reference.environment, launches(dlscale_cell, step_s),
                           suite.pair_settings, seed=1)
    result.change_p = p_value
    suite.paired_results.append(result)  # as Suite.measure_against keeps it
    dlscale._judge_against(result)
'''


def test_an_ab_cells_test_fails_exactly_where_its_final_verdict_is_regressed(pytester):
    pytester.makepyfile(test_cells=A_B_CELLS)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--junitxml", "junit.xml", "--against", "env:DLSCALE_UNIT_AB=1",
        "--launcher", "torchrun", "--rank-device", "cpu", "--frameworks", "ddp", "--loaders", "synthetic",
        "--models", "resnet20,resnet44,resnet50,resnet101", "--gpus", "1", "--no-history")
    outcomes = {case.get("name"): case for case in ElementTree.parse(pytester.path / "junit.xml").iter("testcase")}
    failed = sorted(name for name, case in outcomes.items() if case.find("failure") is not None)
    assert failed == ["test_cell[ddp-synthetic-resnet20-g1]", "test_cell[ddp-synthetic-resnet44-g1]"], \
        result.stdout.str()
    verdicts = {name: {prop.get("name"): prop.get("value") for prop in case.iter("property")}["dlscale_verdict"]
                for name, case in outcomes.items()}
    assert verdicts == {"test_cell[ddp-synthetic-resnet20-g1]": "regressed",
                        "test_cell[ddp-synthetic-resnet44-g1]": "regressed",
                        "test_cell[ddp-synthetic-resnet50-g1]": "inconclusive",
                        "test_cell[ddp-synthetic-resnet101-g1]": "inconclusive"}
    result.assert_outcomes(passed=2, failed=2)
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*: 2 of 4 call(s) (regressed, improved, same) stand; held inconclusive: "
                                 "ddp-synthetic-resnet50-g1, ddp-synthetic-resnet101-g1"])
    result.stdout.fnmatch_lines(["*ddp-synthetic-resnet44-g1 regressed against the reference: DLSCALE_UNIT_AB=1: *; "
                                 "it stands among the 4 cells compared (Benjamini-Hochberg at 5%, repeated p 0.02)"])
    assert "resnet50-g1 regressed against" not in result.stdout.str()


CONFIRMED_CELLS = '''
from pathlib import Path

from harness.judging.confirmation import Rebuild
from harness.judging.kinds import VerdictKind
from harness.judging.stats import Estimate
from harness.judging.verdicts import Reference, Verdict
from harness.launch.runner import CellRun
from harness.machine import references
from harness.session.paired import measure_pairs
from harness.session.results import CellResult

BAND = Reference(value=100.0, lower=-0.1, upper=0.1, unit="img/s")
EXACT = Rebuild(commit="a" * 40, parts=("pkg:numpy==2.4.6",))
REFERENCE_STEP_S = 16 / 60
"""The baseline environment's step on this node now: 60 img/s, 60% of the stored figure, as the cell's."""
CELLS = {"resnet20": (1.0, 0.3), "resnet44": (1.25, 0.001)}
"""Each cell's A/B against its baseline's environment: the current side's step over the reference's
and its repeated p-value among the 2 A/Bs: a ``same`` (the node's, were it to stand) beyond both of
Benjamini-Hochberg's steps, and a regression within Bonferroni's share."""


def run_of(cell, step):
    record = {"rank": 0, "step_times": [step] * 8, "images": 128, "window_s": 8 * step, "losses": [1.0] * 8,
              "data_wait": [0.0] * 8}
    return CellRun(cell=cell, launcher="torchrun", command=[], status="ok", records=[record], error=None,
                   wall_s=1.0, log_path=Path("log"), token="t", orphans_killed=[])


def launches(cell, slower):
    def launch(side):
        return run_of(cell, REFERENCE_STEP_S * (1.0 if side == "reference" else slower))
    return launch


def test_cell(dlscale_cell, dlscale, monkeypatch):
    """The cell fails its stored baseline (60% of it); --confirm's A/B is measured from canned launches."""
    suite = dlscale.suite
    slower, p_value = CELLS[dlscale_cell.model]

    def measure(cell, on_progress=None):
        verdict = Verdict(kind=VerdictKind.FAIL, message="throughput 60.0 img/s, 40.0% below the baseline",
                          metric="throughput")
        return CellResult(cell=cell, runs=[run_of(cell, REFERENCE_STEP_S)], config_hash="h", verdicts=[verdict],
                          throughput=Estimate(value=60.0, low=59.0, high=61.0))

    def pairs(cell, reference, launcher, on_progress, current_runs=None):
        result = measure_pairs(cell, reference, launches(cell, slower), suite.pair_settings, seed=1)
        result.change_p = p_value
        return result, None

    monkeypatch.setattr(suite, "measure", measure)
    monkeypatch.setattr(suite.prepared.baselines, "reference", lambda cell_id, metric, hardware=None: BAND)
    monkeypatch.setattr(suite.prepared.baselines, "entry", lambda cell_id, hardware=None: {})
    monkeypatch.setattr(suite.confirming_part, "baseline_environment",
                        lambda result: (EXACT, suite.prepared.current_environment))
    monkeypatch.setattr(suite.launching, "launcher_of", lambda reference: suite.prepared.launcher)
    monkeypatch.setattr(suite.against, "pairs", pairs)
    monkeypatch.setattr(references, "difference", lambda reference, current: {})
    dlscale.check(dlscale_cell)
'''


def test_a_confirmed_cells_test_waits_for_the_control_where_its_confirmation_stands_on_a_call(pytester):
    """With ``--system-changes pass`` a throughput fail the A/B puts on the node passes. resnet20's
    A/B says ``same`` and the baseline's own environment reproduces the fail: ``system``, until the
    control across the session's two A/Bs holds that ``same`` back; its confirmation is then
    ``unknown``, and its test fails at the session's end, saying why. resnet44's regression stands
    at once (``software``): its test fails as it ends."""
    pytester.makepyfile(test_cells=CONFIRMED_CELLS)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--junitxml", "junit.xml", "--confirm", "--system-changes", "pass",
        "--launcher", "torchrun", "--rank-device", "cpu", "--frameworks", "ddp", "--loaders", "synthetic",
        "--models", "resnet20,resnet44", "--gpus", "1", "--no-history")
    outcomes = {case.get("name"): case for case in ElementTree.parse(pytester.path / "junit.xml").iter("testcase")}
    failures = {name: case.find("failure").get("message") for name, case in outcomes.items()
                if case.find("failure") is not None}
    assert sorted(failures) == ["test_cell[ddp-synthetic-resnet20-g1]", "test_cell[ddp-synthetic-resnet44-g1]"], \
        result.stdout.str()
    held = failures["test_cell[ddp-synthetic-resnet20-g1]"]
    assert "confirmed: unknown: the A/B against the baseline's environment is inconclusive" in held
    assert ("same held inconclusive: the call does not stand among the 2 A/Bs of the session (Benjamini-Hochberg "
            "at 5%, repeated p 0.3)") in held
    assert "confirmed: software: the current environment is slower" in failures["test_cell[ddp-synthetic-resnet44-g1]"]
    result.assert_outcomes(failed=2)
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*ddp-synthetic-resnet20-g1: fail confirmed system by an A/B same; whether that call "
                                 "stands among the session's A/Bs, and the test's outcome with it, is decided at the "
                                 "session's end"])
