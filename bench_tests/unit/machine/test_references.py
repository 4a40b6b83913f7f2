"""Reference environments of an A/B: each part of ``--against``, the git export, the difference
between two environments, and the one-line errors of references that cannot be built."""
import subprocess
from types import SimpleNamespace

import pytest

from harness import HARNESS_SOURCE
from harness.machine import references
from harness.machine.references import ReferenceError

REPO = HARNESS_SOURCE.parent


@pytest.fixture
def project(tmp_path):
    """A throwaway git project with two commits of a ``harness`` package."""
    repo = tmp_path / "project"
    (repo / "harness").mkdir(parents=True)

    def commit(text: str) -> str:
        (repo / "harness" / "__init__.py").write_text(text)
        subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
        subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m",
                        text], check=True)
        return subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()

    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    first = commit("FIRST = 1\n")
    return SimpleNamespace(path=repo, first=first, second=commit("SECOND = 2\n"))


def test_the_huge_pages_tunables_can_be_taken_away_or_changed_for_the_reference():
    """The ``GLIBC_TUNABLES`` a session sets for its huge pages is no variable the harness reserves:
    ``--launch-env`` takes it and ``--against env:GLIBC_TUNABLES`` A/Bs it."""
    from harness.machine.allocation import launch_environment

    thp = "glibc.malloc.hugetlb=1"
    assert launch_environment([f"GLIBC_TUNABLES={thp}"], env={}) == {"GLIBC_TUNABLES": thp}
    base = references.Environment(label="current", source=REPO, launch_environment={"GLIBC_TUNABLES": thp},
                                  commit=None)
    without = references.build(["env:GLIBC_TUNABLES"], base)
    assert without.launch_environment == {} and without.unset == ("GLIBC_TUNABLES",)
    assert references.difference(without, base)["launch_environment"] == {"GLIBC_TUNABLES": [None, thp]}
    pool = references.build(["env:GLIBC_TUNABLES=glibc.malloc.hugetlb=2"], base)
    assert references.describe_difference(references.difference(pool, base)) == (
        "GLIBC_TUNABLES: glibc.malloc.hugetlb=2 -> glibc.malloc.hugetlb=1")


def test_variables_set_and_unset_over_the_launch_environment():
    base = references.Environment(label="current", source=REPO, launch_environment={"A": "1", "B": "2"}, commit=None)
    reference = references.build(["env:A=3", "env:B", "env:C=x=y"], base)
    assert reference.launch_environment == {"A": "3", "C": "x=y"} and reference.unset == ("B",)
    assert reference.source == REPO and reference.label == "reference: A=3, without B, C=x=y"
    assert references.difference(reference, base)["launch_environment"] == {
        "A": ["3", "1"], "B": [None, "2"], "C": ["x=y", None]}


def test_a_variable_the_shell_exports_is_unset_for_the_reference_and_named_for_the_current_side():
    """``env:NAME`` with NAME exported in the shell and not in the launch table: the current side's
    table carries the shell's value (mpirun forwards it, the ranks' records and the difference name
    it), and the reference's ranks are started without it."""
    shell = {"ATEN_CPU_CAPABILITY": "default", "Z": "shell", "PATH": "/bin"}
    variables = references.with_shell_values(["env:ATEN_CPU_CAPABILITY", "env:Z=1", "git:HEAD", "env:W", "env:A-B"],
                                             {"Z": "table"}, shell)
    assert variables == {"Z": "table", "ATEN_CPU_CAPABILITY": "default"}  # the table's own value wins
    base = references.Environment(label="current", source=REPO, launch_environment=variables, commit=None)
    reference = references.build(["env:ATEN_CPU_CAPABILITY", "env:W"], base)
    assert reference.launch_environment == {"Z": "table"} and reference.unset == ("ATEN_CPU_CAPABILITY", "W")
    assert reference.to_json()["unset"] == ["ATEN_CPU_CAPABILITY", "W"]
    assert references.describe_difference(references.difference(reference, base)) == \
        "ATEN_CPU_CAPABILITY: unset -> default"
    assert references.build(["env:W", "env:W=2"], base).unset == ()  # the later part wins
    assert references.with_shell_values([], {"A": "1"}, shell) == {"A": "1"}


def test_a_git_reference_is_its_commit_exported_once(project, tmp_path):
    base = references.current({}, repo=project.path)
    assert base.commit == project.second
    reference = references.build(["git:HEAD~1"], base, repo=project.path, cache=tmp_path / "cache")
    assert reference.commit == project.first
    assert reference.label == f"reference: git {project.first[:10]} (HEAD~1)"
    assert (reference.source / "harness" / "__init__.py").read_text() == "FIRST = 1\n"
    again = references.build([f"git:{project.first}"], base, repo=project.path, cache=tmp_path / "cache")
    assert again.source == reference.source and sorted(p.name for p in (tmp_path / "cache").iterdir()) == [
        f"git-{project.first}"]  # nothing half-written beside it
    difference = references.difference(reference, base, repo=project.path)
    assert len(difference["commits"]) == 1 and difference["commits"][0].endswith("SECOND = 2")
    assert "1 commit(s)" in references.describe_difference(difference)


@pytest.mark.parametrize("parts, message", [
    (["git:no-such-ref"], "--against git:no-such-ref: no such commit in"),
    (["torch==2.13.1"], "--against torch==2.13.1: not a reference; say one of git:REF, env:NAME=VALUE, env:NAME or "
                        "pkg:NAME==VERSION"),
    (["pkg:torch"], "--against pkg:torch: say pkg:NAME==VERSION (an exact version)"),
    (["pkg:torch>=2.13"], "--against pkg:torch>=2.13: say pkg:NAME==VERSION"),
    (["env:"], "--against env:: not a reference"),
    (["env:A-B=1"], "--against env:A-B=1: 'A-B' is not a variable name"),
    (["env:PYTHONPATH"], "--against env:PYTHONPATH: PYTHONPATH is set by the harness for each cell and cannot be "
                         "changed"),
    ([], "--against: no reference given"),
])
def test_a_reference_that_cannot_be_built_is_one_line_naming_it(project, tmp_path, parts, message):
    with pytest.raises(ReferenceError) as error:
        references.build(parts, references.current({}, repo=project.path), repo=project.path, cache=tmp_path / "cache")
    assert str(error.value).startswith(message) and "\n" not in str(error.value)
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())


def test_an_identical_environment_differs_in_nothing():
    base = references.current({"A": "1"})
    assert references.describe_difference(references.difference(base, base)) == "none (an A/A comparison)"


def test_uncommitted_changes_are_the_harness_files_git_tracks(project):
    assert not references.uncommitted_changes(project.path)
    (project.path / "harness" / "new_module.py").write_text("")  # untracked: not the commit's code, not a change
    (project.path / "notes.txt").write_text("")
    assert not references.uncommitted_changes(project.path)
    (project.path / "harness" / "__init__.py").write_text("CHANGED = 1\n")
    assert references.uncommitted_changes(project.path)


def test_a_recorded_package_set_is_rebuilt_by_pinning_what_changed():
    recorded = {"python": "3.11.7", "torch": "2.13.0", "numpy": "2.4.6", "old-only": "1.0"}
    current = {"python": "3.11.7", "torch": "2.14.1", "numpy": "2.4.6", "new-only": "2.0"}
    assert references.pins_to_rebuild(recorded, current) == ["pkg:old-only==1.0", "pkg:torch==2.13.0"]
    assert references.pins_to_rebuild({**recorded, "dlscale": "0.0.9"}, {**current, "dlscale": "0.1.0"},
                                      project=references.project_distributions()) == \
        ["pkg:old-only==1.0", "pkg:torch==2.13.0"]  # the project's code comes from git, not an index
    with pytest.raises(ReferenceError, match="recorded with Python 3.10.2, this is Python 3.11.7"):
        references.pins_to_rebuild({**recorded, "python": "3.10.2"}, current)


def test_a_package_difference_is_the_pinned_version_against_the_installed_one():
    base = references.current({})
    reference = references.Environment(label="reference: torch 2.13.0", source=REPO, launch_environment={},
                                       commit=base.commit, packages={"torch": "2.13.0", "no-such-dist": "1.0"})
    difference = references.difference(reference, base)
    assert difference["packages"] == {"no-such-dist": ["1.0", None], "torch": ["2.13.0", torch_version()]}
    assert references.describe_difference(difference) == \
        f"no-such-dist 1.0 -> not installed, torch 2.13.0 -> {torch_version()}"


def torch_version() -> str:
    import importlib.metadata
    return importlib.metadata.version("torch")
