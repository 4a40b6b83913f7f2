"""The native loader's bad input: a file of the dataset that cannot be read or decoded fails the
rank with one line naming the file, though the DataLoader worker that met it wraps it in its own
traceback."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image

from harness.rank.loaders import LOADERS
from harness.rank.rankenv import RankInfo
from harness.rank.worker import error_line
from harness.rank.workload import Workload


def grey_folder(root: Path) -> Path:
    for label in range(2):
        (root / f"class{label}").mkdir(parents=True)
        for number in range(4):
            Image.new("RGB", (40, 36), (16 * (label * 4 + number),) * 3).save(root / f"class{label}" / f"img{number}.jpg")
    return root


@pytest.mark.parametrize("how", ["dangling-link", "text"])
def test_an_unreadable_image_fails_the_rank_with_one_line_naming_the_file(tmp_path, how):
    root = grey_folder(tmp_path / "data")
    bad = root / "class1" / "img9.jpg"
    if how == "dangling-link":
        bad.symlink_to(tmp_path / "gone.jpg")  # a file removed under a listing (root can read any mode)
    else:
        bad.write_text("this is not a JPEG\n")
    workload = Workload(image_size=16, batch_size=9, num_classes=2, data_dir=str(root), num_workers=1, seed=1)
    rank = RankInfo(rank=0, world_size=1, local_rank=0, local_world_size=1, master_addr="127.0.0.1", master_port=1,
                    source="torchrun")
    loader = LOADERS.create("native", workload=workload, rank=rank, device=torch.device("cpu"))
    with pytest.raises(Exception) as raised:
        next(iter(loader))  # the batch of 9 holds every file
    line = error_line(raised.value)
    assert "\n" not in line and line.startswith("CorruptImageError: cannot decode image ")
    assert str(bad) in line and line.endswith("(in DataLoader worker process 0)"), line


def test_an_error_raised_in_the_rank_itself_is_its_type_and_message():
    assert error_line(ValueError("dataset /d has 3 images: too few")) == "ValueError: dataset /d has 3 images: too few"
