"""tensorflow_ps: how a worker rank's record and the servers' come from the steps the coordinator
received. The module imports no TensorFlow until a rank sets up, so this runs without it."""
import pytest

from harness.common.jsonio import write_json_atomic
from harness.rank.frameworks.tensorflow_ps import (COORDINATOR_ERROR, COORDINATOR_PROGRESS, TensorFlowPSAdapter,
                                                   cluster_spec, schedule_another, server_stats,
                                                   worker_samples)


def step(started, batch_read, computed, applied, loss=1.0, pid=7):
    return [started, batch_read, computed, applied, loss, pid]


STEPS = [step(10.0, 10.1, 10.5, 10.6, 3.0),  # warm-up
         step(10.7, 10.75, 11.1, 11.3, 2.5),
         step(11.5, 11.6, 12.0, 12.1, 2.0)]


def test_a_step_lasts_from_the_previous_step_applied_to_its_own_applied():
    samples = worker_samples(STEPS, warmup=1, timed=2, batch_size=8)
    assert samples["step_times"] == pytest.approx([0.7, 0.8])
    assert samples["data_wait"] == pytest.approx([0.05, 0.1])
    assert samples["fwd_bwd"] == pytest.approx([0.35, 0.4])
    # the update and the wait for the coordinator's next step: what the step is beyond its batch and gradients
    assert samples["optimizer"] == pytest.approx([0.3, 0.3])
    assert samples["window_s"] == pytest.approx(1.5) == pytest.approx(sum(samples["step_times"]))
    assert samples["losses"] == [2.5, 2.0] and samples["images"] == 16


def test_without_warm_up_the_first_step_starts_at_its_own_start():
    samples = worker_samples(STEPS, warmup=0, timed=1, batch_size=8)
    assert samples["step_times"] == pytest.approx([0.6]) and samples["window_s"] == pytest.approx(0.6)


def test_the_coordinator_schedules_until_every_worker_has_run_its_steps_and_names_one_left_short():
    assert schedule_another([7, 5], per_worker=7, scheduled=12, limit=56)  # the slower worker still runs two
    assert not schedule_another([9, 7], per_worker=7, scheduled=16, limit=56)
    with pytest.raises(RuntimeError, match="worker rank 1 executed 2 of its 7 steps when 56 were scheduled"):
        schedule_another([54, 2], per_worker=7, scheduled=56, limit=56)


def test_the_servers_count_every_step_past_the_warm_up_over_the_span_they_ran_in():
    other = [step(10.2, 10.3, 10.8, 10.9), step(11.0, 11.1, 11.4, 11.6)]
    stats = server_stats([STEPS, other], warmup=1).to_json()
    assert stats["timed_updates"] == 3
    assert stats["timed_span_s"] == pytest.approx(12.1 - 10.6)  # from the first window's start to the last update
    assert stats["staleness_count"] == 0 and stats["staleness_mean"] is None  # the strategy does not tell


def test_the_cluster_lists_workers_then_servers_in_rank_order_and_rank_0s_coordinator():
    published = [{"address": "a:1", "chief": "a:9", "pid": 1}, {"address": "b:2", "pid": 2},
                 {"address": "c:3", "pid": 3}]
    assert cluster_spec(published, workers=2) == {"chief": ["a:9"], "worker": ["a:1", "b:2"], "ps": ["c:3"]}


def test_the_strategy_has_no_synchronous_mode_and_needs_a_server():
    with pytest.raises(ValueError, match="no synchronous mode"):
        TensorFlowPSAdapter(mode="sync")
    with pytest.raises(ValueError, match="at least one server"):
        TensorFlowPSAdapter(ps_servers=0)


def test_a_rank_relays_every_step_the_coordinator_passed_and_no_heartbeat_of_its_own(tmp_path):
    """So that a fault set for any step strikes, and a stuck coordinator does not look alive."""
    adapter = TensorFlowPSAdapter()
    adapter.configure(batch_size=8, workdir=tmp_path)
    relayed = []

    def coordinator_at(phase, step, of):
        write_json_atomic(tmp_path / COORDINATOR_PROGRESS, {"phase": phase, "step": step, "of": of})
        adapter._relay(lambda *state: relayed.append(state))  # noqa: SLF001

    coordinator_at("warmup", 2, 2)
    coordinator_at("timed", 3, 10)
    coordinator_at("timed", 3, 10)
    coordinator_at("timed", 5, 10)
    assert relayed == [("warmup", 1, 2), ("warmup", 2, 2), ("timed", 1, 10), ("timed", 2, 10), ("timed", 3, 10), ("timed", 4, 10),
                       ("timed", 5, 10)]


def test_a_rank_waiting_for_its_steps_raises_the_coordinators_failure(tmp_path):
    adapter = TensorFlowPSAdapter()
    adapter.configure(batch_size=8, workdir=tmp_path)
    write_json_atomic(tmp_path / COORDINATOR_ERROR, {"error": "UnavailableError: ps task 0 is gone"})
    with pytest.raises(RuntimeError, match=r"coordinator \(rank 0's child\) failed: UnavailableError: ps task 0"):
        adapter.serve(lambda *state: None, steps=10)
