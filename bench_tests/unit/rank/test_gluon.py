"""The MXNet runtime's parts that need no MXNet: the ps-lite environment each process of a
``dist_sync`` job gets from its rank, the checks around starting the scheduler, and the device
choice made before MXNet loads. Runs in the main environment, which has no mxnet."""
import socket
import subprocess
import sys

import pytest

from harness.rank.frameworks.mxnet import (Loss, MXNetAdapter, claim_port, process_environment,
                                           wait_until_listening)
from harness.rank.gluon.runtime import MXNetRuntime, nvidia_gpus_present
from harness.rank.rankenv import PORTS_ABOVE_MASTER, RankInfo


def rank_info(rank: int, world_size: int, master_port: int = 29500) -> RankInfo:
    return RankInfo(rank=rank, world_size=world_size, local_rank=rank, local_world_size=world_size,
                    master_addr="node-a", master_port=master_port, source="slurm")


def test_a_worker_finds_the_scheduler_next_to_the_rendezvous_port():
    env = process_environment({}, rank_info(1, 2), "worker", node_host="10.0.0.7")
    assert env == {"DMLC_ROLE": "worker", "DMLC_PS_ROOT_URI": "node-a", "DMLC_PS_ROOT_PORT": "29501",
                   "DMLC_NUM_SERVER": "1", "DMLC_NUM_WORKER": "2", "PORT": "29503", "DMLC_NODE_HOST": "10.0.0.7"}


def test_workers_listen_in_rank_order_apart_from_the_scheduler_and_the_server():
    """ps-lite numbers a host's workers by ascending port: rank order makes kv.rank the launcher's rank."""
    world = [rank_info(rank, 4) for rank in range(4)]
    workers = [int(process_environment({}, rank, "worker")["PORT"]) for rank in world]
    server = int(process_environment({}, world[0], "server")["PORT"])
    scheduler = int(process_environment({}, world[0], "scheduler")["DMLC_PS_ROOT_PORT"])
    assert workers == sorted(workers) and len({*workers, server, scheduler}) == 6
    assert all(process_environment({}, rank, "worker")["DMLC_PS_ROOT_PORT"] == str(scheduler) for rank in world)


def test_every_ps_lite_port_lies_in_the_block_the_runner_keeps_free():
    """The runner checks MASTER_PORT .. MASTER_PORT + ranks + PORTS_ABOVE_MASTER (rankenv.launch_port_block)."""
    world = [rank_info(rank, 4) for rank in range(4)]
    ports = [int(process_environment({}, rank, "worker")["PORT"]) for rank in world]
    ports += [int(process_environment({}, world[0], "server")["PORT"]),
              int(process_environment({}, world[0], "scheduler")["DMLC_PS_ROOT_PORT"])]
    assert 29500 < min(ports) and max(ports) <= 29500 + 4 + PORTS_ABOVE_MASTER


def test_serving_ranks_are_ps_lites_servers_and_the_others_its_workers():
    """mxnet_ps_*: of 5 ranks the last 2 serve; every process listens on a port of its own."""
    world = [rank_info(rank, 5) for rank in range(5)]
    roles = ["worker"] * 3 + ["server"] * 2
    envs = [process_environment({}, rank, role, serving_ranks=2) for rank, role in zip(world, roles)]
    assert {(env["DMLC_NUM_SERVER"], env["DMLC_NUM_WORKER"]) for env in envs} == {("2", "3")}
    assert [int(env["PORT"]) for env in envs] == list(range(29502, 29507))
    assert process_environment({}, world[0], "scheduler", serving_ranks=2)["DMLC_PS_ROOT_PORT"] == "29501"


def test_the_scheduler_binds_every_interface_so_the_rendezvous_may_be_a_host_name():
    env = process_environment({}, rank_info(0, 2), "scheduler", node_host="10.0.0.7")
    assert env["DMLC_ROLE"] == "scheduler" and env["DMLC_USE_KUBERNETES"] == "1"
    assert "PORT" not in env and "DMLC_NODE_HOST" not in env


def test_leftover_ps_lite_variables_do_not_reach_the_job():
    """A DMLC_RANK already set keeps ps-lite from recording the id its scheduler assigns."""
    base = {"DMLC_RANK": "5", "PORT": "8080", "DMLC_INTERFACE": "ib0", "DLSCALE_RUN_TOKEN": "abc", "PATH": "/bin"}
    env = process_environment(base, rank_info(0, 2), "server")
    assert env["DLSCALE_RUN_TOKEN"] == "abc" and env["PATH"] == "/bin"
    assert "DMLC_RANK" not in env and "DMLC_INTERFACE" not in env and env["PORT"] == "29504"


def test_roles_and_ports_out_of_range_are_refused():
    with pytest.raises(ValueError, match="unknown ps-lite role 'client'"):
        process_environment({}, rank_info(0, 2), "client")
    with pytest.raises(ValueError, match="leaves no room above it for ps-lite's 10 ports"):
        process_environment({}, rank_info(0, 8, master_port=65530), "worker")


def test_a_taken_scheduler_port_is_named():
    with socket.socket() as holder:
        holder.bind(("", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(RuntimeError, match=f"scheduler port {port} .* is taken"):
            claim_port(port)


def test_a_role_that_exits_before_the_scheduler_listens_is_named():
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    child = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    child.wait()
    with pytest.raises(RuntimeError, match=r"MXNet's server \(pid \d+\) exited with 3"):
        wait_until_listening("127.0.0.1", port, {"server": child}, timeout_s=5)


def test_the_wait_ends_once_the_scheduler_listens():
    with socket.socket() as scheduler:
        scheduler.bind(("127.0.0.1", 0))
        scheduler.listen()
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        try:
            wait_until_listening("127.0.0.1", scheduler.getsockname()[1], {"scheduler": child}, timeout_s=5)
        finally:
            child.kill()
            child.wait()


def test_the_loop_reads_a_loss_with_float():
    class Scalar:
        def asscalar(self):
            return 2.5

    assert float(Loss(Scalar())) == 2.5


def test_an_adapter_that_never_joined_shuts_down_quietly():
    MXNetAdapter().shutdown()


def test_a_cpu_rank_is_placed_without_loading_mxnet(tmp_path):
    assert str(MXNetRuntime().pick_device("cpu", 0)) == "cpu"
    assert "mxnet" not in sys.modules
    assert not nvidia_gpus_present(tmp_path / "absent")
    (tmp_path / "gpus").mkdir()
    assert not nvidia_gpus_present(tmp_path / "gpus")
    (tmp_path / "gpus" / "0000:17:00.0").mkdir()
    assert nvidia_gpus_present(tmp_path / "gpus")


def test_a_servers_updater_counts_timed_rounds_of_every_key_and_sums_the_averages():
    """mxnet_ps_*'s server (no MXNet needed: numpy arrays stand in for NDArrays, as both add in place)."""
    import numpy as np

    from harness.rank.frameworks.mxnet import AVERAGE_KEY
    from harness.rank.frameworks.mxnet_ps import UpdateCounter

    heard, ticks = [], iter(range(100))
    counter = UpdateCounter(lambda *args: heard.append(args), expected=2, clock=lambda: float(next(ticks)))
    weights = {key: np.zeros(2) for key in (0, 1)}
    counter(0, np.ones(2), weights[0])  # before the optimizer: the server stores what it gets
    assert weights[0].tolist() == [1.0, 1.0]
    counter.optimizer_updater = lambda key, gradient, weight: weight.__isub__(0.5 * gradient)
    counter(1, np.ones(2), weights[1])  # warm-up: applied, not counted
    counter.window_starts()
    for key in (0, 1, 0):
        counter(key, np.ones(2), weights[key])
    assert counter.stats.updates == 1 and heard == [("timed", 1, 2)]  # key 1 has had one timed update
    counter(1, np.ones(2), weights[1])
    assert weights[0].tolist() == [0.0, 0.0] and weights[1].tolist() == [-1.5, -1.5]
    assert counter.stats.to_json()["timed_updates"] == 2 and heard[-1] == ("timed", 2, 2)
    assert counter.stats.to_json()["updates_per_s"] == 2 / (counter.stats.last_update - counter.stats.first_arrival)
    total = np.zeros(1)
    for value in (3.0, 5.0):
        counter(AVERAGE_KEY + 4, np.array([value]), total)
    assert total.tolist() == [8.0] and counter.stats.updates == 2


def test_a_servers_updates_beyond_the_window_are_the_counted_steps_never_timed_ones():
    import numpy as np

    from harness.rank.frameworks.mxnet_ps import UpdateCounter

    ticks = iter(range(100))
    counter = UpdateCounter(lambda *args: None, expected=2, clock=lambda: float(next(ticks)))
    counter.optimizer_updater = lambda key, gradient, weight: weight.__isub__(gradient)
    weights = {0: np.zeros(3, dtype=np.float32), 1: np.zeros(5, dtype=np.float64)}
    assert counter.served_work() == {"not_counted": "no worker counted a step (counting turned off, or failed: "
                                                    "see the workers' work)"}
    counter.window_starts()
    for key in (0, 1, 0, 1):  # the window's two rounds
        counter(key, np.ones_like(weights[key]), weights[key])
    for key in (0, 1):  # the counted step's round
        counter(key, np.ones_like(weights[key]), weights[key])
    assert counter.stats.updates == 2 and weights[0].tolist() == [-3.0] * 3  # applied, not timed
    assert counter.served_work() == {"applied": {"calls": 2, "bytes": 3 * 4 + 5 * 8}, "steps": 1,
                                     "by_worker_not_counted": "ps-lite names no worker to the server's updater"}
