"""The step clocks' arithmetic: the host clock's parts follow its waits, and the event clock's
parts add up to the host-timed step. The CUDA events themselves run only on a GPU (ci/gpu_check.sh)."""
from __future__ import annotations

import time

import pytest

from harness.rank.clocks import HostClock, parts_from_events


def test_host_clock_parts_follow_each_wait():
    waits = []
    clock = HostClock(lambda: waits.append(time.perf_counter()))
    clock.start()
    for _ in range(3):
        time.sleep(0.01)
        clock.mark()
    parts = clock.finish()
    assert len(waits) == 3 and len(parts) == 3
    assert all(part >= 0.009 for part in parts)


def test_event_parts_add_up_to_the_step_and_the_batch_wait_takes_the_rest():
    parts = parts_from_events(0.040, [0.001, 0.035, 0.002])
    assert parts == pytest.approx([0.003, 0.035, 0.002])
    assert sum(parts) == pytest.approx(0.040)


def test_event_parts_never_make_a_negative_batch_wait():
    # the device's clock and the host's disagree by microseconds: no part may go below zero
    assert parts_from_events(0.0369, [0.0, 0.035, 0.002])[0] == 0.0
