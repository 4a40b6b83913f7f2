"""dlscale's plugin beside the widely used pytest plugins (ci/other_plugins.txt: pytest-profiling,
-xdist, -cov, -benchmark, -timeout, -randomly, -html), all installed in one environment as a user
installs them: pytest refuses to start where two plugins add one option, so ``pytest --help`` and a
collection of the scaling suite are the proof that none of dlscale's names is theirs."""
from __future__ import annotations

import os
import site
import subprocess
import sys
from pathlib import Path

import pytest

from harness.config.other_plugins import OTHER_PLUGINS

from ..components import needs

REPO = Path(__file__).resolve().parents[2]
REQUIREMENTS = REPO / "ci" / "other_plugins.txt"
WHEELS = Path(os.environ.get("DLSCALE_CACHE", Path.home() / ".cache" / "dlscale")) / "pytest-plugins"
"""Where ci/setup.sh downloads their wheels."""
PINNED = [line.split("==") for line in REQUIREMENTS.read_text().splitlines() if line and not line.startswith("#")]


@pytest.fixture(scope="module")
def python(tmp_path_factory) -> Path:
    """A new environment with the plugins installed from their wheels, and this environment's
    packages (dlscale's editable install and torch, which cannot be fetched here) added as a site
    directory beneath its own."""
    needs("other-pytest-plugins", None if (WHEELS / ".dlscale-downloaded").is_file()
          else f"no wheels of the other pytest plugins in {WHEELS} (ci/setup.sh downloads them)")
    venv = tmp_path_factory.mktemp("plugins") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    # addsitedir, not a bare path: the editable install's own .pth file must be read too
    (Path(purelib) / "dlscale-beside.pth").write_text(
        "".join(f"import site; site.addsitedir({path!r})\n" for path in site.getsitepackages()))
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-index",
                    "--find-links", str(WHEELS), "-r", str(REQUIREMENTS)], check=True)
    return python


def pytest_in(python: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH" and not key.startswith("DLSCALE_")}
    return subprocess.run([str(python), "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_every_plugin_is_installed_at_the_version_its_names_were_read_from(python):
    listed = subprocess.run([str(python), "-c", "import importlib.metadata as m, sys; "
                             "print('\\n'.join(f'{n}=={m.version(n)}' for n in sys.argv[1:]))",
                             *(name for name, _ in PINNED)], capture_output=True, text=True, check=True).stdout.split()
    assert listed == [f"{name}=={version}" for name, version in PINNED]
    recorded = {plugin.distribution: plugin.version for plugin in OTHER_PLUGINS}
    assert {name: recorded.get(name) for name, _ in PINNED} == dict(PINNED)


def test_pytest_starts_with_them_all_and_helps_with_both_plugins_options(python, tmp_path):
    result = pytest_in(python, tmp_path, "--help")
    assert result.returncode == 0, result.stdout + result.stderr
    for name in ("--profile", "--numprocesses", "--cov", "--benchmark-only", "--timeout", "--randomly-seed", "--html",
                 "--workload-profile", "--rank-device", "--dlscale-data", "dlscale_system (string)"):
        assert name in result.stdout, name
    assert "--data=" not in result.stdout  # the deprecated aliases work, unlisted


def test_a_collection_of_the_scaling_suite_with_them_all(python, tmp_path):
    (tmp_path / "pytest.ini").write_text("[pytest]\ndlscale_frameworks = ddp\ndlscale_loaders = synthetic\n")
    result = pytest_in(python, tmp_path, "--pyargs", "harness.bench", "-m", "scaling", "--collect-only",
                       "--launcher", "torchrun", "--rank-device", "cpu", "--gpus", "1,2", "--models", "resnet20",
                       "--workload-profile", "cpu-small")
    assert result.returncode == 0, result.stdout + result.stderr
    plugins = next(line for line in result.stdout.splitlines() if line.startswith("plugins:"))
    for name, version in PINNED:
        assert f"{name.removeprefix('pytest-')}-{version}" in plugins, (name, plugins)
    assert "dlscale-" in plugins
    collected = sorted(line.strip().removeprefix("<Function test_cell[").removesuffix("]>")
                       for line in result.stdout.splitlines() if "<Function test_cell[" in line)
    assert collected == ["ddp-synthetic-resnet20-g1", "ddp-synthetic-resnet20-g2"], result.stdout + result.stderr
