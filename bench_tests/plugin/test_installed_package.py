"""dlscale installed as a package, outside its repository: a real wheel in a new virtual
environment, run from a project directory that holds nothing but its own ``baselines/`` folder.
The cells run through srun on the local Slurm cluster and are judged against that folder."""
import json
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

from harness.launch.launchers import LAUNCHERS

from ..components import needs
from ..workloads import TINY_FLAGS

pytestmark = pytest.mark.launch
REPO = Path(__file__).resolve().parents[2]
CELL = "ddp-synthetic-resnet50-g1"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A new venv holding the dlscale wheel built from this checkout; the dependencies (torch and
    the rest, which cannot be fetched here) come from this environment through a .pth file."""
    root = tmp_path_factory.mktemp("installed")
    source = root / "source"  # built from a copy: setuptools leaves build/ and egg-info beside the source
    shutil.copytree(REPO / "harness", source / "harness", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
                    "-w", str(root / "wheel"), str(source)], check=True, cwd=root)
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    wheel, = (root / "wheel").glob("dlscale-*.whl")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--quiet",
                    str(wheel)], check=True)
    target = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                 capture_output=True, text=True, check=True).stdout.strip())
    (target / "dlscale-test-dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return python


def run(python: Path, project: Path, *args: str) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    return subprocess.run([str(python), "-m", "pytest", "--pyargs", "harness.bench", "-p", "no:cacheprovider",
                           "-m", "scaling", "--launcher", "srun", "--frameworks", "ddp", "--loaders", "synthetic",
                           "--gpus", "1", "--system", "installsys", "--widest-baseline", "inf", "--measure-budget", "0",
                           *TINY_FLAGS, *args],
                          cwd=project, env=env, capture_output=True, text=True, timeout=600)


def test_the_installed_code_runs_not_this_checkout(installed):
    where = subprocess.run([str(installed), "-c", "import harness; print(harness.__file__)"], cwd="/",
                           capture_output=True, text=True, check=True).stdout.strip()
    assert Path(where).is_relative_to(installed.parent.parent), where
    compare = subprocess.run([str(installed.parent / "dlscale-compare"), "--help"], capture_output=True, text=True)
    assert compare.returncode == 0 and "old new" in compare.stdout
    assert (Path(where).parent / "report" / "published-aach2023.json").is_file()  # the study's figures ship


def test_an_installed_dlscale_judges_cells_against_the_projects_baselines(installed, tmp_path):
    needs("slurm", LAUNCHERS.create("srun").unavailable_reason())
    project = tmp_path / "project"
    (project / "baselines").mkdir(parents=True)
    first = run(installed, project, "--update-baselines")
    assert first.returncode == 0, first.stdout + first.stderr
    baseline = json.loads((project / "baselines" / "installsys.json").read_text())
    assert list(baseline["cells"]) == [CELL]
    assert (project / "history" / "installsys.jsonl").is_file() and (project / "results" / "latest").is_symlink()

    # A five-step cell is noisy: the band is widened by hand (as a user may), so that the judge's
    # verdict is known, and the yardstick left out (on a busy machine it has measured 1.2x apart)
    baseline["cells"][CELL][0]["throughput"].update(lower=-0.9, upper=None)
    baseline["cells"][CELL][0].pop("efficiency", None)
    (project / "baselines" / "installsys.json").write_text(json.dumps(baseline))
    second = run(installed, project, "--no-yardstick")
    assert second.returncode == 0, second.stdout + second.stderr
    results = json.loads((project / "results" / "latest" / "results.json").read_text())
    cell, = results["cells"]
    assert (cell["cell"], cell["status"], cell["verdict"]) == (CELL, "ok", "pass"), cell["verdicts"]
    assert results["provenance"]["git_commit"] is None  # the installed code ran, not a checkout's
