"""TensorFlow workers outside Slurm meet in the launch's directory; the module imports no TensorFlow
until a rank sets up, so this runs without it."""
import threading

import pytest

from harness.rank.frameworks.tensorflow import published_cluster
from harness.rank.rankenv import RankInfo


def rank(number: int, world: int) -> RankInfo:
    return RankInfo(rank=number, world_size=world, local_rank=number, local_world_size=world,
                    master_addr="127.0.0.1", master_port=29500, source="openmpi")


def test_every_rank_reads_the_same_cluster_in_rank_order(tmp_path):
    found = {}
    threads = [threading.Thread(target=lambda n=n: found.setdefault(n, published_cluster(rank(n, 3), tmp_path, 30)))
               for n in (2, 0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert found[0] == found[1] == found[2] and len(set(found[0])) == 3
    assert all(address.startswith("127.0.0.1:") for address in found[0])


def test_a_rank_that_never_publishes_is_named(tmp_path):
    with pytest.raises(TimeoutError, match=r"rank\(s\) 1 did not publish"):
        published_cluster(rank(0, 2), tmp_path, timeout_s=0.3)
