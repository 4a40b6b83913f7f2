import pytest
from PIL import Image

from harness.data.dataset import DatasetError, ensure, validate_image_folder


def test_generated_dataset_is_real_jpegs_in_class_folders(tmp_path):
    root = ensure(tmp_path / "data", classes=3, per_class=4, size=40)
    assert validate_image_folder(root) == {"classes": 3, "images": 12}
    sample = next((root / "class0001").iterdir())
    with Image.open(sample) as image:
        assert image.format == "JPEG" and image.size == (40, 40)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]  # no staging directory left


def test_ensure_keeps_a_matching_dataset_and_rebuilds_another(tmp_path):
    root = ensure(tmp_path / "data", classes=2, per_class=2, size=32)
    stamp = (root / "class0000" / "img00000.jpg").stat().st_mtime_ns
    ensure(root, classes=2, per_class=2, size=32)
    assert (root / "class0000" / "img00000.jpg").stat().st_mtime_ns == stamp
    ensure(root, classes=3, per_class=2, size=32)
    assert validate_image_folder(root)["classes"] == 3


def test_not_a_directory(tmp_path):
    with pytest.raises(DatasetError, match="missing does not exist$"):
        validate_image_folder(tmp_path / "missing")
    (tmp_path / "file").write_text("x")
    with pytest.raises(DatasetError, match="file is a file, not an ImageFolder tree"):
        validate_image_folder(tmp_path / "file")


def test_flat_folder_is_not_an_image_folder(tmp_path):
    (tmp_path / "a.jpg").write_bytes(b"")
    with pytest.raises(DatasetError, match="no class subdirectories"):
        validate_image_folder(tmp_path)


def test_class_folders_without_images(tmp_path):
    (tmp_path / "cat").mkdir()
    (tmp_path / "cat" / "notes.txt").write_text("x")
    with pytest.raises(DatasetError, match="no image files"):
        validate_image_folder(tmp_path)
