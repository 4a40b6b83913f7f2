import pytest

import socket

from harness.rank.rankenv import (PORTS_ABOVE_MASTER, RankEnvironmentError, bindable, ephemeral_range,
                                  launch_port_block, port_ranges_outside, read_rank_info)

RENDEZVOUS = {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}


def test_torchrun_variables():
    info = read_rank_info({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", **RENDEZVOUS})
    assert (info.rank, info.world_size, info.local_rank, info.local_world_size) == (3, 4, 1, 2)
    assert (info.master_addr, info.master_port, info.source) == ("10.0.0.1", 29500, "torchrun")


def test_open_mpi_variables_win_over_an_enclosing_slurm_batch_step():
    env = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
           "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "SLURM_PROCID": "0", "SLURM_NTASKS": "1", **RENDEZVOUS}
    info = read_rank_info(env)
    assert (info.rank, info.world_size, info.local_rank, info.source) == (1, 2, 1, "openmpi")


def test_slurm_variables_take_the_first_node_as_rendezvous_host():
    env = {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_STEP_TASKS_PER_NODE": "4(x2)",
           "SLURM_STEP_NODELIST": "gpu[07-08]", "MASTER_PORT": "29400"}
    info = read_rank_info(env)
    assert (info.rank, info.world_size, info.local_rank, info.local_world_size) == (5, 8, 1, 4)
    assert (info.master_addr, info.source) == ("gpu07", "slurm")


@pytest.mark.parametrize("nodelist, first", [
    ("node[03-05,07],gpu1", "node03"), ("gpu1,node[1-2]", "gpu1"), ("host", "host"), ("a,b", "a"),
])
def test_slurm_node_lists(nodelist, first):
    env = {"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_STEP_NODELIST": nodelist, "MASTER_PORT": "1"}
    assert read_rank_info(env).master_addr == first


def test_no_launcher_names_the_variables_it_looked_for():
    with pytest.raises(RankEnvironmentError, match="srun, mpirun or torchrun"):
        read_rank_info({"HOME": "/root"})


def test_rank_outside_world_is_refused():
    with pytest.raises(RankEnvironmentError, match="rank 4 of world size 4"):
        read_rank_info({"RANK": "4", "WORLD_SIZE": "4", **RENDEZVOUS})


def test_missing_rendezvous_port_is_named():
    with pytest.raises(RankEnvironmentError, match="MASTER_PORT"):
        read_rank_info({"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "h"})


def test_horovodrun_gloo_variables():
    env = {"HOROVOD_RANK": "1", "HOROVOD_SIZE": "2", "HOROVOD_LOCAL_RANK": "1", "HOROVOD_LOCAL_SIZE": "2",
           "HOROVOD_GLOO_RENDEZVOUS_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "SLURM_PROCID": "0", "SLURM_NTASKS": "1"}
    info = read_rank_info(env)
    assert (info.rank, info.world_size, info.local_world_size, info.master_addr, info.source) == (
        1, 2, 2, "127.0.0.1", "horovodrun")


def test_deepspeed_launcher_says_local_size():
    info = read_rank_info({"RANK": "0", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "LOCAL_SIZE": "2", **RENDEZVOUS})
    assert info.local_world_size == 2


def test_a_ranks_own_address_is_the_one_its_route_to_the_rendezvous_leaves_by():
    from harness.rank.rankenv import address_toward

    assert address_toward("127.0.0.1", 29500) == "127.0.0.1"
    assert address_toward("no-such-host.invalid", 29500) is None


def test_a_launchs_port_block_lies_outside_the_ephemeral_range_and_is_free_throughout():
    low, high = ephemeral_range()
    for _ in range(20):
        base = launch_port_block(ranks=3)
        block = range(base, base + 3 + PORTS_ABOVE_MASTER + 1)
        assert block[-1] < low or block[0] > high
        assert all(bindable(port) for port in block)


def test_a_port_something_listens_on_is_not_bindable():
    with socket.socket() as listener:
        listener.bind(("", 0))
        listener.listen()
        assert not bindable(listener.getsockname()[1])


def test_port_blocks_fit_below_or_above_the_ephemeral_range_or_nowhere():
    assert port_ranges_outside((32768, 60999), size=8) == [(10000, 32760), (61000, 65528)]
    assert port_ranges_outside((1024, 65535), size=8) == []


def test_the_ephemeral_range_is_the_kernels_or_linuxs_default(tmp_path):
    (tmp_path / "range").write_text("40000\t50000\n")
    assert ephemeral_range(tmp_path / "range") == (40000, 50000)
    assert ephemeral_range(tmp_path / "missing") == (32768, 60999)
