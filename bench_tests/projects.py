"""Throwaway projects with a git history, for the tests that compare or bisect commits: this
checkout's harness committed as it is, then changes of the kind users meet (a slower step)."""
import shutil
import subprocess
from pathlib import Path
from typing import Callable

from harness import HARNESS_SOURCE

from .workloads import SCALING_TEST

STEP = "            loss = adapter.forward_backward(images, labels)\n"
SLOWER_STEP_SUBJECT = "each step does its work three times"
SLOWER_STEP = STEP + f"            for _ in range(2):  # the regression under test: {SLOWER_STEP_SUBJECT}\n" \
                     "                adapter.forward_backward(images, labels)\n"

Change = Callable[[Path], None]
"""Edits the project's files in place; the commit follows."""


def git(project: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(project), "-c", "user.name=dlscale", "-c", "user.email=dlscale@test",
                           *args], capture_output=True, text=True, check=True).stdout.strip()


def commit(project: Path, subject: str) -> None:
    """Commits everything in the project's tree with ``subject``."""
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", subject)


def step_patch(step: str) -> Change:
    """A change that puts ``step`` (the training loop's step with real work added) in the step's place."""
    def change(project: Path) -> None:
        loop = project / "harness" / "rank" / "trainloop.py"
        assert loop.read_text().count(STEP) == 1, "the training loop's step changed: update the regression's patch"
        loop.write_text(loop.read_text().replace(STEP, step))
    return change


slower_step = step_patch(SLOWER_STEP)
"""Every training step does its forward and backward three times: real work, not a sleep."""

PYTHON_STEP_SUBJECT = "each step runs a Python loop of its own"
python_step = step_patch(STEP + f"            sum(index * index for index in range(50_000))  # {PYTHON_STEP_SUBJECT}\n")
"""Every training step runs a Python loop beside its work: host instructions, no operator, no FLOP."""

HALF_AGAIN_SUBJECT = "each step does half its work again"
half_again = step_patch(STEP + "            adapter.forward_backward(images[: len(images) // 2], labels[: len(labels) // 2])"
                               f"  # {HALF_AGAIN_SUBJECT}\n")
"""Every training step does its forward and backward again on half the batch: a regression of about
a third, half the size of :data:`slower_step`'s."""


def harmless(note: str) -> Change:
    """A change that does not touch what a rank runs per step."""
    def change(project: Path) -> None:
        with (project / "harness" / "__init__.py").open("a") as init:
            init.write(f"# {note}\n")
    return change


def throwaway_project(project: Path, changes: list[tuple[str, Change]]) -> Path:
    """This checkout's harness, its scaling test and pyproject.toml committed as they are, then one
    commit per change, with its subject."""
    shutil.copytree(HARNESS_SOURCE, project / "harness", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(HARNESS_SOURCE.parent / "pyproject.toml", project)
    shutil.copy(SCALING_TEST, project / "test_scaling.py")
    git(project, "init", "-q")
    commit(project, "as the checkout is")
    for subject, change in changes:
        change(project)
        commit(project, subject)
    return project
