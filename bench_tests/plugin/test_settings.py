"""Where a session's settings come from, in real pytest sessions: a site's settings from its
pytest configuration (pytest.ini, or [tool.pytest.ini_options] in pyproject.toml) and its
environment, the command line over the ini file over the environment over the default
(harness.config.site_settings); and a renamed option's old name: a deprecated alias that warns, or,
where another plugin adds it, an error naming the new one (harness.config.renames)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.session.cli import OPTIONS

SITE = [option for option in OPTIONS if option.site]
PROBE = '''
import json
from harness.plugin import SUITE_KEY

def test_settings(request):
    options = request.config.stash[SUITE_KEY].options
    settings = {name: getattr(options, name) for name in %r}
    settings["results_dir"] = options.workdir.parent.parent
    (request.config.invocation_params.dir / "settings.json").write_text(json.dumps(settings, default=str))
'''
VALUES = {"launcher": "torchrun", "gpus": "1", "frameworks": "ddp", "loaders": "synthetic", "models": "resnet20",
          "system": "inisys", "partition": "booster", "baselines_dir": "site/baselines", "data": "site/imagenet",
          "data_tfrecord": "site/shards", "results_dir": "site/results", "history_dir": "site/history",
          "launch_env_file": "site/site.env"}
"""A value of each site setting, as an ini file gives it."""
OTHER = {"launcher": "mpirun", "gpus": "2", "frameworks": "horovod", "loaders": "native", "models": "resnet44",
         "system": "othersys", "partition": "develop", "baselines_dir": "b", "data": "d", "data_tfrecord": "t",
         "results_dir": "r", "history_dir": "h", "launch_env_file": "e.env"}
"""Another, as the command line or the environment gives it (a path: under :func:`elsewhere`)."""
PATHS = {option.dest for option in SITE if option.kind is Path}


def elsewhere(root: Path) -> dict:
    """:data:`OTHER` with its paths absolute, in a directory of their own under ``root``."""
    return {name: str(root / "elsewhere" / value) if name in PATHS else value for name, value in OTHER.items()}


@pytest.fixture
def session(pytester, monkeypatch):
    """Runs pytest on a test that writes the session's settings; returns them, or the result."""
    for option in SITE:
        monkeypatch.delenv(option.environment_variable, raising=False)
    pytester.makepyfile(test_probe=PROBE % [option.dest for option in SITE if option.dest != "results_dir"])
    for env_file in (VALUES["launch_env_file"], f"elsewhere/{OTHER['launch_env_file']}"):  # the session reads it
        (pytester.path / env_file).parent.mkdir(parents=True, exist_ok=True)
        (pytester.path / env_file).write_text("")

    def run(*args: str):
        result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:randomly", *args)
        written = pytester.path / "settings.json"
        if result.ret != 0 or not written.exists():
            return result, None
        settings = json.loads(written.read_text())
        written.unlink()
        return result, {name: settings[name] for name in VALUES}
    return run


def ini_lines(values: dict) -> str:
    return "\n".join(f"dlscale_{name} = {value}" for name, value in values.items())


def expected(values: dict, ini_dir: Path | None = None) -> dict:
    """``values`` as the session holds them: a relative path the ini file's directory's."""
    return {name: str(ini_dir / value if ini_dir and name in PATHS and not value.startswith("/") else value)
            for name, value in values.items()}


def command_line(values: dict) -> list[str]:
    flags = {option.dest: option.flag for option in SITE}
    return [f"{flags[name]}={value}" for name, value in values.items()]


@pytest.mark.parametrize("config_file", ["pytest.ini", "pyproject.toml"])
def test_the_ini_file_gives_a_sites_settings_over_the_environment(session, pytester, monkeypatch, config_file):
    if config_file == "pytest.ini":
        pytester.makefile(".ini", pytest=f"[pytest]\n{ini_lines(VALUES)}\n")
    else:
        pytester.makepyprojecttoml("[tool.pytest.ini_options]\n" + "\n".join(
            f'dlscale_{name} = "{value}"' for name, value in VALUES.items()))
    for option in SITE:
        monkeypatch.setenv(option.environment_variable, elsewhere(pytester.path)[option.dest])
    result, settings = session()
    assert settings == expected(VALUES, pytester.path), result.stdout.str()


def test_the_command_line_wins_over_the_ini_file(session, pytester):
    pytester.makeini(f"[pytest]\n{ini_lines(VALUES)}\n")
    result, settings = session(*command_line(elsewhere(pytester.path)))
    assert settings == expected(elsewhere(pytester.path)), result.stdout.str()


def test_the_environment_gives_what_the_ini_file_leaves_out_and_the_default_the_rest(session, pytester, monkeypatch):
    given_by_ini = {"system": "inisys", "gpus": "1"}
    pytester.makeini(f"[pytest]\n{ini_lines(given_by_ini)}\n")
    other = elsewhere(pytester.path)
    for name in ("system", "data", "launch_env_file"):
        monkeypatch.setenv(next(o for o in SITE if o.dest == name).environment_variable, other[name])
    result, settings = session("--frameworks", "ddp")
    assert settings["system"] == "inisys" and settings["gpus"] == "1"  # over $DLSCALE_SYSTEM
    assert settings["frameworks"] == "ddp"
    assert (settings["data"], settings["launch_env_file"]) == (other["data"], other["launch_env_file"])  # $DLSCALE_ENV_FILE
    assert settings["loaders"] is None and settings["baselines_dir"] == str(pytester.path / "baselines"), settings
    assert settings["history_dir"] == str(pytester.path / "history")


def test_an_old_option_name_still_sets_its_setting_and_warns(session):
    result, settings = session("--data=/old/data", "--report=/old/report", "--repeat", "3", "--compile", "-rw")
    assert settings["data"] == "/old/data", result.stdout.str()
    result.stdout.fnmatch_lines([
        "*DeprecatedOption: dlscale: --data is deprecated and will be removed in the next release: use --dlscale-data*",
        "*--report is deprecated*use --dlscale-report*"])
    assert "--repeat is deprecated" in result.stdout.str() and "--compile is deprecated" in result.stdout.str()
    quiet, _ = session("--dlscale-data=/new/data")
    assert "deprecated" not in quiet.stdout.str()


def test_the_new_name_wins_over_the_old(session):
    result, settings = session("--data=/old", "--dlscale-data=/new")
    assert settings["data"] == "/new" and "--data is deprecated" in result.stdout.str()


@pytest.mark.parametrize(("old", "new", "plugin"), [("--profile", "--workload-profile", "pytest-profiling"),
                                                     ("--device=cpu", "--rank-device", "pytest-playwright")])
def test_an_old_name_another_plugin_adds_is_an_error_naming_the_new_one(session, old, new, plugin):
    result, _ = session(old, *(["cpu-small"] if "=" not in old else []))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: dlscale's {old.split('=')[0]} is now {new} ({plugin} adds *)"])
