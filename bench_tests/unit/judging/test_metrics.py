import pytest

from harness.judging.metrics import parallel_efficiency, summarize


def record(rank, step_times, batch=8, wait=0.01, loss=2.0):
    return {"rank": rank, "step_times": step_times, "data_wait": [wait] * len(step_times),
            "losses": [loss] * len(step_times), "images": batch * len(step_times), "window_s": sum(step_times)}


def test_throughput_is_all_images_over_the_slowest_rank_not_rank0_times_world():
    fast, slow = record(0, [0.1] * 10), record(1, [0.2] * 10)
    metrics = summarize([fast, slow])
    assert metrics.throughput == pytest.approx(160 / 2.0)
    assert metrics.throughput < 2 * (80 / 1.0)  # what rank 0 x world size would claim
    assert metrics.slowest_rank == 1
    assert metrics.per_rank == pytest.approx(40.0)
    assert metrics.step_time == pytest.approx(0.2)
    assert metrics.data_wait_share == pytest.approx(0.05)


def test_final_loss_is_the_mean_over_ranks():
    assert summarize([record(0, [0.1], loss=1.0), record(1, [0.1], loss=3.0)]).final_loss == pytest.approx(2.0)


def test_efficiency_follows_the_study():
    # E_G = (T_ref / T_G) / (G / G_ref) with T the time for a fixed amount of work == throughput form
    assert parallel_efficiency(360.0, 4, 100.0, 1) == pytest.approx(0.9)
    assert parallel_efficiency(200.0, 2, 100.0, 1) == pytest.approx(1.0)


def test_efficiency_refuses_nonsense():
    with pytest.raises(ValueError):
        parallel_efficiency(100.0, 2, 0.0, 1)


def test_no_records():
    with pytest.raises(ValueError):
        summarize([])
