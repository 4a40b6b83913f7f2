import dataclasses
import importlib.util
import re
from pathlib import Path

import pytest

from harness.config.cells import (AccuracyCell, Matrix, accuracy_cells, config_hash, implemented, measured_config,
                                  parse_cell_id, parse_names, parse_ranks, scaling_cell)
from harness.rank.cell import Cell
from harness.rank.frameworks import FRAMEWORKS
from harness.rank.models import MODELS
from harness.rank.loaders import LOADERS
from harness.rank.models import MODELS
from harness.rank.workload import Workload


def test_cell_ids():
    assert Cell(framework="ddp", loader="native", model="resnet50", ranks=2).id == "ddp-native-resnet50-g2"
    cell = Cell(framework="deepspeed_zero2", loader="dali-cpu-tfrecord", model="resnet152", ranks=16)
    assert cell.id == "deepspeed_zero2-dali-cpu-tfrecord-resnet152-g16"


def test_matrix_orders_each_series_by_rank_count():
    cells = Matrix(frameworks=("ddp",), loaders=("synthetic",), models=("resnet50", "resnet101"), ranks=(4, 1, 2)).cells()
    assert [c.id for c in cells] == ["ddp-synthetic-resnet50-g1", "ddp-synthetic-resnet50-g2", "ddp-synthetic-resnet50-g4",
                                     "ddp-synthetic-resnet101-g1", "ddp-synthetic-resnet101-g2", "ddp-synthetic-resnet101-g4"]


@pytest.mark.parametrize("field, name, kind", [
    ("frameworks", "jax", "framework"), ("loaders", "ffcv", "loader"), ("models", "vgg16", "model"),
])
def test_unknown_names_list_the_valid_ones(field, name, kind):
    with pytest.raises(ValueError, match=f"unknown {kind} '{name}'; valid names: "):
        Matrix(**{field: (name,)})


def test_an_option_naming_no_registered_name_is_named():
    assert parse_names("--loaders", " native, dali-cpu ", LOADERS) == ("native", "dali-cpu")
    with pytest.raises(ValueError, match="^--loaders: unknown loader 'ffcv'; valid names: synthetic, "):
        parse_names("--loaders", "native,ffcv", LOADERS)
    with pytest.raises(ValueError, match="^--loaders: no name given; valid names: synthetic, "):
        parse_names("--loaders", ",", LOADERS)


@pytest.mark.parametrize("text", ["1,two", "0", "-1", "1,0", ","])
def test_rank_counts_must_be_positive_numbers(text):
    with pytest.raises(ValueError, match=f"--gpus takes comma-separated positive rank counts .*; got '{text}'"):
        parse_ranks(text)


def test_every_cell_id_parses_back_to_its_cell():
    for cell in [*Matrix(ranks=(1, 2, 16), loaders=("synthetic", "dali-gpu-tfrecord")).cells(), *accuracy_cells()]:
        assert parse_cell_id(cell.id) == cell


@pytest.mark.parametrize("cell_id, why", [
    ("ddp-synthetic-resnet49-g1", "unknown model 'resnet49'; valid names: resnet50"),
    ("jax-synthetic-resnet50-g1", "unknown framework 'jax'"),
    ("ddp-ffcv-resnet50-g2", "unknown loader 'ffcv'"),
    ("ddp-synthetic-resnet50-g0", "not of the form <framework>-<loader>-<model>-g<ranks>"),
    ("ddp-resnet50-g1", "not of the form"),
    ("accuracy-ddp-linear-b32-g1", "unknown schedule 'linear'"),
    ("accuracy-ddp-step-b33-g2", "the batch a multiple of the training ranks"),
])
def test_ids_of_no_cell_say_why(cell_id, why):
    with pytest.raises(ValueError) as error:
        parse_cell_id(cell_id)
    assert str(error.value).startswith(f"cell id {cell_id!r}: ") and why in str(error.value)


def hash_of(workload: Workload, cell: Cell) -> str:
    return config_hash(dataclasses.asdict(workload), cell)


def test_config_hash_follows_what_is_measured_not_where_data_lives():
    cell = Cell(framework="ddp", loader="native", model="resnet50", ranks=1)
    base = Workload()
    assert hash_of(base, cell) == hash_of(base.replace(data_dir="/elsewhere"), cell)
    assert hash_of(base, cell) != hash_of(base.replace(image_size=64), cell)
    other = Cell(framework="ddp", loader="synthetic", model="resnet50", ranks=1)
    assert hash_of(base, cell) != hash_of(base, other)


def test_a_backends_knob_is_hashed_only_into_its_own_cells():
    synthetic, native, dali = (Cell(framework="ddp", loader=loader, model="resnet50", ranks=1)
                               for loader in ("synthetic", "native", "dali-cpu"))
    base = Workload()
    more_threads, more_workers = base.replace(dali_threads=8), base.replace(num_workers=8)
    assert hash_of(base, dali) != hash_of(more_threads, dali)
    assert hash_of(base, native) == hash_of(more_threads, native)
    assert hash_of(base, synthetic) == hash_of(more_threads, synthetic) == hash_of(more_workers, synthetic)
    assert hash_of(base, native) != hash_of(more_workers, native)
    assert hash_of(base, dali) == hash_of(more_workers, dali)
    assert set(measured_config(dataclasses.asdict(base), synthetic)) & {"num_workers", "dali_threads", "prefetch",
                                                                        "data_format", "data_dir"} == set()


def test_a_backend_reads_no_other_backends_knob():
    """What a backend's module reads of the workload is shared or its own: a knob read but not
    claimed would change its cells' figures without making their baselines stale."""
    knobs = {knob for registry in (FRAMEWORKS, LOADERS, MODELS) for name in registry.names()
             for knob in registry.entry(name).knobs}
    assert {"num_workers", "dali_threads", "prefetch", "data_format"} <= knobs
    for registry in (FRAMEWORKS, LOADERS, MODELS):
        for name in registry.names():
            entry = registry.entry(name)
            for runtime in registry.runtimes_of(name):  # each implementation's module, unimported
                module = registry.target(name, runtime).partition(":")[0]
                source = Path(importlib.util.find_spec(module).origin).read_text()
                read = set(re.findall(r"workload\.([a-z_]+)", source)) & knobs
                assert read <= set(entry.knobs), f"{registry.kind} {name} ({runtime}) reads {sorted(read - set(entry.knobs))}"


@pytest.mark.parametrize("cell_id, expected", [
    ("ddp-synthetic-resnet50-g1", ("ddp", "synthetic", "resnet50", 1)),
    ("deepspeed_zero2-dali-cpu-tfrecord-resnet152-g16", ("deepspeed_zero2", "dali-cpu-tfrecord", "resnet152", 16)),
])
def test_cell_ids_parse_back(cell_id, expected):
    parsed = scaling_cell(cell_id)
    assert (parsed.framework, parsed.loader, parsed.model, parsed.ranks) == expected


def test_a_malformed_cell_id_is_no_scaling_cell():
    assert scaling_cell("accuracy-ddp-step-b32-g1x") is None and scaling_cell("accuracy-ddp-step-b32-g1") is None


def test_a_framework_meets_only_what_its_runtime_implements():
    matrix = Matrix(frameworks=("ddp", "tensorflow"), loaders=("native-tfrecord", "dali-cpu"), models=("resnet50",),
                    ranks=(1,))
    assert [cell.id for cell in matrix.cells()] == ["ddp-dali-cpu-resnet50-g1", "tensorflow-native-tfrecord-resnet50-g1"]
    assert matrix.unimplemented() == ["ddp-native-tfrecord-resnet50", "tensorflow-dali-cpu-resnet50"]
    assert not implemented("mxnet", "synthetic", "resnet152") and implemented("mxnet", "synthetic", "resnet44")


def test_framework_and_model_names_hold_no_dash_so_that_a_cell_id_parses():
    # <framework>-<loader>-<model>-g<ranks>: only a loader's name may hold "-" (dali-cpu-tfrecord)
    assert [name for name in [*FRAMEWORKS.names(), *MODELS.names()] if "-" in name] == []
    for framework in FRAMEWORKS.names():
        cell = Cell(framework=framework, loader="dali-cpu-tfrecord", model="resnet50", ranks=3)
        assert parse_cell_id(cell.id) == cell
    ps = AccuracyCell(framework="torch_ps_async", schedule="cosine", batch_per_rank=64, ranks=3, servers=1)
    assert ps.global_batch == 128 and ps.training_ranks == 2
    assert ps in accuracy_cells(("torch_ps_async",)) and parse_cell_id(ps.id) == ps
