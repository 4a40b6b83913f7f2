import os
import subprocess
import sys

import pytest

from harness.binding import cores_for


def test_each_local_rank_takes_its_own_block_of_the_allowed_cores():
    assert cores_for({0, 1, 2, 3}, 0, 2) == [0, 1]
    assert cores_for({0, 1, 2, 3}, 1, 2) == [2, 3]
    assert cores_for([5, 3, 4, 6], 1, 1) == [4]  # in core order, whatever the set's order


def test_a_rank_its_launcher_already_bound_keeps_its_cores():
    assert cores_for({6, 7}, 1, 2) == [6, 7]  # srun --cpu-bind / mpirun --bind-to core gave it exactly its share
    assert cores_for({3}, 0, 1) == [3]


def test_ranks_that_do_not_fit_say_which_cores_they_needed():
    with pytest.raises(ValueError, match=r"local rank 2 needs cores 2-2 of the 2 it may use \(0-1\)"):
        cores_for({0, 1}, 2, 1)
    with pytest.raises(ValueError, match="at least 1"):
        cores_for({0, 1}, 0, 0)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_bind_pins_every_thread_and_sizes_the_thread_pools():
    code = ("import os, threading, time\n"
            "started = threading.Event()\n"
            "threading.Thread(target=lambda: (started.set(), time.sleep(5)), daemon=True).start(); started.wait()\n"
            "from harness.binding import bind\n"
            "cores = bind(1, 1)\n"
            "pinned = {tuple(sorted(os.sched_getaffinity(int(t)))) for t in os.listdir('/proc/self/task')}\n"
            "print(cores, sorted(pinned), os.environ['OMP_NUM_THREADS'])\n")
    allowed = sorted(os.sched_getaffinity(0))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == f"[{allowed[1]}] [({allowed[1]},)] 1"
