"""The progress file the runner reads: throttled within a phase, but a phase's first and last steps
are always written (a drill waits for both ranks to report their timed steps, and a rank may hang
at the step after its first timed one)."""
import json

from harness.rank.worker import ProgressFile


def test_a_new_phase_is_written_at_once_and_steps_within_the_interval_are_not(tmp_path):
    path = tmp_path / "progress-rank1.json"
    writes = []
    progress = ProgressFile(path, rank=1, interval=3600.0, on_write=lambda: writes.append(json.loads(path.read_text())))
    for phase, step, of in [("setup", 0, 1), ("warmup", 1, 2), ("warmup", 2, 2), ("timed", 1, 5), ("timed", 2, 5),
                            ("timed", 5, 5)]:
        progress(phase, step, of)
    assert [(w["phase"], w["step"]) for w in writes] == [("setup", 0), ("warmup", 1), ("warmup", 2), ("timed", 1),
                                                         ("timed", 5)]
