"""A site setting's value from the first place that gives it: the command line, the ini file, the
environment (harness.config.site_settings); the plugin's real sessions: bench_tests/plugin/test_settings.py."""
from pathlib import Path

import pytest

from harness.config.site_settings import Given, environment_variable, ini_key, parse, resolve

ENV = {"DLSCALE_SYSTEM": "from-env", "DLSCALE_HISTORY_DIR": "env/history"}


def test_the_names_follow_the_setting():
    assert (ini_key("history_dir"), environment_variable("history_dir")) == ("dlscale_history_dir", "DLSCALE_HISTORY_DIR")


@pytest.mark.parametrize(("command_line", "ini", "environment", "expected"), [
    ("cli", "ini", ENV, Given("cli", "command line")),
    (None, "ini", ENV, Given("ini", "ini dlscale_system")),
    (None, "", ENV, Given("from-env", "$DLSCALE_SYSTEM")),
    (None, "  ", {"DLSCALE_SYSTEM": " "}, None),
    (None, None, {}, None),
])
def test_the_command_line_wins_over_the_ini_file_over_the_environment(command_line, ini, environment, expected):
    assert resolve("system", str, command_line, ini, environment) == expected


def test_a_relative_path_in_the_ini_file_is_its_directorys_and_in_the_environment_as_given(tmp_path):
    assert resolve("history_dir", Path, None, "nights", ENV, ini_dir=tmp_path).value == tmp_path / "nights"
    assert resolve("history_dir", Path, None, "/abs", ENV, ini_dir=tmp_path).value == Path("/abs")
    assert resolve("history_dir", Path, None, None, ENV, ini_dir=tmp_path).value == Path("env/history")


def test_a_variable_older_than_the_rule_is_read_by_its_name():
    given = resolve("launch_env_file", Path, None, None, {"DLSCALE_ENV_FILE": "/site.env"}, variable="DLSCALE_ENV_FILE")
    assert given == Given(Path("/site.env"), "$DLSCALE_ENV_FILE")


def test_a_value_of_the_wrong_kind_names_where_it_was_given():
    with pytest.raises(ValueError, match=r"ini dlscale_pairs: 'many' is not a valid int"):
        parse("many", int, "ini dlscale_pairs")
    assert parse(" 8 ", int, "x") == 8
