import pytest

from harness.cells import Cell, Matrix, Workload, parse_ranks


def test_cell_ids():
    assert Cell(framework="ddp", loader="native", model="resnet50", ranks=2).id == "ddp-native-resnet50-g2"
    cell = Cell(framework="deepspeed_zero2", loader="dali-cpu-tfrecord", model="resnet152", ranks=16)
    assert cell.id == "deepspeed_zero2-dali-cpu-tfrecord-resnet152-g16"


def test_matrix_orders_each_series_by_rank_count():
    cells = Matrix(frameworks=("ddp",), loaders=("synthetic",), models=("resnet50", "resnet101"), ranks=(4, 1, 2)).cells()
    assert [c.id for c in cells] == ["ddp-synthetic-resnet50-g1", "ddp-synthetic-resnet50-g2", "ddp-synthetic-resnet50-g4",
                                     "ddp-synthetic-resnet101-g1", "ddp-synthetic-resnet101-g2", "ddp-synthetic-resnet101-g4"]


@pytest.mark.parametrize("field, name, kind", [
    ("frameworks", "tensorflow", "framework"), ("loaders", "ffcv", "loader"), ("models", "vgg16", "model"),
])
def test_unknown_names_list_the_valid_ones(field, name, kind):
    with pytest.raises(ValueError, match=f"unknown {kind} '{name}'; valid names: "):
        Matrix(**{field: (name,)})


def test_rank_counts_must_be_numbers():
    with pytest.raises(ValueError, match="--gpus"):
        parse_ranks("1,two")


def test_config_hash_follows_what_is_measured_not_where_data_lives():
    cell = Cell(framework="ddp", loader="native", model="resnet50", ranks=1)
    base = Workload()
    assert base.config_hash(cell) == base.replace(data_dir="/elsewhere").config_hash(cell)
    assert base.config_hash(cell) != base.replace(image_size=64).config_hash(cell)
    other = Cell(framework="ddp", loader="synthetic", model="resnet50", ranks=1)
    assert base.config_hash(cell) != base.config_hash(other)
