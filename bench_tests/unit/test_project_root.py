"""Where a session finds the project's baselines by default: beside its pytest configuration, not in
pytest's rootdir, which an option's value naming an existing directory moves (seen: a second run
with ``--results-dir /tmp/acc`` judged every cell ``no-baseline``, rootdir /tmp/acc)."""
from pathlib import Path

from harness.plugin import project_root


def test_the_project_is_where_its_configuration_is():
    assert project_root(Path("/work/main/pyproject.toml"), Path("/tmp/acc")) == Path("/work/main")


def test_without_a_configuration_it_is_where_pytest_was_started():
    assert project_root(None, Path("/srv/nightly")) == Path("/srv/nightly")
