"""A session given too little time for its matrix, as a user runs it (pytest in a subprocess, one
real tiny launch): the cells it cannot finish by their past durations are not started, the one it
measured is kept and judged, the rest are named in the summary and in results.json, and the exit
status says the matrix was cut."""
import json
import shutil

import pytest

from harness.session.deadline import CUT_FOR_TIME_EXIT_STATUS
from harness.store.history import append, make_row
from harness.store.history import read as read_history

from ..workloads import JUDGED_MODEL, SCALING_TEST, TEST_MODEL, TINY_FLAGS

pytestmark = pytest.mark.launch
G1, G2 = (f"ddp-synthetic-{TEST_MODEL}-g{ranks}" for ranks in (1, 2))
NEW = [f"ddp-synthetic-{JUDGED_MODEL}-g{ranks}" for ranks in (1, 2)]


def test_a_session_short_of_time_measures_what_fits_and_names_the_rest(pytester):
    """An hour left, of which the reserve keeps all but 100 s: g1 took 5 s last night and starts
    (judged against a band wide enough for any machine); g2 took an hour and is left; the cells of
    another model have no past and are expected to take the median of the others' (half an hour),
    so they are left too."""
    shutil.copy(SCALING_TEST, pytester.path / "test_scaling.py")
    baselines = pytester.path / "baselines"
    baselines.mkdir()
    (baselines / "testsys.json").write_text(json.dumps({"schema_version": 1, "cells": {G1: {"throughput": {
        "value": 100.0, "lower": -0.99, "upper": None, "unit": "img/s"}}}}))
    history = pytester.path / "history" / "testsys.jsonl"
    append(history, [make_row(G1, run_id="lastnight", verdict="pass", duration_s=5.0),
                     make_row(G2, run_id="lastnight", verdict="pass", duration_s=3600.0)])
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-m", "scaling", "-rs", "--system", "testsys",
                                           "--launcher", "torchrun", "--frameworks", "ddp", "--loaders", "synthetic",
                                           "--models", f"{TEST_MODEL},{JUDGED_MODEL}", "--gpus", "1,2",
                                           *TINY_FLAGS, "--measure-budget", "0", "--no-yardstick",
                                           "--results-json", "r.json",
                                           "--history-dir", str(history.parent),
                                           "--deadline", "1:00:00", "--deadline-reserve", "3500")
    assert result.ret == CUT_FOR_TIME_EXIT_STATUS, result.stdout.str()
    result.assert_outcomes(passed=1, skipped=3)
    left = sorted([G2, *NEW])
    result.stdout.fnmatch_lines(["dlscale: * s left (--deadline, ends *): a cell starts only where it can finish "
                                 "with 3500 s kept for the session's end; past durations known for 2 cell(s)",
                                 "*dlscale summary*", f"*{G1}*pass*",
                                 f"dlscale: the matrix was cut for time (--deadline, ends *): 3 cell(s) left "
                                 f"unmeasured: *; exit status {CUT_FOR_TIME_EXIT_STATUS} unless a cell failed",
                                 "*short test summary info*"])
    result.stdout.fnmatch_lines([f"SKIPPED*left unmeasured for time: needs ~4500 s, * s left (it took 3600 s last "
                                 "time, +25%; 3500 s kept for the session's end)"])
    result.stdout.fnmatch_lines(["SKIPPED [[]*[]]*left unmeasured for time: needs ~22* s, * s left (its duration "
                                 "unknown, the median of 2 known cell(s): 18* s, +25%; 3500 s kept*"])
    results = json.loads((pytester.path / "r.json").read_text())
    assert [(cell["cell"], cell["verdict"]) for cell in results["cells"]] == [(G1, "pass")]
    assert sorted(results["unmeasured_for_time"]) == left
    rows, problems = read_history(history)
    assert [row["cell"] for row in rows] == [G1, G2, G1] and not problems  # the night's g1 kept, nothing lost
