"""No dlscale option, old option name kept as an alias, or ini key is a name another widely used
pytest plugin adds: pytest cannot start with two plugins adding one name
(harness.config.other_plugins; bench_tests/plugin/test_other_plugins.py installs them)."""
from harness.config.other_plugins import OTHER_PLUGINS, clashes, plugins_adding
from harness.session.cli import OPTIONS

ISSUE_67 = ("pytest-profiling", "pytest-xdist", "pytest-cov", "pytest-benchmark", "pytest-timeout", "pytest-randomly",
            "pytest-html")


def dlscale_names() -> set[str]:
    """Every name dlscale's plugin adds to pytest's parser: options, kept old names, ini keys."""
    return ({option.flag for option in OPTIONS} | {option.alias for option in OPTIONS if option.alias}
            | {option.ini_key for option in OPTIONS if option.site})


def test_the_plugins_the_issue_names_are_checked():
    checked = {plugin.distribution for plugin in OTHER_PLUGINS}
    assert set(ISSUE_67) <= checked
    assert all(plugin.option_names for plugin in OTHER_PLUGINS)


def test_no_name_dlscale_adds_is_one_another_plugin_adds():
    names = dlscale_names()
    assert "--workload-profile" in names and "--data" in names and "dlscale_system" in names  # all three kinds read
    assert clashes(names) == {}


def test_the_check_finds_a_clash():
    assert clashes(["--profile", "--workload-profile", "--device", "timeout"]) == {
        "--profile": ("pytest-profiling",), "--device": ("pytest-playwright",), "timeout": ("pytest-timeout",)}
    assert plugins_adding("--cov") == ("pytest-cov",)
    assert plugins_adding("-n") == ("pytest-xdist",)
