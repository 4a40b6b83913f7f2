"""Which cells a session with a deadline starts, by their past durations: known, unknown, none
known, the safety margin and the reserve for the session's end; and where the durations come from."""
import json
import os

import pytest

from harness.session import deadline
from harness.session.deadline import SAFETY_FACTOR, Deadline, reason_to_leave
from harness.store.history import append, make_row

DURATIONS = {"a-g1": 40.0, "b-g1": 100.0, "c-g2": 60.0}


def test_a_cell_that_fits_with_its_margin_is_started():
    assert reason_to_leave("a-g1", DURATIONS, left_s=40 * SAFETY_FACTOR + 120, reserve_s=120) is None


def test_a_cell_that_fits_only_without_its_margin_is_left():
    reason = reason_to_leave("a-g1", DURATIONS, left_s=40 * SAFETY_FACTOR + 119, reserve_s=120)
    assert reason == ("left unmeasured for time: needs ~50 s, 49 s left (it took 40 s last time, +25%; "
                      "120 s kept for the session's end)")


def test_the_reserve_for_the_end_is_not_spent_on_cells():
    assert reason_to_leave("a-g1", DURATIONS, left_s=100, reserve_s=0) is None
    assert reason_to_leave("a-g1", DURATIONS, left_s=100, reserve_s=60) is not None


def test_a_cell_of_unknown_duration_is_expected_to_take_the_median_of_the_known():
    assert reason_to_leave("new-g4", DURATIONS, left_s=60 * SAFETY_FACTOR, reserve_s=0) is None
    reason = reason_to_leave("new-g4", DURATIONS, left_s=60 * SAFETY_FACTOR - 1, reserve_s=0)
    assert "needs ~75 s, 74 s left (its duration unknown, the median of 3 known cell(s): 60 s" in reason


def test_with_no_duration_known_every_cell_is_started():
    assert reason_to_leave("new-g4", {}, left_s=1, reserve_s=120) is None


def test_past_the_deadline_the_time_left_reads_zero():
    assert "needs ~50 s, 0 s left" in reason_to_leave("a-g1", DURATIONS, left_s=30, reserve_s=120)


def test_what_the_session_measured_counts_beside_the_past():
    """A cell measured tonight stands for the median of unknown cells, and its own figure for itself."""
    late = Deadline(ends_at=1000.0, source="--deadline", reserve_s=0, past={"a-g1": 10.0})
    assert late.reason_to_leave("new-g4", {}, now=980) is None  # 12.5 s fits in 20
    assert late.reason_to_leave("new-g4", {"b-g1": 30.0}, now=980) is not None  # the median is 20 s now
    assert late.reason_to_leave("a-g1", {"a-g1": 20.0}, now=980) is not None


def test_the_latest_history_line_with_a_duration_is_the_cells():
    rows = [{"cell": "a-g1", "duration_s": 50.0}, {"cell": "a-g1", "duration_s": 41.5}, {"cell": "a-g1"},
            {"cell": "b-g1", "kind": "accepted"}]
    assert deadline.history_durations(rows) == {"a-g1": 41.5}


def test_results_files_give_wall_seconds_of_their_system_newest_first():
    newest = {"system": "vm", "cells": [{"cell": "a-g1", "wall_s": 30.0}], "accuracy_cells": []}
    older = {"system": "vm", "cells": [{"cell": "a-g1", "wall_s": 90.0}, {"cell": "b-g1", "wall_s": 70.0}],
             "accuracy_cells": [{"cell": "accuracy-x", "wall_s": 200.0}]}
    other = {"system": "gpu:booster", "cells": [{"cell": "c-g2", "wall_s": 5.0}]}
    assert deadline.results_durations([newest, other, older], "vm") == {"a-g1": 30.0, "b-g1": 70.0,
                                                                        "accuracy-x": 200.0}


def write_results(path, cells, system="vm", mtime=None):
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"system": system, "cells": [{"cell": cell, "wall_s": wall} for cell, wall in
                                                             cells.items()], "accuracy_cells": []}))
    if mtime:
        os.utime(path, (mtime, mtime))


def test_past_durations_take_the_history_first_and_earlier_results_for_the_rest(tmp_path):
    """A history without ``duration_s`` (lines written before it) leaves the cells to the results
    files of earlier sessions beside this one's (the nightly's results/nightly/<night>/)."""
    history = tmp_path / "history" / "vm.jsonl"
    append(history, [make_row("a-g1", run_id="r1", verdict="pass", duration_s=41.0),
                     make_row("b-g1", run_id="r1", verdict="pass")])
    nights = tmp_path / "results" / "nightly"
    write_results(nights / "2026-12-02-7" / "results.json", {"a-g1": 99.0, "b-g1": 80.0}, mtime=1_000_000)
    write_results(nights / "2026-12-03-8" / "results.json", {"b-g1": 65.0}, mtime=2_000_000)
    tonight = nights / "2026-12-04-9" / "results.json"
    assert deadline.past_durations(history, tonight, "vm", ["a-g1", "b-g1"]) == {"a-g1": 41.0, "b-g1": 65.0}
    assert deadline.past_durations(None, None, "vm", ["a-g1"]) == {}


def test_the_earlier_results_are_read_only_until_every_cell_is_known(tmp_path):
    nights = tmp_path / "results"
    write_results(nights / "new" / "results.json", {"a-g1": 30.0}, mtime=2_000_000)
    (nights / "old").mkdir()
    (nights / "old" / "results.json").write_text("{not json")  # would be skipped, and is never read
    assert deadline.past_durations(None, nights / "now" / "results.json", "vm", ["a-g1"]) == {"a-g1": 30.0}
    assert deadline.past_durations(None, nights / "now" / "results.json", "vm", ["a-g1", "z-g1"]) == {"a-g1": 30.0}


def test_the_session_deadline_comes_from_slurm_with_the_cells_past(tmp_path):
    history = tmp_path / "vm.jsonl"
    append(history, [make_row("a-g1", run_id="r1", verdict="pass", duration_s=41.0)])
    found = deadline.session_deadline(None, 120, {"SLURM_JOB_ID": "42"}, 1000.0, history=history, results_json=None,
                                      system="vm", cell_ids=["a-g1"], run=lambda command: "10:00")
    assert found == Deadline(ends_at=1600.0, source="the time limit of the Slurm job 42", reserve_s=120,
                             past={"a-g1": 41.0})
    assert deadline.session_deadline(None, 120, {}, 1000.0, history=history, results_json=None, system="vm",
                                     cell_ids=["a-g1"]) is None
    with pytest.raises(ValueError, match="not a deadline"):
        deadline.session_deadline("tomorrow", 120, {}, 1000.0, history=None, results_json=None, system="vm",
                                  cell_ids=[])


def test_the_summary_names_the_cells_left_and_the_exit_status():
    line = Deadline(ends_at=0.0, source="--deadline", reserve_s=0, past={}).cut_line(["b-g1", "c-g2"])
    assert line == ("dlscale: the matrix was cut for time (--deadline, ends 00:00:00 UTC): 2 cell(s) left "
                    "unmeasured: b-g1, c-g2; exit status 6 unless a cell failed")
