"""TensorFlow workers outside Slurm meet in the launch's directory; the module imports no TensorFlow
until a rank sets up, so this runs without it."""
import threading

import pytest

from harness.rank.frameworks.tensorflow import published_cluster
from harness.rank.rankenv import PORTS_ABOVE_MASTER, RankInfo, spare_port


def rank(number: int, world: int) -> RankInfo:
    return RankInfo(rank=number, world_size=world, local_rank=number, local_world_size=world,
                    master_addr="127.0.0.1", master_port=29500, source="openmpi")


def clusters_every_rank_read(world: int, workdir, order=None) -> dict[int, list[str]]:
    """What each of ``world`` ranks, publishing at once (in ``order``), read as the cluster."""
    found = {}
    threads = [threading.Thread(target=lambda n=n: found.setdefault(n, published_cluster(rank(n, world), workdir, 30)))
               for n in order or range(world)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return found


def test_every_rank_reads_the_same_cluster_in_rank_order(tmp_path):
    found = clusters_every_rank_read(3, tmp_path, order=(2, 0, 1))
    assert found[0] == found[1] == found[2] and len(set(found[0])) == 3
    assert all(address.startswith("127.0.0.1:") for address in found[0])


def test_a_rank_that_never_publishes_is_named(tmp_path):
    with pytest.raises(TimeoutError, match=r"rank\(s\) 1 did not publish"):
        published_cluster(rank(0, 2), tmp_path, timeout_s=0.3)


def test_every_tensorflow_port_lies_in_the_block_the_runner_keeps_free(tmp_path):
    """The runner checks MASTER_PORT .. MASTER_PORT + ranks + PORTS_ABOVE_MASTER free, outside the
    kernel's ephemeral range (rankenv.launch_port_block): each rank's server and the parameter-server
    chief take their ports there, not from the kernel, where any connection may take them first."""
    world = 4
    found = clusters_every_rank_read(world, tmp_path)
    ports = [int(address.rsplit(":", 1)[1]) for address in found[0]] + [spare_port(rank(0, world))]
    assert len(set(ports)) == world + 1
    assert 29500 < min(ports) and max(ports) <= 29500 + world + PORTS_ABOVE_MASTER
