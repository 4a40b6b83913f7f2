"""harness.rank.contention: a rank's wait for a CPU, read from the kernel's schedstat, and the share of its
own cores' time that work outside its process tree took, read from /proc/stat and /proc/<pid>/stat."""
import os
import subprocess
import sys
import time

import pytest

from harness.judging.contention import launch_contended
from harness.judging.metrics import drop_leading_steps, pool_runs
from harness.rank import contention
from harness.rank.contention import (TICKS_PER_S, TICKS_UNCERTAIN_PER_CORE, RunQueueWait, outside_share, process_ticks,
                                     runqueue_waits, tree_ticks, wait_share)

BUSY = """
import time
from harness.rank.contention import RunQueueWait
waited = RunQueueWait()
end = time.process_time() + 1.0
while time.process_time() < end:
    pass
print(waited.read())
"""


def test_own_wait_is_a_number_per_thread_and_a_missing_process_has_none():
    waits = runqueue_waits()
    assert str(os.getpid()) in waits and all(ns >= 0 for ns in waits.values())
    assert runqueue_waits(2**22 + 7) is None
    assert RunQueueWait(2**22 + 7).read() is None


def test_a_thread_that_ended_between_readings_takes_nothing_away(monkeypatch):
    """The silence watchdog is restarted at each progress report: its old thread's count must not
    leave the step's wait (a process-wide sum read -0.0136 of the step time for a cell in CI)."""
    readings = iter([{"1": 1_000, "2": 9_000}, {"1": 1_500, "3": 200}, {"1": 1_600}])
    monkeypatch.setattr(contention, "runqueue_waits", lambda pid: next(readings))
    waited = RunQueueWait()
    assert waited.read() == pytest.approx(700e-9)  # thread 1's 500 ns and new thread 3's 200
    assert waited.read() == pytest.approx(100e-9)


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


def test_waits_are_trimmed_and_pooled_with_the_steps():
    record = {"rank": 0, "step_times": [1.0, 0.5, 0.5], "cpu_wait": [0.9, 0.0, 0.1], "images": 24, "window_s": 2.0}
    trimmed = drop_leading_steps([record], 1)
    assert trimmed[0]["cpu_wait"] == [0.0, 0.1]
    assert pool_runs([trimmed, trimmed])[0]["cpu_wait"] == [0.0, 0.1, 0.0, 0.1]


SPIN = "import os, time\nos.sched_setaffinity(0, {0})\nend = time.monotonic() + 1.5\nwhile time.monotonic() < end: pass"
RANK = """
import time
from harness.rank.contention import OutsideWork
work = OutsideWork({0})
time.sleep(2.0)
print(work.read())
"""


def test_a_childs_cpu_time_is_its_parents_own_alive_exited_and_reaped():
    """A DataLoader worker is the rank's child: its CPU time is the rank's own, not outside work."""
    before = tree_ticks()
    child = subprocess.Popen([sys.executable, "-c", SPIN])
    time.sleep(0.8)
    alive = tree_ticks() - before
    assert alive >= 0.2 * TICKS_PER_S and tree_ticks(child.pid) is not None
    while child.poll() is None and tree_ticks(child.pid) is not None:
        time.sleep(0.05)
    child.wait()
    assert tree_ticks() - before >= alive
    assert tree_ticks(2**22 + 7) is None


def test_another_process_on_the_ranks_core_is_outside_work():
    """A 'rank' owning core 0 sleeps 2 s while another process (as another job is) spins there for
    1.5 s. Any other load on core 0 adds to it, so only a lower limit holds on a shared machine."""
    outsider = subprocess.Popen([sys.executable, "-c", SPIN])
    rank = subprocess.run([sys.executable, "-c", RANK], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": os.getcwd()})
    outsider.wait()
    assert float(rank.stdout.strip()) > 1.0, rank.stdout + rank.stderr


def test_outside_share_is_the_worst_rank_over_its_own_cores_and_needs_every_rank():
    tick = 1 / TICKS_PER_S
    unresolved = TICKS_UNCERTAIN_PER_CORE * tick  # per core
    records = [{"rank": 0, "outside_cpu": [0.0, 0.1 + unresolved], "step_times": [0.5, 0.5], "cores": [0]},
               {"rank": 1, "outside_cpu": [0.4 + unresolved, 0.4 + unresolved], "step_times": [1.0, 1.0],
                "cores": [1, 2]}]
    assert outside_share(records) == pytest.approx(0.2)
    assert outside_share([records[0], {"rank": 1, "step_times": [1.0], "cores": [1]}]) is None
    assert outside_share([{"rank": 0, "outside_cpu": [0.1], "step_times": [1.0]}]) is None  # not bound: unknown


def test_a_window_too_short_for_the_tick_counters_reads_no_outside_work():
    """CI's far-below-baseline cell (5 steps, 0.39 s on 2 cores: 78 ticks) once read 4 ticks of
    counter noise and background as 5% outside work, and its fail was excused as contended."""
    tick = 1 / TICKS_PER_S
    noise = {"rank": 0, "outside_cpu": [tick, -tick, 2 * tick, 0.0, 2 * tick], "step_times": [0.078] * 5,
             "cores": [0, 1]}
    assert outside_share([noise]) == 0.0
    assert not launch_contended([noise], None)
    taken = {**noise, "outside_cpu": [0.03] * 5}  # a neighbour's 0.15 s of the cores' 0.78 s
    assert launch_contended([taken], None)


PROC_STAT = """cpu  {all} 0 {system} 90000 40 {irq} {softirq} {steal} 0 0
cpu0 {user} 0 {system} 45000 20 {irq} {softirq} {steal} 0 0
cpu1 7000 3 900 45000 20 50 60 5 0 0
intr 1234567 0 9 0
ctxt 98765
btime 1764400000
"""


def proc_stat(user, system, irq, softirq, steal):
    """/proc/stat's text where core 0 has spent these ticks (user, nice, system, idle, iowait, irq,
    softirq, steal, guest, guest_nice), core 1 the same in every reading."""
    return PROC_STAT.format(all=user + 7000, user=user, system=system, irq=irq, softirq=softirq, steal=steal)


def test_interrupt_time_on_the_ranks_cores_is_not_outside_work():
    """A rank owning core 0 ran 60 ticks of its own (its process tree's user and system time) while
    its collectives' packets took 25 ticks of hardware and soft interrupts there: the kernel charges
    those to the core, not to the rank, and they are no other job's. Another guest's steal is."""
    before = process_ticks(proc_stat(user=1000, system=200, irq=10, softirq=40, steal=3), {0})
    after = process_ticks(proc_stat(user=1050, system=210, irq=15, softirq=60, steal=3), {0})
    own = 60
    assert after - before - own == 0
    stolen = process_ticks(proc_stat(user=1050, system=210, irq=15, softirq=60, steal=11), {0})
    assert stolen - before - own == 8
    assert process_ticks(proc_stat(user=1000, system=200, irq=10, softirq=40, steal=3), {0, 1}) == before + 7908
