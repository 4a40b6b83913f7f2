"""The TensorFlow-free TFRecord converter: encoding, framing, index files, and a round trip through
DALI's own TFRecord reader."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from bench_tests.components import needs
from harness.data import tfrecord
from harness.data.tfrecord import TFRecordError

DALI_MISSING = "NVIDIA DALI is not installed (bash ci/install_dali.sh .venv)"


def make_image_folder(root: Path, classes: int = 3, per_class: int = 4) -> dict[str, tuple[int, tuple[int, int]]]:
    """Real JPEGs of varied sizes; returns {relative path: (class index, (height, width))}."""
    rng = np.random.default_rng(0)
    made = {}
    for label in range(classes):
        folder = root / f"class{label}"
        folder.mkdir(parents=True)
        for number in range(per_class):
            height, width = 24 + 4 * number, 32 + 8 * label
            pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(folder / f"img{number}.jpg", quality=90)
            made[f"class{label}/img{number}.jpg"] = (label, (height, width))
    return made


@pytest.fixture
def folder(tmp_path):
    root = tmp_path / "folder"
    return root, make_image_folder(root)


def test_crc32c_known_values():
    assert tfrecord.crc32c(b"123456789") == 0xE3069283
    assert tfrecord.crc32c(bytes(32)) == 0x8A9136AA


def test_example_encoding_round_trips():
    features = {"image/encoded": b"\xff\xd8 bytes", "image/class/label": 7, "many": [1, -2, 300000],
                "texts": [b"a", b"bc"]}
    assert tfrecord.decode_example(tfrecord.encode_example(features)) == {
        "image/encoded": [b"\xff\xd8 bytes"], "image/class/label": [7], "many": [1, -2, 300000],
        "texts": [b"a", b"bc"]}


def test_framing_detects_corruption(tmp_path):
    path = tmp_path / "one.tfrecord"
    path.write_bytes(tfrecord.frame_record(b"hello") + tfrecord.frame_record(b"world!"))
    assert list(tfrecord.read_records(path)) == [b"hello", b"world!"]
    data = bytearray(path.read_bytes())
    data[14] ^= 1  # a bit of the first record's payload
    path.write_bytes(bytes(data))
    with pytest.raises(TFRecordError, match="bad data checksum"):
        list(tfrecord.read_records(path))
    path.write_bytes(bytes(data[:-3]))
    with pytest.raises(TFRecordError, match="truncated"):
        list(tfrecord.read_records(path, check_crc=False))


def test_convert_round_trip_without_dali(folder, tmp_path):
    source, made = folder
    out = tfrecord.convert(source, tmp_path / "tfr", shards=2)
    shards = sorted(out.glob("train-*.tfrecord"))
    assert [p.name for p in shards] == ["train-00000-of-00002.tfrecord", "train-00001-of-00002.tfrecord"]
    seen = {}
    for shard in shards:
        for record in tfrecord.read_records(shard):  # checks both checksums of every record
            example = tfrecord.decode_example(record)
            name = example["image/filename"][0].decode()
            assert example["image/encoded"][0] == (source / name).read_bytes()
            assert example["image/class/text"][0].decode() == name.split("/")[0]
            seen[name] = example["image/class/label"][0]
    assert seen == {name: label + tfrecord.LABEL_BASE for name, (label, _) in made.items()}
    meta = json.loads((out / tfrecord.MARKER).read_text())
    assert meta["label_base"] == 1 and meta["records"] == len(made)
    assert meta["classes"] == ["class0", "class1", "class2"]


def test_index_format(folder, tmp_path):
    out = tfrecord.convert(folder[0], tmp_path / "tfr", shards=2)
    for shard in sorted(out.glob("train-*.tfrecord")):
        index = out / "idx" / f"{shard.name}.idx"
        lines = index.read_text().splitlines()
        entries = [tuple(map(int, line.split(" "))) for line in lines]
        assert all(len(line.split(" ")) == 2 for line in lines)
        assert entries[0][0] == 0
        assert all(a + size == b for (a, size), (b, _) in zip(entries, entries[1:]))  # back to back
        assert entries[-1][0] + entries[-1][1] == shard.stat().st_size
        assert entries == tfrecord.index_lines(shard)


def test_index_matches_dalis_tfrecord2idx(folder, tmp_path):
    tool = Path(sys.executable).parent / "tfrecord2idx"
    needs("dali", None if tool.exists() else f"{DALI_MISSING}: it ships tfrecord2idx")
    out = tfrecord.convert(folder[0], tmp_path / "tfr", shards=1)
    shard = out / "train-00000-of-00001.tfrecord"
    subprocess.run([sys.executable, str(tool), str(shard), str(tmp_path / "dali.idx")], check=True)
    assert (tmp_path / "dali.idx").read_text() == (out / "idx" / f"{shard.name}.idx").read_text()


def test_convert_is_idempotent_and_notices_changes(folder, tmp_path):
    source, _ = folder
    out = tfrecord.convert(source, tmp_path / "tfr", shards=2)
    stamp = (out / tfrecord.MARKER).stat().st_mtime_ns
    tfrecord.convert(source, out, shards=2)
    assert (out / tfrecord.MARKER).stat().st_mtime_ns == stamp
    shutil.copy(source / "class0/img0.jpg", source / "class1/extra.jpg")
    tfrecord.convert(source, out, shards=2)
    assert json.loads((out / tfrecord.MARKER).read_text())["records"] == 13
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left behind


def test_convert_refuses_foreign_directory_and_bad_images(folder, tmp_path):
    source, _ = folder
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(TFRecordError, match="not a conversion made by this tool"):
        tfrecord.convert(source, tmp_path / "busy")
    (source / "class1" / "img2.jpg").write_text("not a jpeg")
    with pytest.raises(TFRecordError, match=r"class1/img2\.jpg"):
        tfrecord.convert(source, tmp_path / "tfr")
    assert not (tmp_path / "tfr").exists()
    tfrecord.convert(source, tmp_path / "tfr", verify=False)  # --no-verify writes it as it is
    assert tfrecord.open_tfrecord_set(tmp_path / "tfr").records == 12


def test_missing_and_stale_index_name_the_shard_and_the_fix(folder, tmp_path):
    out = tfrecord.convert(folder[0], tmp_path / "tfr", shards=2)
    index = out / "idx" / "train-00001-of-00002.tfrecord.idx"
    kept = index.read_text()
    index.unlink()
    with pytest.raises(TFRecordError, match=r"train-00001-of-00002\.tfrecord has no index file.*"
                                            r"python -m harness\.data\.tfrecord --index"):
        tfrecord.open_tfrecord_set(out)
    index.write_text(kept.splitlines()[0] + "\n")
    with pytest.raises(TFRecordError, match="stale index"):
        tfrecord.open_tfrecord_set(out)
    index.unlink()
    assert tfrecord.ensure_indexes(out) == [index]
    assert index.read_text() == kept
    assert tfrecord.open_tfrecord_set(out).records == 12


def test_finds_imagenet_style_shards_and_indexes(tmp_path):
    # ImageNet's own layout: train-00000-of-01024 without suffix, validation-* beside, indexes in idx/.
    for name in ("train-00000-of-00002", "train-00001-of-00002", "validation-00000-of-00001"):
        (tmp_path / name).write_bytes(tfrecord.frame_record(tfrecord.encode_example({"image/class/label": 1})))
    assert [p.name for p in tfrecord.find_shards(tmp_path)] == ["train-00000-of-00002", "train-00001-of-00002"]
    for shard in tfrecord.find_shards(tmp_path):
        tfrecord.write_index(shard, tmp_path / "idx" / shard.name)  # the DALI example's naming
    found = tfrecord.open_tfrecord_set(tmp_path)
    assert found.records == 2 and found.label_base == 1 and found.classes is None


def test_command_line(folder, tmp_path):
    source, _ = folder
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    run = subprocess.run([sys.executable, "-m", "harness.data.tfrecord", "--from", str(source), "--to",
                          str(tmp_path / "tfr"), "--shards", "3"], capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr
    assert "3 shards, 12 records" in run.stderr
    run = subprocess.run([sys.executable, "-m", "harness.data.tfrecord", "--from", str(tmp_path / "nothing"), "--to",
                          str(tmp_path / "x")], capture_output=True, text=True, env=env)
    assert run.returncode == 1 and "does not exist" in run.stderr


def test_dali_reads_the_shards_back(folder, tmp_path):
    needs("dali", None if importlib.util.find_spec("nvidia.dali") else DALI_MISSING)
    import nvidia.dali.fn as fn
    import nvidia.dali.tfrecord as tfrec
    from nvidia.dali import pipeline_def, types

    source, made = folder
    found = tfrecord.open_tfrecord_set(tfrecord.convert(source, tmp_path / "tfr", shards=2))

    @pipeline_def(batch_size=len(made), num_threads=1, device_id=None, seed=0)
    def read_back():
        sample = fn.readers.tfrecord(
            path=[str(p) for p in found.shards], index_path=[str(p) for p in found.indexes],
            features={"image/encoded": tfrec.FixedLenFeature((), tfrec.string, ""),
                      "image/class/label": tfrec.FixedLenFeature([1], tfrec.int64, -1),
                      "image/filename": tfrec.FixedLenFeature((), tfrec.string, "")})
        images = fn.decoders.image(sample["image/encoded"], device="cpu", output_type=types.RGB)
        return images, sample["image/class/label"], sample["image/filename"]

    pipe = read_back()
    pipe.build()
    images, labels, names = pipe.run()
    seen = {}
    for index in range(len(made)):
        name = bytes(np.array(names.at(index))).decode()
        seen[name] = (int(np.array(labels.at(index))[0]) - found.label_base, np.array(images.at(index)).shape[:2])
    assert seen == made
