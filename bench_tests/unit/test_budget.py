"""ci/test's time budget (bench_tests/budget.py): the times by file, and a session over its budget fails."""
import pytest

from bench_tests.budget import file_times, over_budget

SLOW_TEST = """
import time

def test_slow():
    time.sleep(0.3)

def test_quick():
    pass
"""


def test_times_add_up_by_file_slowest_first():
    rows = file_times({"a/test_x.py::test_one": 2.0, "a/test_x.py::test_two[1]": 3.0, "b/test_y.py::test_z": 4.0})
    assert rows == [("a/test_x.py", 5.0, 2), ("b/test_y.py", 4.0, 1)]


def test_only_a_total_past_the_budget_is_over_it():
    assert over_budget(2100.0, 2100.0) is None
    assert over_budget(1.0, float("inf")) is None
    assert "took 36.0 min, over their budget of 35.0 min" in over_budget(2160.0, 2100.0)


@pytest.fixture
def session(pytester):
    pytester.makepyfile(test_timed=SLOW_TEST)
    return lambda *args: pytester.runpytest("-p", "bench_tests.budget", "-p", "no:cacheprovider", *args)


def test_a_session_past_its_budget_fails_naming_the_slowest_files(session):
    result = session("--time-budget", "0.1")
    result.assert_outcomes(passed=2)  # every test passed: the budget alone fails the session
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*time by file*", "*0.3 s     2 test(s)  test_timed.py", "*s  in all (*",
                                 "FAILED: the tests took * min, over their budget of 0.0 min (--time-budget 0.1)*"])


def test_within_the_budget_the_times_are_shown_and_the_session_passes(session):
    result = session("--time-budget", "600")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*time by file*", "*s  in all (* min of a budget of 10.0 min)"])
    assert "FAILED" not in result.stdout.str()


def test_without_a_budget_nothing_is_added(session):
    result = session()
    assert result.ret == pytest.ExitCode.OK
    assert "time by file" not in result.stdout.str()
