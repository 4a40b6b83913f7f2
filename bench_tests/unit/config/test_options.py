"""The A/B settings no cell could run with, each refused naming the option (the other options'
refusals run as a user meets them: bench_tests/plugin/test_bad_input.py)."""
import pytest

from harness.config.options import SuiteError, SuiteOptions, check_settings


@pytest.mark.parametrize("settings, message", [
    ({"against": ("env:X=1",), "pairs": 40}, "--pairs (40) must not exceed --max-pairs (32)"),
    ({"against": ("env:X=1",), "pairs": 5}, "--pairs must be at least 6, got 5"),
    ({"against": ("env:X=1",), "max_pairs": 4, "pairs": 4}, "--pairs must be at least 6, got 4"),
    ({"against": ("env:X=1",), "min_effect": 0.0}, "--min-effect must be greater than 0, got 0.0"),
    ({"against": ("env:X=1",), "pairs_budget": -1.0}, "--pairs-budget must be greater than 0, got -1.0"),
    ({"against": ("env:X=1",), "confirm": True}, "--confirm confirms verdicts against stored baselines, and --against"),
    ({"confirm": True, "system_changes": "ignore"}, "--system-changes: 'ignore' is not one of fail, pass"),
])
def test_a_b_settings_no_comparison_could_run_with(settings, message):
    with pytest.raises(SuiteError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_settings(SuiteOptions(**settings))


def test_the_defaults_pass():
    check_settings(SuiteOptions(against=("git:HEAD",)))
