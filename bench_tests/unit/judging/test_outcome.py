"""harness.judging.outcome: when a judged cell's test fails, and what it says."""
from harness.judging.kinds import VerdictKind
from harness.judging.outcome import Confirmed, FailureRule, failure_message, to_confirm
from harness.judging.verdicts import Verdict

CELL = "ddp-synthetic-resnet50-g2"
PASS = Verdict(kind=VerdictKind.PASS, message="throughput +1.0%")
FAIL = Verdict(kind=VerdictKind.FAIL, message="throughput -20.0%")
STALE = Verdict(kind=VerdictKind.STALE, message="baseline measured on other hardware")
SYSTEM = Confirmed(cause="system", message="system: the node changed")
SOFTWARE = Confirmed(cause="software", message="software: current/reference 0.80")


def test_a_fail_fails_the_test_naming_each_repeat_and_what_confirmed_it():
    rule = FailureRule()
    assert failure_message(CELL, [[PASS]], rule) is None
    assert failure_message(CELL, [[FAIL]], rule) == f"{CELL} regressed: throughput -20.0%"
    assert failure_message(CELL, [[FAIL], [PASS], [FAIL]], rule) == (
        f"{CELL} regressed: throughput -20.0% (repeat 1); throughput -20.0% (repeat 3)")
    assert failure_message(CELL, [[FAIL]], rule, SOFTWARE) == (
        f"{CELL} regressed: throughput -20.0%; confirmed: software: current/reference 0.80")
    assert failure_message(CELL, [[FAIL]], FailureRule(accept_regressions=True)) is None


def test_a_fail_the_node_caused_passes_only_when_the_rule_says_so():
    assert "confirmed: system" in failure_message(CELL, [[FAIL]], FailureRule(confirm=True), SYSTEM)
    assert failure_message(CELL, [[FAIL]], FailureRule(confirm=True, system_changes="pass"), SYSTEM) is None
    assert failure_message(CELL, [[FAIL]], FailureRule(confirm=True, system_changes="pass"), SOFTWARE)


def test_an_unjudged_cell_fails_only_under_strict_verdicts_and_never_while_recording():
    assert failure_message(CELL, [[STALE]], FailureRule()) is None
    assert failure_message(CELL, [[STALE]], FailureRule(strict_verdicts=True)) == (
        f"{CELL} stale (--strict-verdicts): baseline measured on other hardware")
    assert failure_message(CELL, [[STALE]], FailureRule(strict_verdicts=True, update_baselines=True)) is None
    assert failure_message(CELL, [[STALE]], FailureRule(strict_verdicts=True), SYSTEM).endswith(
        "; confirmed: system: the node changed")


def test_only_a_verdict_against_a_baseline_is_confirmed_and_never_while_recording():
    rule = FailureRule(confirm=True)
    assert [kind for kind in VerdictKind if to_confirm(kind, rule)] == [
        VerdictKind.FAIL, VerdictKind.INCONCLUSIVE, VerdictKind.MACHINE_DIFFERS]
    assert not to_confirm("error", rule)
    assert not to_confirm(VerdictKind.FAIL, FailureRule()) and not to_confirm(
        VerdictKind.FAIL, FailureRule(confirm=True, update_baselines=True))
