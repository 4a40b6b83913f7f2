"""The DALI loaders on CPU: batches, sharding, both readers, bad input, and what happens without DALI.

Each image of the small datasets here is one flat grey level, unique to it, so after any crop and
flip the mean of a batch image still says which file it came from.
"""
from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from PIL import Image

from bench_tests.components import needs
from harness.data import tfrecord
from harness.rank.loaders import FILE_LOADERS, LOADERS
from harness.rank.loaders.dali import IMAGENET_MEAN, IMAGENET_STD, INSTALL_HINT, DaliDataError, pick_format
from harness.rank.rankenv import RankInfo
from harness.rank.workload import Workload

DALI_MISSING = "NVIDIA DALI is not installed (bash ci/install_dali.sh .venv)"
CLASSES, PER_CLASS, STEP = 4, 6, 9
"""24 images with grey levels 16, 25, ..., 223: image i of class c has level 16 + STEP * (c * PER_CLASS + i)."""


@pytest.fixture
def dali():
    needs("dali", None if importlib.util.find_spec("nvidia.dali") else DALI_MISSING)
    import nvidia.dali

    return nvidia.dali


def rank_info(rank: int = 0, world: int = 1) -> RankInfo:
    return RankInfo(rank=rank, world_size=world, local_rank=rank, local_world_size=world,
                    master_addr="127.0.0.1", master_port=29500, source="torchrun")


def make_grey_folder(root: Path) -> Path:
    for label in range(CLASSES):
        (root / f"class{label}").mkdir(parents=True)
        for number in range(PER_CLASS):
            level = 16 + STEP * (label * PER_CLASS + number)
            size = (40 + 4 * number, 36 + 2 * label)
            Image.new("RGB", size, (level,) * 3).save(root / f"class{label}" / f"img{number}.jpg", quality=95)
    return root


@pytest.fixture
def grey(tmp_path):
    return make_grey_folder(tmp_path / "grey")


def make_loader(data_dir, *, rank=0, world=1, batch_size=4, image_size=16, **changes):
    workload = Workload(image_size=image_size, batch_size=batch_size, num_classes=CLASSES, data_dir=str(data_dir),
                        dali_threads=1, prefetch=1, seed=7).replace(**changes)
    return LOADERS.create("dali-cpu", workload=workload, rank=rank_info(rank, world), device=torch.device("cpu"))


def sample_ids(images: torch.Tensor) -> list[int]:
    """Which file each image came from, from its grey level (channel 0 undone of normalisation)."""
    level = images[:, 0].mean(dim=(1, 2)) * (255 * IMAGENET_STD[0]) + 255 * IMAGENET_MEAN[0]
    return [round((float(value) - 16) / STEP) for value in level]


def one_epoch(loader, batches: int) -> tuple[list[int], list[int]]:
    stream = iter(loader)
    ids, labels = [], []
    for _ in range(batches):
        images, label = next(stream)
        ids += sample_ids(images)
        labels += label.tolist()
    return ids, labels


def test_registered_as_file_loaders_with_presets():
    assert {"dali-cpu", "dali-gpu"} <= FILE_LOADERS
    assert LOADERS.entry("dali-cpu").preset == {"decode_device": "cpu"}
    assert LOADERS.entry("dali-gpu").preset == {"decode_device": "mixed"}


def test_module_import_does_not_import_dali():
    code = "import sys, harness.rank.loaders.dali; assert 'nvidia.dali' not in sys.modules, 'imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[3])


def test_missing_dali_names_the_install_command(grey, monkeypatch):
    monkeypatch.setitem(sys.modules, "nvidia.dali", None)  # makes `import nvidia.dali` fail
    with pytest.raises(ImportError, match=INSTALL_HINT.replace(".", r"\.")):
        make_loader(grey)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU, so dali-gpu can run")
def test_dali_gpu_without_gpu_is_a_clear_error(grey):
    workload = Workload(data_dir=str(grey), num_classes=CLASSES)
    with pytest.raises(RuntimeError, match="dali-gpu decodes JPEGs on a GPU.*use dali-cpu"):
        LOADERS.create("dali-gpu", workload=workload, rank=rank_info(), device=torch.device("cpu"))


def test_batches_are_normalised_float_images_and_int64_labels(grey, dali):
    loader = make_loader(grey, batch_size=5, image_size=20)
    stream = iter(loader)
    for _ in range(12):  # 4 batches an epoch (24 // 5): this crosses two epoch ends
        images, labels = next(stream)
        assert images.shape == (5, 3, 20, 20) and images.dtype == torch.float32
        assert images.device.type == "cpu" and images.is_contiguous()
        assert labels.shape == (5,) and labels.dtype == torch.int64
        assert labels.min() >= 0 and labels.max() < CLASSES
        low = min((0 - m) / s for m, s in zip(IMAGENET_MEAN, IMAGENET_STD))
        high = max((1 - m) / s for m, s in zip(IMAGENET_MEAN, IMAGENET_STD))
        assert low - 1e-4 <= float(images.min()) and float(images.max()) <= high + 1e-4
        # Flat grey images: the three channels agree once normalisation is undone.
        undone = images * torch.tensor(IMAGENET_STD).view(1, 3, 1, 1) + torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
        assert torch.allclose(undone[:, 0], undone[:, 2], atol=3 / 255)
    settings = loader.settings()
    assert settings["reader"] == "folder" and settings["images"] == 24 and settings["decode_device"] == "cpu"
    loader.close()


def test_labels_match_the_files(grey, dali):
    ids, labels = one_epoch(make_loader(grey, batch_size=4), 6)
    assert sorted(ids) == list(range(24))  # one epoch is every file once
    assert labels == [i // PER_CLASS for i in ids]


@pytest.mark.parametrize("reader", ["folder", "tfrecord"])
def test_two_shards_see_disjoint_halves_in_an_epoch(grey, tmp_path, dali, reader):
    data = grey if reader == "folder" else tfrecord.convert(grey, tmp_path / "tfr", shards=2)
    first, second = (make_loader(data, rank=rank, world=2, batch_size=4) for rank in (0, 1))
    stream = iter(first)
    epochs = [sum((sample_ids(next(stream)[0]) for _ in range(3)), []) for _ in range(2)]
    other, _ = one_epoch(second, 3)
    assert len(set(epochs[0])) == 12 and len(set(other)) == 12
    assert sorted(epochs[0] + other) == list(range(24))  # disjoint, and together everything
    assert sorted(epochs[0] + epochs[1]) == list(range(24))  # the next epoch reads the other shard


def test_tfrecord_reader_gives_the_same_samples_and_labels(grey, tmp_path, dali):
    shards = tfrecord.convert(grey, tmp_path / "tfr", shards=3)
    folder_loader, record_loader = make_loader(grey), make_loader(shards)
    assert record_loader.settings()["reader"] == "tfrecord" and record_loader.settings()["shards"] == 3
    assert folder_loader.settings()["images"] == record_loader.settings()["images"] == 24
    ids, labels = one_epoch(record_loader, 6)
    assert sorted(ids) == list(range(24))
    assert labels == [i // PER_CLASS for i in ids]  # the 1-based labels in the records come back 0-based


def test_zero_based_tfrecords_need_their_marker(grey, tmp_path, dali):
    out = tfrecord.convert(grey, tmp_path / "tfr", shards=1)
    (out / tfrecord.MARKER).unlink()  # now it looks like an unknown TFRecord set: ImageNet's 1-based default
    assert make_loader(out).settings()["label_base"] == 1
    (out / tfrecord.MARKER).write_text('{"label_base": 2}')  # a wrong base shows up as a negative label
    with pytest.raises(ValueError, match="label base 2"):
        one_epoch(make_loader(out), 6)


def test_format_is_picked_from_the_directory(grey, tmp_path):
    assert pick_format(grey, "auto") == "folder"
    shards = tfrecord.convert(grey, tmp_path / "tfr", shards=1)
    assert pick_format(shards, "auto") == "tfrecord"
    assert pick_format(shards, "folder") == "folder"
    with pytest.raises(ValueError, match="data_format must be one of"):
        pick_format(grey, "lmdb")
    with pytest.raises(ValueError, match="neither class folders"):
        pick_format(tmp_path / "tfr" / "idx", "auto")
    for shard in shards.glob("train-*"):
        shutil.copy(shard, grey)
    with pytest.raises(ValueError, match="both class folders and TFRecord shards"):
        pick_format(grey, "auto")


def test_too_small_a_dataset_is_refused(grey, dali):
    with pytest.raises(ValueError, match="too few for one batch of 16 per rank on 2 ranks"):
        make_loader(grey, rank=0, world=2, batch_size=16)


def test_shard_without_index_names_the_shard(grey, tmp_path, dali):
    shards = tfrecord.convert(grey, tmp_path / "tfr", shards=2)
    (shards / "idx" / "train-00000-of-00002.tfrecord.idx").unlink()
    with pytest.raises(tfrecord.TFRecordError, match=r"train-00000-of-00002\.tfrecord has no index file"):
        make_loader(shards)


# --- bad input: DALI's error, or the loader's own check, must name the file ---------------------

def real_jpegs(root: Path) -> Path:
    """A few of the generated dataset's real photographs when it is there, else fresh grey ones."""
    cache = Path.home() / ".cache" / "dlscale" / "dataset"
    if not (cache / "class0000").is_dir():
        return make_grey_folder(root)
    for label in range(3):
        (root / f"class{label}").mkdir(parents=True)
        for number in range(4):
            source = cache / f"class{label:04d}" / f"img{number:05d}.jpg"
            (root / f"class{label}" / f"img{number}.jpg").write_bytes(source.read_bytes())
    return root


def corrupt(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "text":
        path.write_text("this is not a JPEG\n" * 10)
    elif how == "header-only":
        path.write_bytes(data[:200])
    elif how == "empty":
        path.write_bytes(b"")


@pytest.mark.parametrize("reader", ["folder", "tfrecord"])
@pytest.mark.parametrize("how", ["truncated", "text", "header-only", "empty"])
def test_bad_image_fails_naming_the_file(tmp_path, dali, reader, how):
    root = real_jpegs(tmp_path / "data")
    corrupt(root / "class1" / "img2.jpg", how)
    data_dir = root if reader == "folder" else tfrecord.convert(root, tmp_path / "tfr", shards=2, verify=False)
    with pytest.raises(DaliDataError, match=r"class1/img2\.jpg"):
        # The error may come while building (DALI runs the first batch then) or on any later batch.
        one_epoch(make_loader(data_dir, batch_size=4), 9)


def test_empty_class_folders_are_refused_before_reading(tmp_path, dali):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    with pytest.raises(ValueError, match="DALI cannot open dataset .* as folder: .*No files found"):
        make_loader(tmp_path)


@pytest.mark.parametrize("reader", ["folder", "tfrecord"])
def test_a_batch_says_the_bytes_its_reader_read_for_it(grey, tmp_path, dali, reader):
    """The batch's files, told by their grey levels, against what the loader says it read: each
    file's size (folder), or each record's encoded image (TFRecord)."""
    data = grey if reader == "folder" else tfrecord.convert(grey, tmp_path / "tfr", shards=2)
    files = sorted(grey.glob("class*/img*.jpg"), key=lambda path: (int(path.parent.name[5:]), int(path.stem[3:])))
    loader = make_loader(data, batch_size=4)
    stream = iter(loader)
    for _ in range(8):  # across an epoch's end
        images, _ = next(stream)
        said = loader.batch_data()["data"]
        expected = sum(files[i].stat().st_size for i in sample_ids(images))
        key = "bytes_read" if reader == "folder" else "encoded_bytes_read"
        assert said == {"images_decoded": 4, key: expected}
    loader.close()
