"""The package sets baselines were recorded with: kept once by content hash, read back, compared."""
import json
import sys
from pathlib import Path

from harness.machine.provenance import code_version, environment_id, installed_packages, packages_of, provenance
from harness.rank.packages import tracked_packages
from harness.store import environments


def test_this_environment_is_every_package_it_holds():
    packages = installed_packages()
    assert packages["python"] and packages["torch"] and packages["numpy"] and packages["pytest"]
    assert len(packages) > 40  # the whole set, not the few tracked versions
    assert provenance(Path("."), packages, tracked=tracked_packages())["environment"] == environment_id(packages)


def test_a_package_set_is_kept_once_under_its_hash(tmp_path):
    identity = environments.keep(tmp_path, {"python": "3.11.7", "torch": "2.14.1"})
    path = tmp_path / "environments" / f"{identity}.json"
    assert json.loads(path.read_text())["packages"] == {"python": "3.11.7", "torch": "2.14.1"}
    written = path.stat().st_mtime_ns
    assert environments.keep(tmp_path, {"torch": "2.14.1", "python": "3.11.7"}) == identity  # order is no change
    assert path.stat().st_mtime_ns == written
    assert environments.load(tmp_path, identity) == {"python": "3.11.7", "torch": "2.14.1"}
    assert environments.keep(tmp_path, {"python": "3.11.7", "torch": "2.13.1"}) != identity


def test_a_missing_or_damaged_record_reads_as_none(tmp_path):
    assert environments.load(tmp_path, "0123456789abcdef") is None
    (tmp_path / "environments").mkdir()
    (tmp_path / "environments" / "bad.json").write_text("{not json")
    assert environments.load(tmp_path, "bad") is None



def test_another_interpreters_package_set_is_asked_of_it():
    """A rank runtime's own environment (``.venv-tensorflow``) is asked through its interpreter; here
    this environment's, named by another path, answers with the set this process reads."""
    other_name = str(Path(sys.executable).with_name("python3"))
    assert other_name != sys.executable and Path(other_name).exists()
    assert packages_of(other_name) == installed_packages()
    assert packages_of("/nonexistent/bin/python") is None


def test_the_code_version_hashes_the_package_and_the_modules_that_compute_the_figures(tmp_path):
    package = tmp_path / "harness"
    (package / "judging").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "judging" / "metrics.py").write_text("def summarize(): ...\n")
    (package / "report.py").write_text("# prose\n")
    first = code_version(package)
    (package / "report.py").write_text("# other prose\n")
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "report.cpython-311.py").write_text("cached")
    second = code_version(package)
    assert second["harness"] != first["harness"] and second["figures"] == first["figures"]
    (package / "judging" / "metrics.py").write_text("def summarize(): return 1\n")
    assert code_version(package)["figures"] != first["figures"]
    assert provenance(package, tracked=())["code"] == code_version(package)
    assert "code" not in provenance(tmp_path, tracked=())  # not a package: no code to hash
