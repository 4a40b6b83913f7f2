"""The package sets baselines were recorded with: kept once by content hash, read back, compared."""
import json
from pathlib import Path

from harness.machine.provenance import environment_id, installed_packages, provenance
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

