"""A cell's numerics: how its id names them, which frameworks claim which, what a torch rank makes
of the model, and fp16's loss scaling."""
import dataclasses

import pytest
import torch

from harness.config.cells import Matrix, config_hash, measured_config, parse_cell_id, scaling_cell, short_hash
from harness.judging.fingerprint import fingerprint
from harness.rank.cell import Cell
from harness.rank.cifar_resnet import cifar_resnet
from harness.rank.frameworks import FRAMEWORKS, numerics_unsupported
from harness.rank.numerics import Numerics
from harness.rank.torch_numerics import AsTrained, LossScaling, as_trained
from harness.rank.workload import Workload

DDP = dict(framework="ddp", loader="dali-cpu-tfrecord", model="resnet50", ranks=2)


@pytest.mark.parametrize("numerics, words", [
    (Numerics(), ""),
    (Numerics(dtype="bf16"), "-bf16"),
    (Numerics(dtype="tf32", channels_last=True), "-tf32-channels_last"),
    (Numerics(dtype="fp16", channels_last=True, compiled=True), "-fp16-channels_last-compiled"),
    (Numerics(compiled=True), "-compiled"),
])
def test_a_cell_id_names_its_numerics_after_the_model_and_parses_back(numerics, words):
    cell = Cell(**DDP, **dataclasses.asdict(numerics))
    assert cell.id == f"ddp-dali-cpu-tfrecord-resnet50{words}-g2"
    assert parse_cell_id(cell.id) == cell and scaling_cell(cell.id) == cell


def test_a_default_cell_keeps_its_id_spec_and_configuration_hash():
    """Baselines recorded before numerics existed stay current, and an older worker (an A/B's
    reference) reads a default cell's spec."""
    cell = Cell(**DDP)
    assert cell.id == "ddp-dali-cpu-tfrecord-resnet50-g2"
    assert cell.to_spec() == DDP
    workload = dataclasses.asdict(Workload())
    assert config_hash(workload, cell) == short_hash({**measured_config(workload, cell), "framework": "ddp",
                                                      "loader": "dali-cpu-tfrecord", "model": "resnet50"})
    bf16 = dataclasses.replace(cell, dtype="bf16")
    assert bf16.to_spec() == {**DDP, "dtype": "bf16"} and config_hash(workload, bf16) != config_hash(workload, cell)


def test_the_matrix_holds_a_cell_per_dtype_where_the_framework_claims_it():
    matrix = Matrix(frameworks=("ddp", "tensorflow", "torch_ps_sync"), loaders=("synthetic",),
                    dtypes=("fp32", "bf16", "fp16"), ranks=(2,))
    assert [cell.id for cell in matrix.cells()] == [
        "ddp-synthetic-resnet50-g2", "ddp-synthetic-resnet50-bf16-g2", "ddp-synthetic-resnet50-fp16-g2",
        "tensorflow-synthetic-resnet50-g2", "torch_ps_sync-synthetic-resnet50-g2",
        "torch_ps_sync-synthetic-resnet50-bf16-g2"]
    assert matrix.unimplemented() == ["tensorflow-synthetic-resnet50-bf16", "tensorflow-synthetic-resnet50-fp16",
                                      "torch_ps_sync-synthetic-resnet50-fp16"]


def test_each_framework_is_refused_what_its_registry_entry_does_not_claim():
    assert numerics_unsupported("ddp", Numerics(dtype="fp16", channels_last=True, compiled=True), gpu=True) is None
    assert numerics_unsupported("mxnet", Numerics(dtype="bf16"), gpu=None) == "mxnet trains in fp32 here, not bf16"
    assert numerics_unsupported("horovod", Numerics(channels_last=True), gpu=None) == \
        "horovod cells have no channels_last model here"
    assert numerics_unsupported("ddp", Numerics(dtype="tf32"), gpu=False) == \
        "tf32 is a GPU arithmetic; these ranks run on CPUs (use fp32 or bf16)"
    assert numerics_unsupported("ddp", Numerics(dtype="tf32"), gpu=None) is None  # the device not known yet
    for name in FRAMEWORKS.names():
        entry = FRAMEWORKS.entry(name)
        assert "fp32" in entry.dtypes and (entry.runtime == "torch" or (entry.dtypes, entry.model_forms) == (("fp32",), ()))
    with pytest.raises(ValueError, match="horovod cells have no channels_last model"):
        parse_cell_id("horovod-synthetic-resnet50-channels_last-g1")


def test_the_default_model_is_the_model_itself_in_strict_fp32():
    model = cifar_resnet(depth=20, num_classes=10)
    torch.backends.cudnn.allow_tf32 = True  # torch's default
    assert as_trained(model, Numerics(), torch.device("cpu")) is model
    assert not torch.backends.cudnn.allow_tf32 and not torch.backends.cuda.matmul.allow_tf32


def test_bf16_runs_the_network_under_autocast_on_channels_last_input_and_returns_float32_logits():
    model = cifar_resnet(depth=20, num_classes=10)
    seen = []
    model.conv1.register_forward_hook(lambda module, inputs, output: seen.append((inputs[0], output)))
    trained = as_trained(model, Numerics(dtype="bf16", channels_last=True), torch.device("cpu"))
    assert isinstance(trained, AsTrained) and trained.module.conv1.weight.dtype == torch.float32
    assert trained.module.conv1.weight.is_contiguous(memory_format=torch.channels_last)
    logits = trained(torch.randn(2, 3, 32, 32))
    (image, conv), = seen
    assert image.is_contiguous(memory_format=torch.channels_last) and conv.dtype == torch.bfloat16
    assert logits.dtype == torch.float32 and logits.shape == (2, 10)


def test_a_framework_that_keeps_the_weights_in_the_dtype_gets_them_converted_and_its_input_cast():
    """DeepSpeed's own bf16: no autocast, weights and input in bf16."""
    trained = as_trained(cifar_resnet(depth=20, num_classes=10), Numerics(dtype="bf16"), torch.device("cpu"),
                         keeps_weights_in_dtype=True)
    assert trained.autocast is None and trained.inputs == torch.bfloat16
    assert {parameter.dtype for parameter in trained.parameters()} == {torch.bfloat16}
    assert trained(torch.randn(2, 3, 32, 32)).dtype == torch.float32


def test_fp16_loss_scaling_skips_a_step_whose_gradients_overflowed_and_lowers_the_scale():
    """The scaler's path, run on a CPU (the suite refuses fp16 there, but torch's scaler runs)."""
    weight = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    scaling = LossScaling(Numerics(dtype="fp16"), torch.device("cpu"))
    start = scaling.settings()["loss_scale"]
    scaling.backward((weight * 2).sum())
    scaling.step(optimizer)
    assert torch.allclose(weight, torch.full((3,), 0.8))  # unscaled before the step: 1 - 0.1 * 2
    optimizer.zero_grad()
    scaling.backward((weight * float("inf")).sum())
    scaling.step(optimizer)
    assert torch.allclose(weight, torch.full((3,), 0.8)) and scaling.settings()["loss_scale"] < start
    plain = LossScaling(Numerics(dtype="bf16"), torch.device("cpu"))
    assert plain.scaler is None and plain.settings() == {}


def test_the_fingerprint_names_numerics_that_are_not_the_defaults():
    records = [{"host": "node1", "device": "cpu", "versions": {"torch": "2.14.1"}, "threads": 1, "node": {}}]
    workload = dataclasses.asdict(Workload())
    config = fingerprint(records, workload, "ddp-synthetic-resnet50-bf16-channels_last-g1")["config"]
    assert (config["dtype"], config["channels_last"]) == ("bf16", True) and "compiled" not in config
    assert not {"dtype", "channels_last", "compiled"} & set(fingerprint(records, workload,
                                                                        "ddp-synthetic-resnet50-g1")["config"])
