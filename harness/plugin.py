"""dlscale's pytest plugin: command-line options, the cell matrix as parametrization of any test
that takes a ``dlscale_cell`` (or ``dlscale_accuracy_cell``) argument, the ``dlscale`` fixture that
measures a cell, progress lines, the summary table and the baseline update at the end of the
session.

Loaded into every pytest run of the environment (its entry point), it stays out of the way of
sessions that select no dlscale cell: their tests are not parametrized, no signal handler is
installed, nothing is written and nothing is printed."""
from __future__ import annotations

import argparse
import collections
import dataclasses
import os
import time
from pathlib import Path

import pytest
from _pytest.runner import runtestprotocol  # pytest's own protocol with its reports returned, not told

from harness.common.interrupts import INTERRUPTED_EXIT_STATUS, INTERRUPTS
from harness.config.renames import RENAMED, DeprecatedOption
from harness.config.site_settings import resolve
from harness.judging.kinds import PairedKind, VerdictKind
from harness.judging.outcome import Confirmed, FailureRule, decided_line, failure_message, judged_line, to_confirm
from harness.judging.paired import CALLS
from harness.judging.sequential import RULE_CITATIONS, planned_looks
from harness.judging.servers import server_rows
from harness.judging.work import WorkChange, baseline_reading
from harness.machine.references import describe_difference
from harness.report.framework_comparison import PUBLISHED_NOTES, REFERENCE_FRAMEWORK, comparison_rows, framework_ratios
from harness.report.html import COLLECTIVES_FILE, junit_properties, write_report
from harness.report.scaling_check import session_lines as scaling_model_lines
from harness.report.tables import accuracy_rows, format_table, paired_rows, summary_rows
from harness.session.cli import OPTIONS, REPEATABLE, SWITCH
from harness.session.deadline import CUT_FOR_TIME_EXIT_STATUS, Deadline, measured_durations, session_deadline
from harness.session.instructions import instruction_lines
from harness.session.paired import PairedResult
from harness.session.results import CellResult
from harness.session.suite import Suite, SuiteError, SuiteOptions
from harness.store.baselines import BaselineError
from harness.store.sessiondir import expand, point_latest, session_name

SUITE_KEY = pytest.StashKey[Suite]()
SESSION_KEY = pytest.StashKey[pytest.Session]()
TERMINAL_FD_KEY = pytest.StashKey[int]()
INTERRUPT_TOLD_KEY = pytest.StashKey[bool]()
AB_CELLS_KEY = pytest.StashKey[int]()
"""How many cells the session's A/Bs compare: the false-discovery control's count."""
DEADLINE_KEY = pytest.StashKey[Deadline]()
"""Where the session has a deadline (harness.session.deadline): it, with its cells' past durations."""
AT_THE_END_KEY = pytest.StashKey[PairedResult]()
"""On an A/B cell's test whose outcome the false-discovery control at the session's end decides: its A/B."""


@dataclasses.dataclass(frozen=True)
class ConfirmedAtTheEnd:
    """On a confirmed cell's test whose outcome waits for the false-discovery control, which decides
    whether the call its confirmation stands on stands: what its outcome is decided from."""
    repeats: list
    """The verdicts of each of its repeats."""
    rule: FailureRule
    result: CellResult
    """Its last repeat, whose ``confirmation`` the control may conclude again."""


CONFIRMED_AT_THE_END_KEY = pytest.StashKey[ConfirmedAtTheEnd]()
"""On a ``--confirm`` cell's test whose outcome the false-discovery control at the session's end decides."""
HELD_KEY = pytest.StashKey[list]()
"""Those tests and their reports, held until the control has decided them: ``(item, reports)``."""
CELL_FIXTURE, ACCURACY_CELL_FIXTURE = "dlscale_cell", "dlscale_accuracy_cell"
"""The arguments a test takes to be parametrized by the matrix: names no other project uses."""
def pytest_addoption(parser: pytest.Parser) -> None:
    """Every option (harness.session.cli), a renamed one's old name as a hidden deprecated alias
    where no other plugin adds it (harness.config.renames), and each site setting's ini key."""
    group = parser.getgroup("dlscale", "dlscale scaling suite")
    for option in OPTIONS:
        help_text = (option.full_help() + option.site_help()).replace("%", "%%")  # argparse formats help with %
        _add_option(group, option, option.flag, f"dlscale_{option.dest}", help_text)
        if option.alias:
            _add_option(group, option, option.alias, _FORMERLY + option.dest, argparse.SUPPRESS)
        if option.site:
            parser.addini(option.ini_key, f"dlscale: {option.flag} for every session of the project (the command line "
                          f"wins over it, it over ${option.environment_variable})", default="")


_FORMERLY = "dlscale_formerly_"
"""The config name of a renamed option's old name: ``dlscale_formerly_<dest>``."""


def _add_option(group, option, flag: str, dest: str, help_text: str) -> None:
    if option.kind == SWITCH:
        group.addoption(flag, dest=dest, action="store_true", help=help_text)
    elif option.kind == REPEATABLE:
        group.addoption(flag, dest=dest, action="append", default=[], metavar=option.value_name,
                        help=help_text if help_text == argparse.SUPPRESS else f"{help_text} (repeatable)")
    else:
        group.addoption(flag, dest=dest, type=option.kind, default=None, metavar=option.value_name, help=help_text)


def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    """A renamed option's old name that no plugin took (one another plugin adds, so that dlscale
    keeps no alias of it) is a usage error naming the new name, not argparse's bare "unrecognized
    arguments"."""
    _, unknown = parser.parse_known_and_unknown_args(args)
    for entry in RENAMED:
        if not entry.kept_as_alias and any(arg == entry.old or arg.startswith(entry.old + "=") for arg in unknown):
            raise pytest.UsageError(f"dlscale's {entry.old} is now {entry.new} ({entry.why})")


def _setting(config: pytest.Config, option) -> object:
    """An option's value: the command line's (its old name's, warning, where the new one is not
    given), else for a site setting the ini file's, else the environment's; None (False for a
    switch) where none gives it."""
    value = config.getoption(f"dlscale_{option.dest}")
    if option.alias and (former := config.getoption(_FORMERLY + option.dest)) not in (None, False):
        config.issue_config_time_warning(DeprecatedOption(option.renamed.warning()), stacklevel=2)
        value = former if value in (None, False) else value
    if not option.site:
        return value
    try:
        given = resolve(option.dest, option.kind, value, config.getini(option.ini_key), os.environ,
                        ini_dir=Path(config.inipath).parent if config.inipath else config.rootpath,
                        variable=option.environment_variable)
    except ValueError as error:
        raise pytest.UsageError(str(error)) from None
    return given and given.value


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "scaling: a measured cell launched as a real multi-process job")
    config.addinivalue_line("markers", "accuracy: a short real training judged by its validation accuracy")
    # Output capture is suspended while plugins are configured: this is the terminal (or log) the
    # interrupt notices must reach from a signal handler, past any capture.
    config.stash[TERMINAL_FD_KEY] = os.dup(2)
    settings = {option.dest: _setting(config, option) for option in OPTIONS if option.kind != REPEATABLE}
    values = {option.dest: settings[option.dest] for option in OPTIONS if option.kind not in (SWITCH, REPEATABLE)}
    values = {key: value for key, value in values.items() if value is not None}
    session = session_name()
    root = project_root(config.inipath, config.invocation_params.dir)
    values.setdefault("baselines_dir", root / "baselines")
    values.setdefault("history_dir", root / "history")
    results_dir = values.pop("results_dir", None) or root / "results"
    values["workdir"] = results_dir / session / "cells"
    values["results_json"] = expand(values.get("results_json"), session) or results_dir / session / "results.json"
    values["report"] = expand(values.get("report"), session)
    if config.getoption("dlscale_no_history"):
        values["history_dir"] = None
    values["launch_env"] = tuple(config.getoption("dlscale_launch_env"))
    values["against"] = tuple(config.getoption("dlscale_against"))
    values["confirm"] = config.getoption("dlscale_confirm")
    values["yardstick"] = not config.getoption("dlscale_no_yardstick")
    values["count_work"] = not config.getoption("dlscale_no_count_work")
    values["count_instructions"] = config.getoption("dlscale_count_instructions")
    values["accept_regressions"] = config.getoption("dlscale_accept_regressions")
    values["channels_last"] = config.getoption("dlscale_channels_last")
    values["compile"] = settings["compile"]
    values["duet"] = config.getoption("dlscale_duet")
    try:
        config.stash[SUITE_KEY] = Suite(SuiteOptions(update_baselines=config.getoption("dlscale_update_baselines"),
                                                     **values))
    except SuiteError as error:
        raise pytest.UsageError(str(error)) from None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    suite = metafunc.config.stash[SUITE_KEY]
    for fixture, cells in ((CELL_FIXTURE, suite.cells), (ACCURACY_CELL_FIXTURE, suite.accuracy_cells)):
        if fixture not in metafunc.fixturenames:
            continue
        params = []
        for cell in cells():
            try:
                reason = suite.skip_reason(cell)
            except SuiteError as error:  # whether the allocation has GPUs could not be asked
                raise pytest.UsageError(str(error)) from None
            marks = [pytest.mark.skip(reason=reason)] if reason else []
            params.append(pytest.param(cell, id=cell.id, marks=marks))
        metafunc.parametrize(fixture, params)


def _selected_cells(items: list[pytest.Item]) -> bool:
    return any({CELL_FIXTURE, ACCURACY_CELL_FIXTURE} & set(item.callspec.params)
               for item in items if hasattr(item, "callspec"))


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[SESSION_KEY] = session


def pytest_collection_finish(session: pytest.Session) -> None:
    session.config.stash[AB_CELLS_KEY] = sum(CELL_FIXTURE in getattr(item, "callspec", None).params
                                             and item.get_closest_marker("skip") is None
                                             for item in session.items if hasattr(item, "callspec"))
    if _selected_cells(session.items):
        # Ctrl-C, and SIGTERM from a batch system, as harness.common.interrupts describes
        # (docs/usage.md, "Stopping a run").
        INTERRUPTS.install(session.config.stash[TERMINAL_FD_KEY])
        suite = session.config.stash[SUITE_KEY]
        try:
            suite.prepare()
        except (SuiteError, BaselineError) as error:
            raise pytest.UsageError(str(error)) from None
        session_dir = suite.options.workdir.parent
        if session.config.option.collectonly:
            return
        try:
            point_latest(session_dir.parent, session_dir)
        except OSError as error:
            raise pytest.UsageError(f"--results-dir {session_dir.parent}: cannot write the session's directory "
                                    f"there ({error.strerror}: {error.filename})") from None
        _keep_deadline(session, suite)


def _keep_deadline(session: pytest.Session, suite: Suite) -> None:
    """The session's deadline, with its cells' past durations, where it has one and measures cells
    against their baselines (an A/B's pairs take their own time, bounded by --pairs-budget)."""
    options, system = suite.options, suite.prepared.system
    if options.against:
        return
    try:
        deadline = session_deadline(options.deadline, options.deadline_reserve, os.environ, time.time(),
                                    history=options.history_dir and options.history_dir / f"{system}.jsonl",
                                    results_json=options.results_json, system=system,
                                    cell_ids=[cell.id for cell in map(_cell_of, session.items) if cell])
    except ValueError as error:
        raise pytest.UsageError(f"--deadline: {error}") from None
    if deadline is None:
        return
    session.config.stash[DEADLINE_KEY] = deadline
    if reporter := session.config.pluginmanager.get_plugin("terminalreporter"):
        reporter.write_line(deadline.words(time.time()))


def _cell_of(item: pytest.Item):
    """The cell of the matrix a test measures, or None."""
    params = item.callspec.params if hasattr(item, "callspec") else {}
    return params.get(CELL_FIXTURE) or params.get(ACCURACY_CELL_FIXTURE)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A cell that cannot finish before the session's deadline is not started: skipped, and named
    in the results file (harness.session.deadline)."""
    deadline, cell = item.config.stash.get(DEADLINE_KEY, None), _cell_of(item)
    if deadline is None or cell is None:
        return
    suite = item.config.stash[SUITE_KEY]
    reason = deadline.reason_to_leave(cell.id, measured_durations(suite.results, suite.accuracy_results), time.time())
    if reason:
        suite.leave_unmeasured_for_time(cell.id)
        pytest.skip(reason)


class _Progress:
    """Prints a cell's progress lines past pytest's output capture, at most every few seconds."""

    def __init__(self, config: pytest.Config, every_s: float = 5.0):
        self.config = config
        self.every_s = every_s
        self.last = 0.0

    def __call__(self, line: str) -> None:
        now = time.monotonic()
        if now - self.last < self.every_s:
            return
        self.last = now
        self.always(line)

    def always(self, line: str) -> None:
        """A line that must not be dropped for the pace (an A/B's counted work, its looks)."""
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        capture = self.config.pluginmanager.get_plugin("capturemanager")
        if reporter is None or capture is None:
            return
        with capture.global_and_fixture_disabled():
            reporter.write_line(f"  [dlscale] {line}")


@pytest.fixture
def dlscale(request: pytest.FixtureRequest) -> "Measure":
    return Measure(request.config, request.node)


class Measure:
    """What a scaling test calls: ``dlscale.check(cell)`` measures the cell and asserts its verdict."""

    def __init__(self, config: pytest.Config, node: pytest.Item):
        self.config = config
        self.node = node
        self.suite = config.stash[SUITE_KEY]

    def check(self, cell) -> None:
        if self.suite.options.against:
            self._check_against(cell)
            return
        repeats = []
        for _ in range(self.suite.options.repeat):  # every repeat is judged
            result = self.suite.measure(cell, on_progress=_Progress(self.config))
            self.node.user_properties.extend(junit_properties(result.to_json()))  # figures in --junitxml
            if not result.ok:
                pytest.fail(f"{cell.id} {result.run.status} under {result.run.launcher}:\n{result.run.error}",
                            pytrace=False)
            repeats.append(result.verdicts)
        options = self.suite.options
        rule = FailureRule(confirm=options.confirm, update_baselines=options.update_baselines,
                           accept_regressions=options.accept_regressions, system_changes=options.system_changes,
                           strict_verdicts=self.config.getoption("dlscale_strict"))
        if to_confirm(result.verdict, rule):
            confirmation = self.suite.confirm(result, on_progress=_Progress(self.config))
            cells = self.config.stash.get(AB_CELLS_KEY, 1)
            if confirmation.paired is not None and not self.suite.change_surely_stands(confirmation.paired, cells):
                self.node.stash[CONFIRMED_AT_THE_END_KEY] = ConfirmedAtTheEnd(repeats=repeats, rule=rule, result=result)
                _Progress(self.config, every_s=0)(
                    f"{cell.id}: {result.verdict} confirmed {confirmation.cause} by an A/B "
                    f"{confirmation.paired.verdict.kind}; whether that call stands among the session's A/Bs, and "
                    "the test's outcome with it, is decided at the session's end")
                return
        if message := _failure(cell.id, repeats, rule, result):
            pytest.fail(message, pytrace=False)

    def _check_against(self, cell) -> None:
        self._judge_against(self.suite.measure_against(cell, on_progress=_Progress(self.config)))

    def _judge_against(self, result: PairedResult) -> None:
        """The test fails where the A/B's final verdict is ``regressed``. A call it made (a change
        beyond the minimum effect, or ``same`` within it) that stands whatever the session's other
        cells find (Bonferroni's share) is final at once, as is a verdict that claims nothing; any
        other call the false-discovery control decides at the session's end, once every cell's
        p-value is known, and the test's outcome waits for it (:func:`pytest_runtest_protocol`)."""
        cells = self.config.stash.get(AB_CELLS_KEY, 1)
        if not self.suite.change_surely_stands(result, cells):
            self.node.stash[AT_THE_END_KEY] = result
            _Progress(self.config, every_s=0)(
                f"{result.cell.id}: {result.verdict.kind} ({result.verdict.message}); whether it stands among the "
                f"{cells} cells compared, and the test's outcome with it, is decided at the session's end")
            return
        self.node.user_properties.extend(junit_properties(result.to_json()))
        if not result.ok:
            pytest.fail(f"{result.cell.id}: no A/B verdict against the {result.reference.label}: {result.error}",
                        pytrace=False)
        if message := _regression_message(result):
            pytest.fail(message, pytrace=False)

    def check_accuracy(self, cell) -> None:
        result = self.suite.measure_accuracy(cell, on_progress=_Progress(self.config))
        if not result.run.ok:
            pytest.fail(f"{cell.id} {result.run.status} under {result.run.launcher}:\n{result.run.error}",
                        pytrace=False)
        if result.verdict.failed and not self.suite.options.update_baselines:
            pytest.fail(f"{cell.id} lost accuracy: {result.verdict.message}", pytrace=False)


def _failure(cell_id: str, repeats: list, rule: FailureRule, result: CellResult) -> str | None:
    """What a cell's test fails with, by its verdicts and its confirmation as it stands (after the
    false-discovery control where that decided it): :func:`harness.judging.outcome.failure_message`."""
    confirmation = result.confirmation
    confirmed = Confirmed(cause=confirmation["cause"], message=confirmation["message"]) if confirmation else None
    return failure_message(cell_id, repeats, rule, confirmed)


def _regression_message(result: PairedResult) -> str | None:
    """What an A/B cell's test fails with: its verdict, after the false-discovery control where
    that decided it, is ``regressed``; else None."""
    if result.verdict_kind != PairedKind.REGRESSED:
        return None
    control = result.false_discovery
    stands = (f"; it stands among the {control['cells']} cells compared (Benjamini-Hochberg at {control['rate']:.0%},"
              f" repeated p {control['repeated_p']:.2g})" if control else "")
    return f"{result.cell.id} regressed against the {result.reference.label}: {result.verdict.message}{stands}"


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    """An A/B session's scaling tests run as pytest runs any test, their reports told once the test
    is over; those whose outcome the false-discovery control decides (:meth:`Measure._judge_against`)
    are held and told at the session's end with that outcome (:func:`_tell_held`), so that the
    terminal, the JUnit file and the exit status all say the final verdict. Other tests: pytest's."""
    suite = item.config.stash.get(SUITE_KEY, None)
    if suite is None or not (suite.options.against or suite.options.confirm) \
            or "dlscale" not in getattr(item, "fixturenames", ()):
        return None
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    reports = runtestprotocol(item, nextitem=nextitem, log=False)
    if AT_THE_END_KEY in item.stash or CONFIRMED_AT_THE_END_KEY in item.stash:
        item.config.stash.setdefault(HELD_KEY, []).append((item, reports))
    else:
        _tell(item, reports)
    return True


def _tell(item: pytest.Item, reports: list[pytest.TestReport]) -> None:
    for report in reports:
        item.ihook.pytest_runtest_logreport(report=report)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)


def _tell_held(config: pytest.Config) -> bool:
    """Tell the held tests' reports, each one's call failed where its A/B's verdict after the
    false-discovery control is ``regressed``, with its figures and that verdict as JUnit properties,
    or, for a confirmed cell, where its verdicts fail with its confirmation as it stands after the
    control. Whether any of them failed (pytest counted none of them)."""
    failed = False
    for item, reports in config.stash.get(HELD_KEY, []):
        if AT_THE_END_KEY in item.stash:
            result = item.stash[AT_THE_END_KEY]
            properties, message = junit_properties(result.to_json()), _regression_message(result)
        else:
            waiting = item.stash[CONFIRMED_AT_THE_END_KEY]
            properties, message = [], _failure(waiting.result.cell.id, waiting.repeats, waiting.rule, waiting.result)
        for report in reports:
            report.user_properties.extend(properties)  # each report carries the test's (JUnit reads the teardown's)
            if report.when == "call" and report.passed and message:
                report.outcome, report.longrepr = "failed", message
        failed = failed or any(report.failed for report in reports)
        _tell(item, reports)
    config.stash[HELD_KEY] = []
    return failed


def _report_baseline_changes(terminalreporter, suite: Suite) -> None:
    terminalreporter.write_line(f"updated {suite.prepared.baselines.path} ({len(suite.baseline_changes)} change(s)):")
    for change in suite.baseline_changes:
        terminalreporter.write_line(f"  {change}")
    for path in suite.package_sets_written:
        terminalreporter.write_line(f"  {path}: a package set the baselines name, written beside them: commit it "
                                    "with them")
    if suite.history.accepted:
        terminalreporter.write_line(f"accepted in {suite.history.path}: the levels of the {len(suite.history.accepted)} "
                                    "re-recorded cell(s); later nights are compared with them")
    if suite.baselines_kept:
        terminalreporter.write_line(f"not recorded, old baseline kept ({len(suite.baselines_kept)} cell(s)):")
        for reason in suite.baselines_kept:
            terminalreporter.write_line(f"  {reason}")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_sessionfinish(session: pytest.Session):
    """Record the baselines, then let the summary print. The end of the session runs whole,
    whatever presses arrive meanwhile (harness.common.interrupts)."""
    INTERRUPTS.finishing = True
    try:
        suite = session.config.stash.get(SUITE_KEY, None)
        if suite is not None and suite.options.update_baselines and (suite.results or suite.accuracy_results):
            try:
                suite.baseline_changes = suite.update_baselines()
            except BaselineError as error:
                suite.baseline_error = str(error)
                session.exitstatus = session.exitstatus or pytest.ExitCode.TESTS_FAILED
        if suite is not None and (suite.paired_results or suite.confirming):
            suite.control_false_discoveries(session.config.stash.get(AB_CELLS_KEY, 1))
            if any(result.verdict_kind == PairedKind.REGRESSED for result in suite.paired_results):
                session.exitstatus = session.exitstatus or pytest.ExitCode.TESTS_FAILED
        if _tell_held(session.config):
            session.exitstatus = session.exitstatus or pytest.ExitCode.TESTS_FAILED
        if suite is not None and suite.unmeasured_for_time and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = CUT_FOR_TIME_EXIT_STATUS
        return (yield)
    finally:
        _exit_interrupted(session)


def _exit_interrupted(session: pytest.Session) -> None:
    if INTERRUPTS.interrupted:
        session.exitstatus = INTERRUPTED_EXIT_STATUS


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """A press that arrived after the summary still makes the session INTERRUPTED and is told."""
    session = config.stash.get(SESSION_KEY, None)
    if session is not None:
        _exit_interrupted(session)
    suite = config.stash.get(SUITE_KEY, None)
    if suite is not None and INTERRUPTS.interrupted and not config.stash.get(INTERRUPT_TOLD_KEY, False):
        INTERRUPTS.say(_interrupt_line(suite, []))
    INTERRUPTS.session_over()
    fd = config.stash.get(TERMINAL_FD_KEY, None)
    if fd is not None:
        os.close(fd)


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    suite = config.stash.get(SUITE_KEY, None)
    if suite is None:
        return
    skipped = []
    if suite.accuracy_results:
        terminalreporter.section("dlscale accuracy (final validation accuracy, verdict)")
        terminalreporter.write_line(format_table(accuracy_rows(suite.accuracy_results)))
        if INTERRUPTS.hurry:
            skipped.append("the accuracy plots")
        else:
            with INTERRUPTS.writing():
                plots = _write_accuracy_plots(suite.accuracy_results, suite.options.workdir.parent / "accuracy")
            terminalreporter.write_line("plots: " + ", ".join(str(p) for p in plots))
    if suite.results:
        _write_summary(terminalreporter, suite)
    if suite.paired_results:
        _write_paired_summary(terminalreporter, suite)
    if suite.baseline_changes is not None:
        _report_baseline_changes(terminalreporter, suite)
    if suite.baseline_error:
        terminalreporter.write_line(f"baselines not updated: {suite.baseline_error}", red=True)
    measured = suite.results or suite.paired_results
    if measured and suite.options.results_json:
        terminalreporter.write_line(f"results written to {suite.options.results_json}")
    if measured and suite.options.report and INTERRUPTS.hurry:
        skipped.append("the HTML report")
    elif measured and suite.options.report:
        with INTERRUPTS.writing():
            collectives = project_root(config.inipath, config.invocation_params.dir) / COLLECTIVES_FILE
            index = write_report(suite.results_document(), suite.options.report,
                                 collectives=collectives if collectives.exists() else None,
                                 history=suite.history_rows())
        terminalreporter.write_line(f"report written to {index}")
    verdicts = {result.cell.id: result.verdict for result in suite.results}  # a cell's last repeat
    verdicts.update((result.cell.id, result.verdict_kind) for result in suite.accuracy_results)
    if verdicts:
        terminalreporter.write_line(judged_line(
            list(verdicts.values()), recorded=suite.baseline_changes is not None and not suite.baseline_error,
            kept=len(suite.baselines_kept),
            confirm=suite.options.confirm,
            causes=[result.confirmation["cause"] for result in suite.results if result.confirmation]))
    if suite.paired_results:
        terminalreporter.write_line(decided_line([result.verdict_kind for result in suite.paired_results]))
    if suite.unmeasured_for_time:
        terminalreporter.write_line(config.stash[DEADLINE_KEY].cut_line(suite.unmeasured_for_time), yellow=True)
    if INTERRUPTS.interrupted:
        terminalreporter.write_line(_interrupt_line(suite, skipped), yellow=True)
        config.stash[INTERRUPT_TOLD_KEY] = True


def _cores_words(suite: Suite) -> str:
    if suite.uses_gpus:
        return ""
    cores = suite.prepared and suite.prepared.cores_per_rank
    if cores:
        return f", {cores} core(s) per rank"
    return ", ranks share the node's cores (more ranks than cores: E_G's ideal is below 1)"


def _write_control(terminalreporter, results: list[PairedResult], compared: str, held_words: str,
                   alpha: float) -> None:
    """One line: how many of the A/Bs' calls (regressed, improved, same) stand under the session's
    false-discovery control, and which are held; nothing where the control did not run."""
    controlled = [result for result in results if result.false_discovery]
    if not controlled:
        return
    held = [result.cell.id for result in controlled if not result.false_discovery["stands"]]
    called = [result for result in controlled if result.ok and result.verdict.kind in CALLS]
    terminalreporter.write_line(
        f"false discoveries controlled across the {controlled[0].false_discovery['cells']} {compared} "
        f"(Benjamini-Hochberg at {alpha:.0%}): {len(called) - len(held)} of {len(called)} call(s) "
        "(regressed, improved, same) stand" + (f"; {held_words}: {', '.join(held)}" if held else ""))


def _write_huge_pages(terminalreporter, suite: Suite) -> None:
    """The huge pages the session's launches gave their ranks, and why, in one line (an A/B's
    reference keeps them unless it changes ``GLIBC_TUNABLES``, which the difference then names)."""
    if suite.prepared and suite.prepared.huge_pages:
        terminalreporter.write_line(f"huge pages: {suite.prepared.huge_pages.words()}")


def project_root(inipath: Path | None, invocation_dir: Path) -> Path:
    """Where the project's baselines/, history/ and results/ are by default: beside its pytest
    configuration, else where pytest was started. Not pytest's rootdir: an option's value naming
    an existing directory (``--results-dir /scratch/results`` on the second night) moves that."""
    return Path(inipath).parent if inipath else Path(invocation_dir)


def _write_accuracy_plots(results, directory: Path) -> list[Path]:
    from harness.report.plots_accuracy import write_all  # matplotlib: only when there is something to plot

    outcomes = [r.outcome for r in results if r.outcome]
    return write_all(outcomes, directory) if outcomes else []


def _write_summary(terminalreporter, suite: Suite) -> None:
    ready = suite.prepared
    terminalreporter.section("dlscale summary")
    own = ", ".join(f"{name} {value:g}" for name, value in ready.baselines.tunables.differences().items())
    terminalreporter.write_line(f"system {ready.system}, launcher {suite.launcher_name}, baselines {ready.baselines.path}"
                                + _cores_words(suite) + (f"; the system's tunables: {own}" if own else ""))
    _write_huge_pages(terminalreporter, suite)
    _write_start_up_delay(terminalreporter, suite)
    terminalreporter.write_line(format_table(summary_rows([result.to_json() for result in suite.results])))
    collectives = project_root(terminalreporter.config.inipath,
                               terminalreporter.config.invocation_params.dir) / COLLECTIVES_FILE
    for line in scaling_model_lines([result.to_json() for result in suite.results], collectives=collectives,
                                    batch_per_gpu=ready.workload.batch_size,
                                    num_classes=ready.workload.num_classes):
        terminalreporter.write_line(line)
    ratios = framework_ratios((result.cell, result.records) for result in suite.results if result.metrics)
    if ratios:
        terminalreporter.write_line(f"frameworks side by side (throughput over {REFERENCE_FRAMEWORK}'s, same run):")
        terminalreporter.write_line(format_table(comparison_rows(ratios)))
        for seed, quote, reading in PUBLISHED_NOTES:
            terminalreporter.write_line(f"  published, {seed} ({reading}): \"{quote}\"")
    served = [(result.cell.id, result.servers, result.breakdown.slowest.shares() if result.breakdown else None)
              for result in suite.results if result.servers]
    if served:
        terminalreporter.write_line("parameter servers (timed windows; a worker's optimizer step waits for them):")
        terminalreporter.write_line(format_table(server_rows(served)))
    counts = collections.Counter(result.verdict for result in suite.results)
    terminalreporter.write_line(", ".join(f"{n} {kind}" for kind, n in sorted(counts.items())))
    _write_control(terminalreporter, [confirming.paired for confirming in suite.confirming], "A/Bs --confirm ran",
                   "held inconclusive, their confirmation unknown", suite.pair_settings.alpha)
    for result in suite.results:
        for verdict in result.verdicts:
            if verdict.kind not in (VerdictKind.PASS, VerdictKind.NO_BASELINE):
                terminalreporter.write_line(f"{result.cell.id}: {verdict.kind}: {verdict.message}")
        if result.confirmation:
            terminalreporter.write_line(f"{result.cell.id}: {result.verdict} confirmed: {result.confirmation['message']}")
        if result.stack_changes:
            terminalreporter.write_line(f"{result.cell.id}: {result.verdict} with software changed since the "
                                        f"baseline: {', '.join(result.stack_changes)}")
        for line in _work_lines(result):
            terminalreporter.write_line(f"{result.cell.id}: {line}")


def _work_lines(result) -> list[str]:
    """What a cell's counted work says: against its baseline's, and launches that did other work."""
    work = result.work or {}
    change = WorkChange.from_json(result.work_change) if result.work_change else None
    reading = baseline_reading(change, result.verdict)
    return ([f"{result.verdict}: {reading}"] if reading else []) + (
        [f"its launches counted other work ({', '.join(work['launches_differ'])}): they did not run the same "
         "steps"] if work.get("launches_differ") else [])


def _write_start_up_delay(terminalreporter, suite: Suite) -> None:
    if delay := suite.prepared.launcher.start_up_delay():
        terminalreporter.write_line(f"launcher {suite.launcher_name}: {delay}", yellow=True)


def _write_paired_summary(terminalreporter, suite: Suite) -> None:
    ready = suite.prepared
    settings = suite.pair_settings
    terminalreporter.section("dlscale A/B (pairs of launches in this session)")
    terminalreporter.write_line(f"system {ready.system}, launcher {suite.launcher_name}, "
                                f"{ready.reference.environment.label}"
                                + (", pairs as duets (both sides at once, each on half the node)" if suite.options.duet
                                   else ", pairs back to back in balanced random order"))
    _write_huge_pages(terminalreporter, suite)
    _write_start_up_delay(terminalreporter, suite)
    terminalreporter.write_line(f"current against reference: {describe_difference(ready.reference.difference)}")
    for problem in ready.reference.environment.dependency_problems:
        terminalreporter.write_line(f"the reference's package set, by pip check: {problem}")
    terminalreporter.write_line(
        f"looks at {', '.join(map(str, planned_looks(settings.first, settings.most)))} pairs, "
        f"{RULE_CITATIONS[settings.rule]}: each verdict wrong at most {settings.alpha / 2:.1%} of the time; "
        f"minimum effect {settings.min_effect:.0%}; every timed step counted on both sides (the workload's "
        f"{ready.workload.warmup_steps} warm-up steps untimed)")
    terminalreporter.write_line(format_table(paired_rows(suite.paired_results)))
    counts = collections.Counter(result.verdict_kind for result in suite.paired_results)
    terminalreporter.write_line(", ".join(f"{n} {kind}" for kind, n in sorted(counts.items())))
    _write_control(terminalreporter, suite.paired_results, "cells compared", "held inconclusive", settings.alpha)
    for result in suite.paired_results:
        lines = [result.work_line] if result.work_line else []
        lines += instruction_lines(result.instructions)
        lines += [f"the {side} side's launches counted other work than its first: they did not run the same steps"
                  for side in result.work_differs()]
        lines += [f"interrupted after {len(result.pairs)} pairs: judged on those"] if result.interrupted else []
        lines += ([result.error] if result.error else []) + list(result.verdict.flags if result.verdict else ())
        lines += [f"left out pair {left['pair'] + 1}: {left['why']}" for left in result.left_out]
        if result.verdict and result.verdict.pairs_needed:
            lines.append(f"{result.verdict.kind}: {result.verdict.pairs_needed} (--max-pairs)")
        for line in lines:
            terminalreporter.write_line(f"{result.cell.id}: {line}")
        if result.stored_baseline:
            stored = result.stored_baseline
            terminalreporter.write_line(
                f"{result.cell.id}: the stored baseline judges the current side's {stored['launches']} launches "
                + (f"({stored['contended_left_out']} contended, left out) " if stored.get("contended_left_out") else "")
                + f"{stored['verdict']}" + (f" ({'; '.join(stored['reasons'])})" if stored["reasons"] else ""))


def _interrupt_line(suite: Suite, skipped: list[str]) -> str:
    """One line: what an interrupted session kept and what it dropped."""
    finished = ([result.cell.id for result in suite.results] + [result.cell.id for result in suite.accuracy_results]
                + [f"{result.cell.id} (A/B: {len(result.pairs)} pairs, {result.verdict_kind})"
                   for result in suite.paired_results])
    places = [name for name, used in (("results file", suite.options.results_json), ("history", suite.options.history_dir),
                                      ("baselines", suite.baseline_changes)) if used]
    kept = (f"kept {len(finished)} finished cell(s) ({', '.join(finished)})" + (f" in the {', '.join(places)}" if places else "")
            if finished else "no cell had finished")
    dropped = [f"the running cell {cell_id}" for cell_id in suite.cut_short] + skipped
    presses = f"{INTERRUPTS.presses} presses" if INTERRUPTS.presses > 1 else "1 press"
    return (f"dlscale: interrupted by {INTERRUPTS.signal_name} ({presses}): {kept}; "
            f"dropped: {', '.join(dropped) or 'nothing'}")
