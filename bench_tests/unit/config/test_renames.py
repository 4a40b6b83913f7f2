"""The renamed options (harness.config.renames): each new name is an option's, an old name is kept
as a deprecated alias exactly where no other plugin adds it, and messages name the new flags."""
import pytest

from harness.config.options import SuiteError, SuiteOptions, check_settings
from harness.config.renames import RENAMED, flag_of, renamed
from harness.session.cli import OPTIONS

BY_DEST = {option.dest: option for option in OPTIONS}


def test_every_renamed_option_is_declared_under_its_new_name():
    for entry in RENAMED:
        assert BY_DEST[entry.setting].flag == entry.new
        assert all(option.flag != entry.old for option in OPTIONS)
    assert len({entry.old for entry in RENAMED}) == len(RENAMED)


def test_an_old_name_another_plugin_adds_is_gone_and_the_others_stay_as_aliases():
    assert not renamed("profile").kept_as_alias and renamed("profile").clashes_with == ("pytest-profiling",)
    assert not renamed("device").kept_as_alias
    assert {entry.old for entry in RENAMED if entry.kept_as_alias} == {
        "--data", "--data-tfrecord", "--repeat", "--report", "--compile"}
    assert {option.alias for option in OPTIONS if option.alias} == {
        entry.old for entry in RENAMED if entry.kept_as_alias}


def test_the_help_names_the_old_name():
    assert "formerly --data, still accepted with a deprecation warning" in BY_DEST["data"].full_help()
    assert "formerly --profile, which pytest-profiling also adds" in BY_DEST["profile"].full_help()


def test_every_option_is_the_flag_messages_name():
    for option in OPTIONS:
        if option.dest != "strict":  # --strict-verdicts: read by the plugin only, named by no message
            assert flag_of(option.dest) == option.flag


@pytest.mark.parametrize(("setting", "value", "message"), [
    ("repeat", 0, "--cell-repeats must be at least 1, got 0"),
    ("profile", "huge", "--workload-profile: unknown profile 'huge'"),
    ("device", "gpu", "--rank-device: unknown device 'gpu'"),
])
def test_a_bad_value_names_the_new_flag(setting, value, message):
    with pytest.raises(SuiteError, match=message):
        check_settings(SuiteOptions(**{setting: value}))
