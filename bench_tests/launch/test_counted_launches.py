"""Counted work from real launches, one cell a framework: each count checked against what the model
and the framework say it must be, so that a count that is wrong or missing fails here (the unit
tests in bench_tests/unit/rank count in-process; these count what a launched rank records)."""
from __future__ import annotations

import pytest

from harness.judging.work import cell_work
from harness.launch.runner import run_cell
from harness.rank.cell import Cell
from harness.rank.frameworks import FRAMEWORKS
from harness.rank.runtime import unavailable
from harness.rank.spec import RankOptions

from ..components import framework_component, needs
from ..workloads import TEST_MODEL, TINY

RESNET20_PARAMETER_BYTES = 269_722 * 4
"""He et al.'s CIFAR ResNet20 for 10 classes (harness.rank.cifar_resnet): 269,722 float32 parameters (their
Table 6: 0.27M)."""


def launched(framework: str, ranks: int, launcher, tmp_path, tiny_dataset, tiny_tfrecords=None, loader="synthetic"):
    needs(framework_component(framework), unavailable(FRAMEWORKS.entry(framework).runtime, FRAMEWORKS.entry(framework)))
    cell = Cell(framework=framework, loader=loader, model=TEST_MODEL, ranks=ranks)
    workload = TINY.replace(data_dir=str(tiny_dataset), tfrecord_dir=str(tiny_tfrecords) if tiny_tfrecords else None)
    options = RankOptions(cores_per_rank=1) if ranks <= 2 else RankOptions()  # three ranks share two cores
    run = run_cell(cell, workload, launcher, workdir=tmp_path, options=options)
    assert run.ok, run.error
    return run


@pytest.mark.parametrize("launcher", ["mpirun"], indirect=True)
def test_a_ddp_step_counts_its_phases_and_all_reduces_every_parameter_byte(launcher, tmp_path, tiny_dataset):
    work = cell_work(launched("ddp", 2, launcher, tmp_path, tiny_dataset).records)
    phases = work["flops"]["by_phase"]
    assert set(phases) == {"forward", "backward"} and sum(phases.values()) == work["flops"]["total"]
    assert 1.9 < phases["backward"] / phases["forward"] < 2.0  # input and weight gradients, none for the images
    assert work["collectives"]["all_reduce"]["bytes"] == 2 * RESNET20_PARAMETER_BYTES  # each rank's gradients
    assert work["data"]["images"] == 2 * TINY.batch_size


@pytest.mark.parametrize("framework", ["torch_ps_sync", "torch_ps_async"])
@pytest.mark.parametrize("launcher", ["torchrun"], indirect=True)
def test_a_parameter_server_cell_counts_each_workers_pushes_and_pulls_and_its_servers_the_same(
        framework, launcher, tmp_path, tiny_dataset):
    from harness.judging.servers import server_summary

    run = launched(framework, 3, launcher, tmp_path, tiny_dataset)  # two workers, one server
    work = cell_work(run.records)
    assert work["not_counted"] == {"gpu": "a CPU rank runs no GPU kernels"}
    assert work["collectives"]["push"] == {"calls": 2, "bytes": 2 * RESNET20_PARAMETER_BYTES}
    assert work["collectives"]["pull"] == {"calls": 2, "bytes": 2 * RESNET20_PARAMETER_BYTES}
    assert work["flops"]["by_phase"]["forward"] > 0 and work["operators"]["aten::convolution"] == 2 * 19
    served = server_summary(run.server_records)
    assert served["timed_updates"] == TINY.steps * (2 if framework.endswith("async") else 1)  # counted: not timed
    assert served["work"]["by_server"]["0"]["push"] == work["collectives"]["push"]
    assert served["work"]["by_server"]["0"]["pull"] == work["collectives"]["pull"]
    assert set(served["work"]["by_server"]["0"]["by_worker"]) == {"0", "1"}
