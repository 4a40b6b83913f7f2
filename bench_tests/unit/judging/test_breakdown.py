"""The step-time breakdown: per-rank parts from records, the slowest rank, regression attribution,
and the training loop's timers and compute probe (in-process, no process group)."""
import json
import math

import pytest
import torch

from harness.judging.breakdown import (Breakdown, BreakdownUnavailable, CellBreakdown, as_breakdown,
                                       attribute_regression, breakdown_rows, cell_breakdown, has_breakdown,
                                       rank_breakdown)
from harness.rank.trainloop import ComputeProbe, DelayedBatches, train

from bench_tests.local_adapter import LocalAdapter


def record(rank=0, *, steps=4, data=0.1, fwd_bwd=0.8, optimizer=0.1, probes=(0.6, 0.6, 0.7)):
    return {"rank": rank, "step_times": [data + fwd_bwd + optimizer] * steps, "data_wait": [data] * steps,
            "fwd_bwd": [fwd_bwd] * steps, "optimizer": [optimizer] * steps, "compute_probe": list(probes),
            "losses": [1.0] * steps, "images": 8 * steps, "window_s": 1.0 * steps}


def breakdown(step=1.0, data=0.1, compute=0.6, communication=0.2, optimizer=0.1):
    return Breakdown(rank=0, step=step, data=data, compute=compute, communication=communication,
                     optimizer=optimizer, steps=10)


def test_rank_breakdown_splits_forward_backward_with_the_probe():
    b = rank_breakdown(record())
    assert (b.data, b.compute, b.optimizer) == pytest.approx((0.1, 0.6, 0.1))  # compute: the probes' median
    assert b.communication == pytest.approx(0.2)
    assert b.step == pytest.approx(1.0) and b.steps == 4
    assert b.closure == pytest.approx(1.0)
    assert b.shares() == pytest.approx({"data": 0.1, "compute": 0.6, "communication": 0.2, "optimizer": 0.1})
    assert b.probe_spread == pytest.approx(0.1 / 0.6)
    assert b.steps_below_probe == 0


def test_a_probe_slower_than_the_step_clamps_communication_and_breaks_closure():
    b = rank_breakdown(record(fwd_bwd=0.5, probes=(0.6,)))
    assert b.communication == 0.0
    assert b.closure == pytest.approx(0.8 / 0.7)  # the sum exceeds the step: the check that catches it
    assert b.steps_below_probe == 4


def test_an_occasional_slow_step_is_split_like_a_typical_one():
    r = record()
    r["fwd_bwd"][-1] += 3.0  # a noisy neighbour stalls one step
    r["step_times"][-1] += 3.0
    b = rank_breakdown(r)
    assert b.communication / (b.compute + b.communication) == pytest.approx(0.25)  # as in a typical step: 0.2/0.8
    assert b.closure == pytest.approx(1.0)
    assert b.communication < 0.5  # not the 0.95 s/step a plain "mean minus probe" would book


def test_series_of_different_lengths_align_on_their_last_steps():
    r = record()
    r["fwd_bwd"] = [5.0, 5.0] + r["fwd_bwd"]  # warm-up steps trimmed from the older series only
    assert rank_breakdown(r).communication == pytest.approx(0.2)


def test_records_without_the_probe_have_no_breakdown():
    r = record()
    del r["compute_probe"]
    assert not has_breakdown([r])
    with pytest.raises(BreakdownUnavailable, match="compute_probe"):
        rank_breakdown(r)
    with pytest.raises(BreakdownUnavailable):
        cell_breakdown([])


def test_the_slowest_rank_is_the_one_with_most_local_work_not_the_longest_step():
    # rank 1 waits 0.3 s for its data; rank 0 spends the same 0.3 s waiting for rank 1 in the all-reduce
    straggler = record(1, data=0.4, fwd_bwd=0.8)
    waiting = record(0, data=0.1, fwd_bwd=1.1)
    cell = cell_breakdown([straggler, waiting])
    assert [b.rank for b in cell.ranks] == [0, 1]
    assert cell.slowest_rank == 1 and cell.slowest.data == pytest.approx(0.4)
    assert cell.mean().communication == pytest.approx((0.5 + 0.2) / 2)
    assert CellBreakdown.from_json(json.loads(json.dumps(cell.to_json()))) == cell


def test_attribution_names_the_part_that_grew_most():
    before = breakdown(data=0.010, step=1.0)
    after = breakdown(data=0.028, step=1.018)
    message = attribute_regression(after, before)
    assert message.startswith("data loading +180% (0.010 -> 0.028 s/step): 100% of the step's +0.018 s/step change")
    assert "compute +0.000" in message


def test_attribution_takes_json_and_cell_breakdowns():
    baseline = json.loads(json.dumps(cell_breakdown([record(0), record(1)]).to_json()))
    slower = cell_breakdown([record(0, fwd_bwd=1.1), record(1, fwd_bwd=1.1)])  # communication 0.2 -> 0.5
    assert attribute_regression(slower, baseline).startswith("exposed communication +150% (0.200 -> 0.500")
    assert as_breakdown(baseline) == as_breakdown(cell_breakdown([record(0), record(1)]))


def test_a_faster_step_names_the_part_that_fell_most():
    message = attribute_regression(breakdown(compute=0.4, step=0.8), breakdown())
    assert message.startswith("compute (forward/backward) -33% (0.600 -> 0.400 s/step)")


def test_a_part_from_zero_is_described_without_a_percentage():
    message = attribute_regression(breakdown(data=0.05, step=1.05), breakdown(data=0.0, step=1.0))
    assert message.startswith("data loading from 0.000 to 0.050 s/step")


def test_parts_that_trade_time_within_a_steady_step_get_no_share_of_it():
    message = attribute_regression(breakdown(communication=0.4, compute=0.4, step=1.0), breakdown())
    assert "of the step's" not in message
    assert message.startswith("exposed communication +100% (0.200 -> 0.400 s/step), while the step time held within 1%")


def test_breakdown_rows_mark_the_slowest_rank():
    rows = breakdown_rows(cell_breakdown([record(0), record(1, data=0.3)]))
    assert rows[0][0] == "rank" and len(rows) == 3
    assert rows[2][0] == "1 (slowest)"
    assert all(len(row) == len(rows[0]) for row in rows)


# -- the training loop's timers ---------------------------------------------------------------------


def batches(n=4):
    generator = torch.Generator().manual_seed(0)
    images, labels = torch.randn(n, 3, 8, 8, generator=generator), torch.randint(0, 3, (n,), generator=generator)
    while True:
        yield images, labels


def run_loop(stream, steps=3):
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(192, 3))
    loss_fn = torch.nn.CrossEntropyLoss()
    probe = ComputeProbe(model, loss_fn)
    adapter = LocalAdapter()
    adapter.wrap(model, torch.optim.SGD(model.parameters(), lr=0.1), loss_fn)
    return train(adapter, stream, warmup_steps=1, steps=steps, device=torch.device("cpu"),
                 progress=lambda *_: None, probe=probe, probe_steps=2), probe


def test_train_records_the_three_timed_parts_and_the_probes():
    samples, probe = run_loop(batches())
    assert {"step_times", "data_wait", "losses", "images", "window_s"} <= set(samples)  # the existing keys
    assert len(samples["fwd_bwd"]) == len(samples["optimizer"]) == 3
    assert len(samples["compute_probe"]) == 4  # two before the window, two after
    for step, data, fwd_bwd, optimizer in zip(samples["step_times"], samples["data_wait"], samples["fwd_bwd"],
                                              samples["optimizer"]):
        assert data + fwd_bwd + optimizer == pytest.approx(step, rel=1e-3, abs=1e-5)
    assert probe.model is None  # freed after the window
    assert has_breakdown([{**samples, "rank": 0}])


def test_the_probe_leaves_the_trained_model_alone():
    model = torch.nn.Linear(4, 2)
    probe = ComputeProbe(model, torch.nn.CrossEntropyLoss())
    elapsed = probe(torch.randn(3, 4), torch.tensor([0, 1, 0]), lambda: None)
    assert elapsed > 0
    assert model.weight.grad is None and probe.model.weight.grad is None
    assert probe.model.weight is not model.weight


def test_a_data_delay_lands_in_data_wait():
    samples, _ = run_loop(DelayedBatches(batches(), 0.05), steps=2)
    assert all(wait >= 0.05 for wait in samples["data_wait"])
    assert cell_breakdown([{**samples, "rank": 0}]).slowest.data >= 0.05
    with pytest.raises(ValueError):
        DelayedBatches([], -1)


def test_breakdown_json_has_no_nan():
    b = Breakdown(rank=0, step=0.0, data=0.0, compute=0.0, communication=0.0, optimizer=0.0)
    text = json.dumps(b.to_json(), allow_nan=False)
    assert Breakdown.from_json(json.loads(text)).step == 0.0
    assert math.isnan(Breakdown.from_json(json.loads(text)).closure)


def test_the_probes_take_no_batch_of_their_own():
    seen = []

    def counted():
        for images, labels in batches():
            seen.append(1)
            yield images, labels

    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(192, 3))
    adapter = LocalAdapter()
    adapter.wrap(model, torch.optim.SGD(model.parameters(), lr=0.1), torch.nn.CrossEntropyLoss())
    samples = train(adapter, counted(), warmup_steps=0, steps=2, device=torch.device("cpu"),
                    progress=lambda *_: None, probe=ComputeProbe(model, torch.nn.CrossEntropyLoss()), probe_steps=2)
    assert len(seen) == 2  # the two timed steps' batches, nothing more
    assert len(samples["compute_probe"]) == 2  # without warm-up, only after the window
