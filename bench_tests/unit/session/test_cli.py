"""The suite's options, declared once: pytest's help and docs/usage.md's table are made from the
declarations, and each shows the default where its setting declares it."""
import dataclasses
from pathlib import Path

import pytest

from harness.config.options import SuiteOptions
from harness.launch.runner import RunLimits
from harness.rank.frameworks import FRAMEWORKS, has_servers
from harness.session.cli import OPTIONS, REPEATABLE, SWITCH, TABLE_END, TABLE_START, markdown_table, with_table

USAGE = Path(__file__).resolve().parents[3] / "docs" / "usage.md"


def test_the_usage_documents_table_is_the_generated_one():
    document = USAGE.read_text()
    assert with_table(document) == document, \
        "docs/usage.md's options table differs from the declarations: run python -m harness.session.cli docs/usage.md"


def test_every_declared_default_shows_in_the_help_and_the_table():
    table = markdown_table()
    for option in OPTIONS:
        default = option.default
        if default is None or option.kind in (SWITCH, REPEATABLE, Path):  # directories: the project's, as the help says
            continue
        shown = f"{default:g}" if isinstance(default, float) else str(default)
        assert f"(default {shown}" in option.full_help(), option.flag
        assert f"(default {shown}" in table, option.flag
    assert "(default 0.02)" in next(o for o in OPTIONS if o.flag == "--precision").full_help()
    assert f"(default {RunLimits().heartbeat_s:g})" in next(o for o in OPTIONS if o.flag == "--hang-timeout").full_help()


def test_every_option_sets_a_setting_the_suite_has():
    settings = {field.name for field in dataclasses.fields(SuiteOptions)}
    # read by the plugin itself: the session's directory, the inverted switches, the verdict rule
    by_the_plugin = {"results_dir", "no_history", "no_yardstick", "no_count_work", "strict"}
    assert {option.dest for option in OPTIONS} - settings == by_the_plugin
    assert len({option.flag for option in OPTIONS}) == len(OPTIONS)


def test_the_parameter_server_option_names_every_framework_with_servers():
    help_text = next(o for o in OPTIONS if o.flag == "--ps-servers").full_help()
    assert all(name in help_text for name in FRAMEWORKS.names() if has_servers(name))
    assert "tensorflow_ps_async" in help_text


def test_a_document_without_the_markers_is_an_error_naming_them():
    with pytest.raises(ValueError, match="lacks the line"):
        with_table("# usage\n")
    assert with_table(f"a\n{TABLE_START}\nold\n{TABLE_END}\nb").startswith(f"a\n{TABLE_START}\n| option |")
