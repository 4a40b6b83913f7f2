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


TF_RESNET20_CONV_FLOPS_PER_IMAGE = 81_100_800
"""The CIFAR ResNet20's 19 convolutions at 32 px, 40,550,400 multiply-adds an image at two FLOPs each:
the same network torch's counter counts (harness.rank.cifar_resnet), in Keras."""


@pytest.mark.parametrize("framework, launcher", [("tensorflow", "mpirun"), ("horovod_tf", "mpirun")],
                         indirect=["launcher"])
def test_a_tensorflow_step_counts_its_graphs_operations_flops_collectives_and_data(
        framework, launcher, tmp_path, tiny_dataset, tiny_tfrecords):
    loader = "native-tfrecord" if framework == "tensorflow" else "native"
    run = launched(framework, 2, launcher, tmp_path, tiny_dataset, tiny_tfrecords, loader=loader)
    work = cell_work(run.records)
    assert work["not_counted"] == {"gpu": "a CPU rank runs no GPU kernels",
                                   "memory": "TensorFlow gives its allocator's peak on a GPU only "
                                             "(tf.config.experimental.get_memory_info)"}
    assert work["operators"]["Conv2D"] == 2 * 19 and work["operators"]["Conv2DBackpropFilter"] == 2 * 19
    images = 2 * TINY.batch_size
    assert work["flops"]["by_operator"]["Conv2D"] == images * TF_RESNET20_CONV_FLOPS_PER_IMAGE
    assert work["flops"]["by_operator"]["Conv2DBackpropFilter"] == images * TF_RESNET20_CONV_FLOPS_PER_IMAGE
    phases = work["flops"]["by_phase"]
    assert sum(phases.values()) == work["flops"]["total"] and phases["backward"] > phases["forward"]
    gradients = work["collectives"]["all_reduce"]
    assert gradients["bytes"] == 2 * RESNET20_PARAMETER_BYTES  # every trainable variable's gradient, each rank
    if framework == "horovod_tf":
        assert gradients["calls"] == 2 * 59  # per tensor: 19 kernels, 19 batch-norm gammas and 19 betas, 2 dense
    assert work["data"]["images"] == images and work["data"]["images_decoded"] == images
    assert work["data"]["bytes_read"] > images * 100  # real JPEGs, and records around them


@pytest.mark.parametrize("launcher", ["mpirun"], indirect=True)
def test_an_mxnet_step_counts_its_profilers_operators_its_forward_flops_its_kvstore_and_data(
        launcher, tmp_path, tiny_dataset):
    run = launched("mxnet", 2, launcher, tmp_path, tiny_dataset, loader="native")
    work = cell_work(run.records)
    assert set(work["not_counted"]) == {"gpu", "memory"}
    images = 2 * TINY.batch_size
    assert work["flops"]["by_operator"]["Convolution"] == images * TF_RESNET20_CONV_FLOPS_PER_IMAGE
    assert work["flops"]["by_operator"]["FullyConnected"] == images * 2 * 64 * 10
    assert set(work["flops"]["phases_not_counted"]) == {"backward", "optimizer"}
    assert work["operators"]["multi_sgd_mom_update"] > 0  # the update, operator by operator
    # every parameter pushed and pulled once a step by each rank, one key each
    assert work["collectives"]["push"] == {"calls": 2 * 59, "bytes": 2 * RESNET20_PARAMETER_BYTES}
    assert work["collectives"]["pull"] == {"calls": 2 * 59, "bytes": 2 * RESNET20_PARAMETER_BYTES}
    assert work["data"]["images_decoded"] == images and work["data"]["bytes_read"] > images * 100


@pytest.mark.parametrize("framework", ["mxnet_ps_sync", "mxnet_ps_async"])
@pytest.mark.parametrize("launcher", ["torchrun"], indirect=True)
def test_an_mxnet_parameter_server_cell_counts_its_workers_pushes_and_pulls_and_its_servers_updates(
        framework, launcher, tmp_path, tiny_dataset):
    from harness.judging.servers import server_summary

    run = launched(framework, 3, launcher, tmp_path, tiny_dataset)  # two workers, one server
    work = cell_work(run.records)
    assert work["collectives"]["push"] == {"calls": 2 * 59, "bytes": 2 * RESNET20_PARAMETER_BYTES}
    assert work["collectives"]["pull"] == {"calls": 2 * 59, "bytes": 2 * RESNET20_PARAMETER_BYTES}
    served = server_summary(run.server_records)
    rounds = 2 if framework.endswith("async") else 1  # a synchronous round sums the workers' pushes first
    assert served["timed_updates"] == TINY.steps * rounds  # the counted step is not a timed update
    assert served["work"]["by_server"]["0"]["applied"] == {"calls": 59 * rounds,
                                                           "bytes": rounds * RESNET20_PARAMETER_BYTES}


TF_RESNET20_MOVING_STATISTICS_BYTES = 2 * 4 * (16 + 6 * 16 + 6 * 32 + 6 * 64)
"""Keras's batch norms keep a moving mean and variance per channel, not trainable: 19 layers, 688
channels. A training step reads both and writes them back."""
STEP_COUNT_BYTES = 8
"""Keras's optimizer's step count, an int64 read, added to and written back every step."""


@pytest.mark.parametrize("launcher", ["mpirun"], indirect=True)
def test_a_tensorflow_parameter_server_cell_counts_what_each_worker_pushes_and_pulls_and_its_servers_the_same(
        launcher, tmp_path, tiny_dataset):
    """TensorFlow's coordinator runs no step after the window: it counts the step it sends every
    worker from its graph, and each worker's record carries it. A worker pulls every variable once
    and pushes each gradient once (the update runs on the servers), and the batch norms' moving
    statistics and the step count both ways."""
    from harness.judging.servers import server_summary

    run = launched("tensorflow_ps_async", 3, launcher, tmp_path, tiny_dataset)  # two workers, one server
    work = cell_work(run.records)
    each_way = {"calls": 2 * (59 + 2 * 19 + 1),
                "bytes": 2 * (RESNET20_PARAMETER_BYTES + TF_RESNET20_MOVING_STATISTICS_BYTES + STEP_COUNT_BYTES)}
    assert work["collectives"] == {"push": each_way, "pull": each_way}
    images = 2 * TINY.batch_size
    assert work["operators"]["Conv2D"] == 2 * 19
    assert work["flops"]["by_operator"]["Conv2D"] == images * TF_RESNET20_CONV_FLOPS_PER_IMAGE
    assert work["flops"]["by_phase"]["optimizer"] > 0 and "Timestamp" not in work["operators"]  # the harness's clocks
    assert set(work["not_counted"]) == {"gpu", "memory", "data"}  # TensorFlow's worker reads the data
    served = server_summary(run.server_records)
    assert served["work"]["by_server"]["0"]["push"] == each_way and served["work"]["by_server"]["0"]["pull"] == each_way
    assert set(served["work"]["by_server"]["0"]["by_worker"]) == {"0", "1"}
