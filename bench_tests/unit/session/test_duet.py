"""harness.session.duet: which cells a duet can hold, and what each side's launch gets."""
from harness.rank.cell import Cell
from harness.session.duet import DuetPlan, does_not_fit, plan, worker_lacks

CELL = Cell(framework="ddp", loader="synthetic", model="resnet44", ranks=1)


def test_gpu_halves_are_the_gpu_indices_split_in_two():
    duet = plan(True, gpus=4)
    assert duet.gpus == ((0, 1), (2, 3)) and duet.environment(1) == {"CUDA_VISIBLE_DEVICES": "2,3"}
    assert duet.core_set(0) is None and duet.describe() == "GPUs 0,1 | 2,3"


def test_a_cell_that_does_not_fit_in_half_the_node_is_refused_with_why():
    cpus = DuetPlan(cores=((0,), (1,)))
    assert does_not_fit(cpus, CELL, 1, 1) is None
    assert "needs 2 core(s) and each half of the node for --duet has 1" in does_not_fit(cpus, CELL, 1, 2)
    two = Cell(framework="ddp", loader="synthetic", model="resnet44", ranks=2)
    assert "needs 2 core(s)" in does_not_fit(cpus, two, 2, 1)
    assert does_not_fit(plan(True, gpus=4), two, 2, None) is None


def test_an_odd_gpu_count_cannot_be_halved():
    import pytest

    with pytest.raises(ValueError, match="even number of GPUs"):
        plan(True, gpus=3)


def test_a_worker_that_predates_the_duet_is_named():
    assert worker_lacks(None) == []
    assert worker_lacks(frozenset({"core_set"})) == ["window_gate"]
