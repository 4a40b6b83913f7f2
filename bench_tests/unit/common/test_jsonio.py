import os
import signal
import subprocess
import sys

from harness.common.jsonio import remove_orphaned_temporaries, write_json_atomic


def test_a_writer_killed_mid_write_leaves_a_temporary_that_its_directorys_owner_removes(tmp_path):
    """What a SIGKILLed rank leaves: its temporary file, never a half-written target. The runner
    removes such files once the cell's processes are gone, and nothing else."""
    target = tmp_path / "progress-rank1.json"
    write_json_atomic(target, {"step": 1})
    code = ("import json, os, signal, sys, tempfile\n"
            "import harness.common.jsonio as jsonio\n"
            "def killed(*args, **kwargs):\n"
            "    os.kill(os.getpid(), signal.SIGKILL)\n"
            "json.dump = killed  # the writer dies between creating its temporary file and renaming it\n"
            f"jsonio.write_json_atomic({str(target)!r}, {{'step': 2}})\n")
    died = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert died.returncode == -signal.SIGKILL
    left = sorted(path.name for path in tmp_path.iterdir())
    assert len(left) == 2 and left[0].startswith(".progress-rank1.json.") and left[0].endswith(".tmp")
    (tmp_path / "notes.tmp").write_text("not ours")
    assert [path.name for path in remove_orphaned_temporaries(tmp_path)] == [left[0]]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["notes.tmp", "progress-rank1.json"]
    assert target.read_text().strip().replace(" ", "").replace("\n", "") == '{"step":1}'
