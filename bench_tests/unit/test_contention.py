"""harness.contention: a rank's wait for a CPU, read from the kernel's schedstat."""
import os
import subprocess
import sys

import pytest

from harness.contention import contended, distrust, runqueue_wait_s, wait_share
from harness.metrics import drop_leading_steps, pool_runs
from harness.stats import Verdict

BUSY = """
import time
from harness.contention import runqueue_wait_s
end = time.process_time() + 1.0
while time.process_time() < end:
    pass
print(runqueue_wait_s())
"""


def test_own_wait_is_a_number_and_a_missing_process_has_none():
    assert runqueue_wait_s() >= 0
    assert runqueue_wait_s(2**22 + 7) is None


def test_more_busy_processes_than_cores_wait_for_them():
    count = 2 * (os.cpu_count() or 1) + 1
    children = [subprocess.Popen([sys.executable, "-c", BUSY], stdout=subprocess.PIPE, text=True)
                for _ in range(count)]
    waits = [float(child.communicate(timeout=120)[0]) for child in children]
    # each needs 1 s of CPU with more than twice as many processes as cores: together they wait
    # for well over a second (about count/2 seconds)
    assert sum(waits) > 1.0, waits


def test_share_is_the_worst_rank_over_its_steps_and_needs_every_rank():
    records = [{"rank": 0, "cpu_wait": [0.0, 0.1], "step_times": [0.5, 0.5]},
               {"rank": 1, "cpu_wait": [0.3, 0.1], "step_times": [1.0, 1.0]}]
    assert wait_share(records) == pytest.approx(0.2)
    assert wait_share([records[0], {"rank": 1, "step_times": [1.0, 1.0]}]) is None
    assert wait_share([{"rank": 0, "cpu_wait": [0.1], "step_times": [1.0, 1.0]}]) is None
    assert wait_share([]) is None


def test_a_fail_is_distrusted_only_when_the_wait_grew_past_the_baseline():
    fail = Verdict(kind="fail", message="throughput -20%")
    assert distrust(fail, 0.02, 0.01) == fail
    assert distrust(fail, 0.30, 0.28) == fail  # a cell whose own workers always make it wait
    grown = distrust(fail, 0.20, 0.01)
    assert grown.kind == "inconclusive" and "waited for a CPU for 20% of the step time" in grown.message and "1% when" in grown.message
    unknown = distrust(fail, 0.20, None)
    assert unknown.kind == "fail" and "other work on the node?" in unknown.message
    passing = Verdict(kind="pass", message="ok")
    assert distrust(passing, 0.5, 0.0) == passing
    assert contended(0.2, 0.1) and not contended(0.2, None) and not contended(None, 0.0)


def test_waits_are_trimmed_and_pooled_with_the_steps():
    record = {"rank": 0, "step_times": [1.0, 0.5, 0.5], "cpu_wait": [0.9, 0.0, 0.1], "images": 24, "window_s": 2.0}
    trimmed = drop_leading_steps([record], 1)
    assert trimmed[0]["cpu_wait"] == [0.0, 0.1]
    assert pool_runs([trimmed, trimmed])[0]["cpu_wait"] == [0.0, 0.1, 0.0, 0.1]
