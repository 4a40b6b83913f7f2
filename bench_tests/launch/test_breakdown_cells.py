"""The step-time breakdown on real 2-rank cells under torchrun: the parts add up to the measured
step, and a cell made slow in data loading on purpose is blamed on data loading."""
import pytest

from harness.judging.breakdown import PARTS, attribute_regression, cell_breakdown
from harness.launch.launchers import LAUNCHERS
from harness.launch.runner import run_cell
from harness.rank.cell import Cell
from harness.rank.spec import DataDelay, RankOptions

from ..components import needs
from ..workloads import TINY

pytestmark = pytest.mark.launch

WORKLOAD = TINY.replace(steps=6)
CELL = Cell(framework="ddp", loader="synthetic", model="resnet50", ranks=2)
DELAY_S = 0.4
"""Sleep before each of rank 1's batches: far above this machine's step-to-step noise."""


@pytest.fixture(scope="module")
def torchrun():
    launcher = LAUNCHERS.create("torchrun")
    needs("torchrun", launcher.unavailable_reason())
    return launcher


@pytest.fixture(scope="module")
def reference_run(torchrun, tmp_path_factory):
    run = run_cell(CELL, WORKLOAD, torchrun, workdir=tmp_path_factory.mktemp("reference"))
    assert run.ok, run.error
    return run


def test_parts_add_up_to_the_step_on_every_rank(reference_run):
    for record in reference_run.records:
        assert len(record["fwd_bwd"]) == len(record["optimizer"]) == WORKLOAD.steps
        assert len(record["compute_probe"]) >= 2
        # the three timers are back to back: nothing in the step escapes them
        for step, data, fwd_bwd, optimizer in zip(record["step_times"], record["data_wait"], record["fwd_bwd"],
                                                  record["optimizer"]):
            assert data + fwd_bwd + optimizer == pytest.approx(step, rel=0.01, abs=1e-3)
    cell = cell_breakdown(reference_run.records)
    assert cell.slowest_rank in (0, 1)
    for rank in cell.ranks:
        assert rank.compute > 0 and rank.optimizer > 0 and rank.communication >= 0
        # the probe's compute, measured apart, fits inside the step's forward+backward
        assert rank.closure == pytest.approx(1.0, abs=0.05), rank
        assert sum(rank.shares().values()) == pytest.approx(1.0, abs=0.05)


def test_a_slow_loader_is_blamed_on_data_loading(reference_run, torchrun, tmp_path):
    slow = run_cell(CELL, WORKLOAD, torchrun, workdir=tmp_path,
                    options=RankOptions(data_delay=DataDelay(seconds=DELAY_S, rank=1)))
    assert slow.ok, slow.error
    before, after = cell_breakdown(reference_run.records), cell_breakdown(slow.records)

    assert after.slowest_rank == 1  # the straggler is named
    message = attribute_regression(after, before.to_json())  # a baseline breakdown comes from JSON
    assert message.startswith("data loading "), message
    assert after.slowest.data - before.slowest.data == pytest.approx(DELAY_S, rel=0.1)
    # rank 0 waits for rank 1 inside the gradient all-reduce: it sees the delay as communication
    rank0_before, rank0_after = (next(b for b in c.ranks if b.rank == 0) for c in (before, after))
    assert rank0_after.communication - rank0_before.communication > DELAY_S / 2
    assert rank0_after.data == pytest.approx(rank0_before.data, abs=0.05)
    moved = {part: abs(getattr(after.slowest, part) - getattr(before.slowest, part)) for part in PARTS}
    assert max(moved, key=moved.get) == "data", moved
