"""harness.plugin: an A/B cell's test outcome is its final verdict. Where the false-discovery control
at the session's end decides a change called, the test's outcome waits for it: the terminal, the
JUnit file and the exit status then say the same. The four A/Bs are real results judged from canned
launches (as bench_tests/unit/session/test_pair_rounds.py makes them); nothing is launched."""
import xml.etree.ElementTree as ElementTree

A_B_CELLS = '''
from pathlib import Path

from harness.launch.runner import CellRun
from harness.session.paired import measure_pairs

REPEATED_P = {"resnet20": 0.001, "resnet44": 0.02, "resnet50": 0.045, "resnet101": None}
"""Each cell's repeated p-value among 4 cells at 5%: within Bonferroni's share (0.0125); beyond it but
let stand by Benjamini-Hochberg (second smallest, within 2 x 0.0125); held by it (third, beyond
3 x 0.0125); and a cell whose pairs called no change."""


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
    p_value = REPEATED_P[dlscale_cell.model]
    result = measure_pairs(dlscale_cell, suite.prepare().reference.environment,
                           launches(dlscale_cell, 0.2 if p_value is None else 0.25), suite.pair_settings, seed=1)
    if p_value is not None:
        result.change_p = p_value
    suite.paired_results.append(result)  # as Suite.measure_against keeps it
    dlscale._judge_against(result)
'''


def test_an_ab_cells_test_fails_exactly_where_its_final_verdict_is_regressed(pytester):
    pytester.makepyfile(test_cells=A_B_CELLS)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--junitxml", "junit.xml", "--against", "env:DLSCALE_UNIT_AB=1",
        "--launcher", "torchrun", "--device", "cpu", "--frameworks", "ddp", "--loaders", "synthetic",
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
                        "test_cell[ddp-synthetic-resnet101-g1]": "same"}
    result.assert_outcomes(passed=2, failed=2)
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*ddp-synthetic-resnet44-g1 regressed against the reference: DLSCALE_UNIT_AB=1: *; "
                                 "it stands among the 4 cells compared (Benjamini-Hochberg at 5%, repeated p 0.02)"])
    assert "resnet50-g1 regressed against" not in result.stdout.str()
