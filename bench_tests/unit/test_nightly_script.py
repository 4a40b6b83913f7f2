"""ci/nightly.sbatch's own logic, run by bash with a stand-in environment whose python answers as
told: the exit status it makes of the suite's and the history check's, and the SIGTERM it passes
on to the suite. (The nightly through real Slurm: docs/measurements.md, "A nightly that ends
inside its time".)"""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.session.deadline import CUT_FOR_TIME_EXIT_STATUS as CUT

REPO = Path(__file__).resolve().parents[2]
STAND_IN = f"""#!/usr/bin/env bash
case "$*" in
    "-c import harness.plugin") exit 0 ;;
    -c*) exec {sys.executable} "$@" ;;
    "-m harness.report.history"*) exit "$HISTORY_RC" ;;
    "-m harness.report.site.publish"*) echo "published $*" >> "$LOG"; exit "$SITE_RC" ;;
    "-m pytest"*)
        [[ -z "$WAIT_FOR_TERM" ]] && exit "$SUITE_RC"
        trap 'kill "$sleeper"; echo "suite got SIGTERM" >> "$LOG"; exit 2' TERM
        sleep 30 &
        sleeper=$!
        echo started >> "$LOG"
        wait
        exit 9 ;;
esac
exit 3
"""


@pytest.fixture
def nightly(tmp_path):
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").write_text(STAND_IN)
    (venv / "python").chmod(0o755)
    (tmp_path / "history").mkdir()
    (tmp_path / "history" / "sys.jsonl").write_text("{}\n")  # the history check runs where the file has lines
    env = {**os.environ, "DLSCALE_REPO": str(REPO), "DLSCALE_VENV": str(venv.parent), "DLSCALE_DATA": str(tmp_path),
           "DLSCALE_SYSTEM": "sys", "DLSCALE_HISTORY_DIR": str(tmp_path / "history"),
           "DLSCALE_OUT": str(tmp_path / "out"), "LOG": str(tmp_path / "log")}

    def start(suite_rc=0, history_rc=0, wait_for_term="", site_rc=0):
        return subprocess.Popen(["bash", str(REPO / "ci" / "nightly.sbatch")], cwd=tmp_path, text=True,
                                env={**env, "SUITE_RC": str(suite_rc), "HISTORY_RC": str(history_rc),
                                     "WAIT_FOR_TERM": wait_for_term, "SITE_RC": str(site_rc)},
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    start.log = tmp_path / "log"
    return start


@pytest.mark.parametrize("suite_rc, history_rc, night_rc", [
    (0, 0, 0), (CUT, 0, CUT),  # a cut matrix says so
    (0, 1, 1), (CUT, 1, 1),  # a drop in the history outranks it
    (1, 0, 1), (2, 1, 2), (4, 0, 4),  # the suite's own failure, interrupt or usage error stand
])
def test_the_nights_exit_status(nightly, suite_rc, history_rc, night_rc):
    night = nightly(suite_rc, history_rc)
    output, _ = night.communicate(timeout=60)
    assert night.returncode == night_rc, output
    assert output.rstrip().endswith(f"exit status {night_rc}")


@pytest.mark.parametrize("site_rc", [0, 1])
def test_each_night_publishes_the_site_and_its_digest_whatever_it_found(nightly, tmp_path, site_rc):
    """A site that cannot be written is said, and leaves the night's status as it was."""
    night = nightly(1, 0, site_rc=site_rc)
    output, _ = night.communicate(timeout=60)
    assert night.returncode == 1, output
    published, = [line for line in nightly.log.read_text().splitlines() if line.startswith("published")]
    assert f"--out {REPO}/results/site --summary {tmp_path}/out/summary.md" in published
    assert ("nightly: the site was not published" in output) == bool(site_rc)


def test_slurms_sigterm_is_passed_on_to_the_suite_and_the_night_ends_with_its_status(nightly):
    night = nightly(wait_for_term="yes")
    deadline = time.monotonic() + 30
    while not (nightly.log.exists() and "started" in nightly.log.read_text()):
        assert time.monotonic() < deadline and night.poll() is None, "the suite never started"
        time.sleep(0.05)
    night.send_signal(signal.SIGTERM)  # what --signal=B:TERM@... sends the batch shell
    output, _ = night.communicate(timeout=60)
    assert "suite got SIGTERM" in nightly.log.read_text()
    assert "nightly: SIGTERM before the time limit: ending the suite" in output
    assert night.returncode == 2, output
