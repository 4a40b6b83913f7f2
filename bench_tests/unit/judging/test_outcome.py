"""harness.judging.outcome: when a judged cell's test fails, and what it says."""
from harness.judging.kinds import PairedKind, VerdictKind
from harness.judging.outcome import Confirmed, FailureRule, decided_line, failure_message, judged_line, to_confirm
from harness.judging.verdicts import Verdict

CELL = "ddp-synthetic-resnet50-g2"
PASS = Verdict(kind=VerdictKind.PASS, message="throughput +1.0%")
FAIL = Verdict(kind=VerdictKind.FAIL, message="throughput -20.0%", metric="throughput")
EFFICIENCY_FAIL = Verdict(kind=VerdictKind.FAIL, message="efficiency -30.0%", metric="efficiency")
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


def test_system_changes_pass_never_lets_a_software_regression_or_an_efficiency_fail_pass():
    """Only a throughput fail whose cause is ``system`` passes: an ``unknown`` (the stack could not
    be rebuilt, say) fails as a software regression does, and E_G, whose two throughputs come from
    one session, is not the node's to explain."""
    rule = FailureRule(confirm=True, system_changes="pass")
    unknown = Confirmed(cause="unknown", message="unknown: not rebuilt: stack: mpi 4.1.4 -> 4.1.6")
    assert failure_message(CELL, [[FAIL]], rule, unknown) == (
        f"{CELL} regressed: throughput -20.0%; confirmed: unknown: not rebuilt: stack: mpi 4.1.4 -> 4.1.6")
    assert failure_message(CELL, [[FAIL, EFFICIENCY_FAIL]], rule, SYSTEM) == (
        f"{CELL} regressed: efficiency -30.0%; confirmed: system: the node changed (which excuses a throughput "
        "fail, never an efficiency fail)")
    assert failure_message(CELL, [[FAIL, EFFICIENCY_FAIL]], rule, SOFTWARE).count("confirmed: software") == 2


def test_a_stale_cell_the_node_explains_passes_strict_verdicts_only_when_the_rule_says_so():
    rule = FailureRule(confirm=True, strict_verdicts=True)
    assert failure_message(CELL, [[STALE]], rule, SYSTEM).startswith(f"{CELL} stale (--strict-verdicts)")
    assert failure_message(CELL, [[STALE]], FailureRule(confirm=True, strict_verdicts=True, system_changes="pass"),
                           SYSTEM) is None
    assert failure_message(CELL, [[STALE]], FailureRule(confirm=True, strict_verdicts=True, system_changes="pass"),
                           SOFTWARE)


def test_an_unjudged_cell_fails_only_under_strict_verdicts_and_never_while_recording():
    assert failure_message(CELL, [[STALE]], FailureRule()) is None
    assert failure_message(CELL, [[STALE]], FailureRule(strict_verdicts=True)) == (
        f"{CELL} stale (--strict-verdicts): baseline measured on other hardware")
    assert failure_message(CELL, [[STALE]], FailureRule(strict_verdicts=True, update_baselines=True)) is None
    assert failure_message(CELL, [[STALE]], FailureRule(strict_verdicts=True), SYSTEM).endswith(
        "; confirmed: system: the node changed")


def test_only_a_verdict_against_a_baseline_is_confirmed_and_never_while_recording():
    rule = FailureRule(confirm=True)
    assert [kind for kind in VerdictKind if to_confirm(kind, rule)] == [  # stale: an A/B can still tell software
        VerdictKind.FAIL, VerdictKind.INCONCLUSIVE, VerdictKind.STALE, VerdictKind.MACHINE_DIFFERS]
    assert not to_confirm("error", rule)
    assert not to_confirm(VerdictKind.FAIL, FailureRule()) and not to_confirm(
        VerdictKind.FAIL, FailureRule(confirm=True, update_baselines=True))


def test_the_last_line_says_how_many_cells_were_judged_and_the_next_step_where_none_was():
    """A machine whose cells are all stale or machine-differs ends green with nothing judged: the
    session's last line says so, and what to do, in one line."""
    nothing = [VerdictKind.MACHINE_DIFFERS] * 20 + [VerdictKind.STALE] * 20
    assert judged_line(nothing) == (
        "dlscale: 0 of 40 cells judged (20 stale, 20 machine-differs): record this machine's baselines with "
        "--update-baselines, or compare against a reference with --against REF, or --confirm")
    assert judged_line(["no-baseline", "no-baseline"]) == (  # nothing --confirm could put to an A/B
        "dlscale: 0 of 2 cells judged (2 no-baseline): record this machine's baselines with "
        "--update-baselines, or compare against a reference with --against REF")
    assert judged_line(nothing, confirm=True).endswith("--update-baselines, or compare against a reference with "
                                                       "--against REF")
    assert judged_line(["machine-differs"], confirm=True, causes=["system"]) == (  # the nightly on a slower node
        "dlscale: 0 of 1 cells judged (1 machine-differs); confirmed by an A/B: 1 system: record this machine's "
        "baselines with --update-baselines, or compare against a reference with --against REF")
    assert judged_line(["pass", "fail", "stale"], confirm=True, causes=["unknown", "software"]) == \
        "dlscale: 2 of 3 cells judged (1 stale); confirmed by an A/B: 1 software, 1 unknown"
    assert judged_line(nothing, recorded=True) == (
        "dlscale: 0 of 40 cells judged (20 stale, 20 machine-differs): this run recorded this machine's baselines "
        "(--update-baselines); the next one judges by them")
    assert judged_line([VerdictKind.STALE] * 6, recorded=True, kept=2) == (  # two too uncertain to record
        "dlscale: 0 of 6 cells judged (6 stale): this run recorded 4 of their baselines on this machine "
        "(--update-baselines; 2 kept their old ones, why above); the next one judges by those")
    assert judged_line([VerdictKind.STALE] * 2, recorded=True, kept=2) == (
        "dlscale: 0 of 2 cells judged (2 stale): --update-baselines recorded none of their baselines (why above), "
        "so the next run judges none")
    assert judged_line(["pass"] * 37 + ["fail", "no-baseline", "stale"]) == \
        "dlscale: 38 of 40 cells judged (1 stale, 1 no-baseline)"
    assert judged_line(["pass", "inconclusive", "faster"]) == "dlscale: 3 of 3 cells judged"
    assert judged_line(["error", "error"]) == "dlscale: 0 of 2 cells judged (2 error)"  # those fail their tests
    assert "\n" not in judged_line(nothing)


def test_an_ab_session_that_decided_nothing_ends_on_a_line_that_says_so_and_what_to_do():
    """An ``--against`` session judges no cell against a baseline: its last line counts the A/Bs that
    decided, and where none did (inconclusive, or a launch failed) says what would."""
    assert decided_line([PairedKind.INCONCLUSIVE, PairedKind.INCONCLUSIVE]) == (
        "dlscale: 0 of 2 cells decided by an A/B (2 inconclusive): more pairs (--max-pairs, --pairs-budget) or a "
        "quieter node could decide the inconclusive ones, as each says above")
    assert decided_line(["error", PairedKind.INCONCLUSIVE]) == (
        "dlscale: 0 of 2 cells decided by an A/B (1 error, 1 inconclusive): more pairs (--max-pairs, --pairs-budget) "
        "or a quieter node could decide the inconclusive ones, as each says above; each failed one names its failure "
        "above: mend it and compare again")
    assert decided_line(["error"]) == ("dlscale: 0 of 1 cells decided by an A/B (1 error): each failed one names its "
                                       "failure above: mend it and compare again")
    assert decided_line([PairedKind.SAME, PairedKind.REGRESSED, PairedKind.INCONCLUSIVE]) == \
        "dlscale: 2 of 3 cells decided by an A/B (1 inconclusive)"
    assert decided_line([PairedKind.IMPROVED]) == "dlscale: 1 of 1 cells decided by an A/B"
