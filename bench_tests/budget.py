"""A time budget for the suite's own tests, seen at the end of every session:

    pytest bench_tests --time-budget 2100

prints the files that took longest and the session's total, and fails a session whose tests all
passed but whose total passed the budget, so that the change that makes CI slow is the one that
fails, not a later one. ``ci/test`` sets the budget (``inf`` with ``--full``: times shown, never a
failure); a plain ``pytest`` run has none and shows nothing.
"""
from __future__ import annotations

import time
from collections import defaultdict
from typing import Mapping

import pytest

SLOWEST_FILES = 12


def file_times(test_seconds: Mapping[str, float]) -> list[tuple[str, float, int]]:
    """(file, seconds, tests) of every file, slowest first, from each test's seconds by node id."""
    seconds: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for nodeid, spent in test_seconds.items():
        path = nodeid.split("::", 1)[0]
        seconds[path] += spent
        counts[path] += 1
    return sorted(((path, seconds[path], counts[path]) for path in seconds), key=lambda row: -row[1])


def over_budget(total_s: float, budget_s: float) -> str | None:
    """Why a session of ``total_s`` seconds fails its budget, or None when it is within."""
    if total_s <= budget_s:
        return None
    return (f"the tests took {total_s / 60:.1f} min, over their budget of {budget_s / 60:.1f} min "
            f"(--time-budget {budget_s:g}): make the slowest tests above cheaper, or move more combinations "
            f"of parts CI already covers behind the 'full' mark (ci/test --full)")


class Budget:
    def __init__(self, budget_s: float):
        self.budget_s = budget_s
        self.started = time.monotonic()
        self.test_seconds: dict[str, float] = defaultdict(float)

    def total_s(self) -> float:
        return time.monotonic() - self.started

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.test_seconds[report.nodeid] += report.duration  # set-up, call and teardown

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if session.exitstatus == pytest.ExitCode.OK and over_budget(self.total_s(), self.budget_s):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter) -> None:
        rows = file_times(self.test_seconds)
        if not rows:
            return
        write = terminalreporter.write_line
        terminalreporter.section("time by file")
        for path, seconds, count in rows[:SLOWEST_FILES]:
            write(f"{seconds:8.1f} s  {count:4d} test(s)  {path}")
        total = self.total_s()
        budget = f" of a budget of {self.budget_s / 60:.1f} min" if self.budget_s != float("inf") else ", no budget"
        write(f"{total:8.1f} s  in all ({total / 60:.1f} min{budget})")
        if reason := over_budget(total, self.budget_s):
            write(f"FAILED: {reason}", red=True, bold=True)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--time-budget", type=float, default=None, metavar="SECONDS",
                     help="fail the session when its tests together take longer (ci/test sets it)")


def pytest_configure(config: pytest.Config) -> None:
    if (budget_s := config.getoption("time_budget")) is not None:
        config.pluginmanager.register(Budget(budget_s), "dlscale-time-budget")
