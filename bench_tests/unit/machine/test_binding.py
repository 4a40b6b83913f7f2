import os
import subprocess
import sys

import pytest

from harness.machine.binding import cores_for, cores_near_gpu, gpu_local_cores, halves, parse_cpulist, physical_cores


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
            "from harness.machine.binding import bind\n"
            "cores = bind(1, 1)\n"
            "pinned = {tuple(sorted(os.sched_getaffinity(int(t)))) for t in os.listdir('/proc/self/task')}\n"
            "print(cores, sorted(pinned), os.environ['OMP_NUM_THREADS'])\n")
    allowed = sorted(os.sched_getaffinity(0))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == f"[{allowed[1]}] [({allowed[1]},)] 1"


# A two-socket GPU node as sysfs describes it: GPUs 0 and 1 on socket 0 (cores 0-7), 2 and 3 on
# socket 1 (cores 8-15).
SOCKETS = [list(range(0, 8)), list(range(0, 8)), list(range(8, 16)), list(range(8, 16))]


def test_a_gpu_rank_takes_its_share_of_the_cores_nearest_its_gpu():
    allowed = range(16)
    assert [cores_near_gpu(allowed, SOCKETS, rank) for rank in range(4)] == [
        [0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]
    # two ranks on a four-GPU node: each has its socket to itself
    assert cores_near_gpu(allowed, SOCKETS[1:3], 0) == list(range(0, 8))
    assert cores_near_gpu(allowed, SOCKETS[1:3], 1) == list(range(8, 16))


def test_a_gpu_rank_stays_as_started_where_its_cores_are_unknown_or_not_its_to_use():
    assert cores_near_gpu(range(16), [None, SOCKETS[1]], 0) is None
    assert cores_near_gpu(range(8, 16), SOCKETS[:2], 0) is None  # the launcher gave it the other socket
    assert cores_near_gpu(range(16), [list(range(8))] * 16, 3) is None  # fewer local cores than ranks
    # a launcher that bound the rank to part of its socket (srun --cpu-bind): the rank keeps that part
    assert cores_near_gpu([4, 5, 6], SOCKETS[:2], 1) == [4, 5, 6]


def test_the_cores_local_to_a_pci_device_come_from_sysfs(tmp_path):
    device = tmp_path / "0000:c1:00.0"
    device.mkdir()
    (device / "local_cpulist").write_text("48-63,176-191\n")
    assert gpu_local_cores(0, 0xC1, 0, sysfs=tmp_path) == [*range(48, 64), *range(176, 192)]
    assert gpu_local_cores(0, 0xC2, 0, sysfs=tmp_path) is None
    assert parse_cpulist("0-2,5") == [0, 1, 2, 5] and parse_cpulist("7") == [7]


def _topology(tmp_path, siblings: dict[int, str]):
    for cpu, listed in siblings.items():
        (tmp_path / f"cpu{cpu}" / "topology").mkdir(parents=True)
        (tmp_path / f"cpu{cpu}" / "topology" / "thread_siblings_list").write_text(listed + "\n")
    return tmp_path


def test_a_duet_halves_the_node_by_whole_physical_cores(tmp_path):
    sysfs = _topology(tmp_path, {0: "0,2", 1: "1,3", 2: "0,2", 3: "1,3"})
    assert physical_cores([0, 1, 2, 3], sysfs) == [[0, 2], [1, 3]]
    assert halves([0, 1, 2, 3], sysfs) == ([0, 2], [1, 3])
    assert halves([0, 1], _topology(tmp_path / "plain", {0: "0", 1: "1"})) == ([0], [1])


def test_halves_that_would_share_a_physical_core_are_refused(tmp_path):
    sysfs = _topology(tmp_path, {0: "0-1", 1: "0-1"})
    with pytest.raises(ValueError, match=r"1 physical core\(s\) \(hardware threads 0-1 share one\)"):
        halves([0, 1], sysfs)
    with pytest.raises(ValueError, match="3 physical core"):
        halves([0, 1, 2], _topology(tmp_path / "odd", {0: "0", 1: "1", 2: "2"}))


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_a_rank_binds_within_its_half_whatever_it_was_started_with():
    allowed = sorted(os.sched_getaffinity(0))
    code = (f"import os\nos.sched_setaffinity(0, [{allowed[0]}])\n"  # as a launcher that bound it elsewhere
            "from harness.machine.binding import bind\n"
            f"print(bind(0, 1, within=[{allowed[1]}]), sorted(os.sched_getaffinity(0)))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == f"[{allowed[1]}] [{allowed[1]}]"
