"""The parameter server's update rules (harness.rank.frameworks.ps_shards), without RPC: sharding,
the synchronous mean over every worker's gradient, the asynchronous update on arrival, and the
staleness and update rate it records."""
from __future__ import annotations

import itertools

import pytest
import torch

from harness.judging.servers import server_rows, server_summary
from harness.rank.frameworks.ps_shards import Shard, assign_shards


def sgd(tensors):
    return torch.optim.SGD(tensors, lr=1.0)


def test_shards_balance_the_servers_element_counts_the_same_on_every_rank():
    sizes = [100, 1, 60, 50, 2, 3]
    owner = assign_shards(sizes, 2)
    loads = [sum(size for size, server in zip(sizes, owner) if server == s) for s in range(2)]
    assert sorted(loads) == [106, 110] and owner == assign_shards(sizes, 2)
    assert assign_shards(sizes, 1) == [0] * len(sizes)
    with pytest.raises(ValueError, match="at least one server"):
        assign_shards(sizes, 0)


def test_sync_waits_for_every_worker_then_applies_their_mean_once():
    shard = Shard([torch.zeros(2)], mode="sync", workers=2, make_optimizer=sgd)
    first = shard.push([torch.tensor([1.0, 2.0])], 0, lr=0.5, timed=True)
    assert not first.done() and shard.version == 0
    second = shard.push([torch.tensor([3.0, 4.0])], 0, lr=0.5, timed=True)
    assert first.done() and second.done() and shard.version == 1
    reply = first.wait()
    assert torch.equal(reply.parameters[0], torch.tensor([-1.0, -1.5]))  # 0 - 0.5 * mean
    assert reply.version == 1 and shard.stats.updates == 1 and shard.stats.staleness == []


def test_async_applies_each_gradient_on_arrival_and_counts_its_staleness():
    shard = Shard([torch.zeros(1)], mode="async", workers=2, make_optimizer=sgd)
    a = shard.push([torch.ones(1)], read_version=0, lr=1.0, timed=True).wait()
    b = shard.push([torch.ones(1)], read_version=0, lr=1.0, timed=True).wait()  # read before a's update
    c = shard.push([torch.ones(1)], read_version=a.version, lr=1.0, timed=True).wait()
    assert (a.version, b.version, c.version) == (1, 2, 3)
    assert shard.stats.staleness == [0, 1, 1]
    assert torch.equal(c.parameters[0], torch.tensor([-3.0]))


def test_warm_up_gradients_update_but_are_not_counted():
    ticks = itertools.count()
    shard = Shard([torch.zeros(1)], mode="async", workers=1, make_optimizer=sgd, clock=lambda: float(next(ticks)))
    shard.push([torch.ones(1)], 0, lr=1.0, timed=False)
    for version in (1, 2, 3):
        shard.push([torch.ones(1)], version, lr=1.0, timed=True)
    stats = shard.stats.to_json()
    assert shard.version == 4 and stats["timed_updates"] == 3 and stats["staleness_count"] == 3
    assert stats["updates_per_s"] == pytest.approx(3 / stats["timed_span_s"])


def test_a_shard_is_done_when_every_worker_said_so():
    shard = Shard([torch.zeros(1)], mode="sync", workers=2, make_optimizer=sgd)
    shard.finish(0)
    assert not shard.all_done()
    shard.finish(1)
    assert shard.all_done()


def test_unknown_mode_is_an_error_naming_the_valid_ones():
    with pytest.raises(ValueError, match="valid modes: sync, async"):
        Shard([torch.zeros(1)], mode="hogwild", workers=1, make_optimizer=sgd)


def test_server_summary_pools_launches_weighting_staleness_by_gradients():
    records = [{"role": "server", "server": 0, "timed_updates": 10, "updates_per_s": 2.0, "staleness_mean": 1.0,
                "staleness_max": 2, "staleness_count": 10},
               {"role": "server", "server": 0, "timed_updates": 30, "updates_per_s": 4.0, "staleness_mean": 0.5,
                "staleness_max": 1, "staleness_count": 30}]
    summary = server_summary(records)
    assert summary == {"servers": 1, "timed_updates": 40, "updates_per_s": 3.0, "staleness_mean": 0.625,
                       "staleness_max": 2, "work": {"by_server": {}, "not_counted": {
                           "0": "this server's harness does not count"}}}
    assert server_summary([]) is None
    rows = server_rows([("torch_ps_async-synthetic-resnet50-g3", summary, {"optimizer": 0.4})])
    assert rows[1] == ["torch_ps_async-synthetic-resnet50-g3", "1", "3.0", "0.62", "2", "40%"]


@pytest.mark.parametrize("agent_store, port", [(None, 29501), ("True", 29500), ("False", 29501)])
def test_rpc_meets_at_torchruns_store_under_torchrun_and_on_a_port_of_its_own_elsewhere(monkeypatch, agent_store,
                                                                                        port):
    """torch 2.11 under torchrun makes every rendezvous a client of the agent's store: one on
    another port waited for ever (a parameter-server cell on an H200 hung in set-up)."""
    from harness.rank.frameworks.torch_ps import rpc_rendezvous
    from harness.rank.rankenv import RankInfo

    if agent_store is None:
        monkeypatch.delenv("TORCHELASTIC_USE_AGENT_STORE", raising=False)
    else:
        monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", agent_store)
    rank = RankInfo(rank=0, world_size=2, local_rank=0, local_world_size=2, master_addr="node1", master_port=29500,
                    source="torchrun")
    assert rpc_rendezvous(rank) == f"tcp://node1:{port}"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_counted_steps_pushes_and_pulls_are_counted_by_worker_and_never_timed(mode):
    shard = Shard([torch.zeros(3), torch.zeros(2, 2, dtype=torch.float64)], mode=mode, workers=2, make_optimizer=sgd)
    gradients = [torch.ones(3), torch.ones(2, 2, dtype=torch.float64)]  # 12 + 32 bytes
    shard.push(gradients, 0, lr=1.0, timed=True)
    shard.push(gradients, 0, lr=1.0, timed=True)  # a timed round: not counted
    replies = [shard.push(gradients, 1, lr=1.0, timed=True, counted_by=worker) for worker in (0, 1)]
    assert all(reply.done() for reply in replies) and shard.version == (4 if mode == "async" else 2)
    assert shard.stats.updates == (2 if mode == "async" else 1)  # the counted round's updates are not timed
    assert shard.served.to_json() == {"0": {"pull": {"calls": 1, "bytes": 44}, "push": {"calls": 1, "bytes": 44}},
                                      "1": {"pull": {"calls": 1, "bytes": 44}, "push": {"calls": 1, "bytes": 44}}}


def test_the_servers_counts_are_summed_over_the_workers_per_server_and_launches_that_differ_named():
    def server(index, push_bytes, *, worker_bytes=None):
        by_worker = {"0": {"push": {"calls": 1, "bytes": push_bytes}, "pull": {"calls": 1, "bytes": push_bytes}},
                     "1": {"push": {"calls": 1, "bytes": worker_bytes or push_bytes},
                           "pull": {"calls": 1, "bytes": worker_bytes or push_bytes}}}
        return {"role": "server", "server": index, "timed_updates": 1, "work": {"by_worker": by_worker, "steps": 1}}

    work = server_summary([server(0, 400), server(1, 100), server(0, 400), server(1, 100, worker_bytes=120)])["work"]
    assert work["by_server"]["0"]["push"] == {"calls": 2, "bytes": 800}
    assert work["by_server"]["1"]["pull"] == {"calls": 2, "bytes": 200}
    assert work["launches_differ"] == ["1"] and "not_counted" not in work
    uncounted = {"role": "server", "server": 0, "work": {"not_counted": "no worker counted a step"}}
    assert server_summary([uncounted])["work"] == {"by_server": {}, "not_counted": {"0": "no worker counted a step"}}
