"""The accuracy task trains for real: a short 1-rank DDP run must clearly beat chance (10 %)."""
from __future__ import annotations

import math

import pytest
import torch

from harness.rank.accuracy import (build_digits_resnet, load_digits_split, run_accuracy, shard_indices,
                                   single_rank_adapter)
from harness.report.plots_accuracy import write_all


@pytest.fixture(scope="module")
def data():
    return load_digits_split()


def test_split_is_fixed_stratified_and_standardised(data):
    assert data.train_images.shape == (1297, 1, 8, 8) and data.val_images.shape == (500, 1, 8, 8)
    assert torch.equal(load_digits_split().val_labels, data.val_labels)  # independent of any run's seed
    assert torch.bincount(data.val_labels).min() >= 45  # ~50 of each of the 10 digits
    assert abs(float(data.train_images.mean())) < 1e-5 and float(data.train_images.std()) == pytest.approx(1, rel=1e-4)


def test_model_shapes():
    assert build_digits_resnet()(torch.zeros(4, 1, 8, 8)).shape == (4, 10)


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_shards_cover_the_epoch_like_distributed_sampler(world_size):
    shards = [shard_indices(1297, rank=r, world_size=world_size, epoch=3, seed=7) for r in range(world_size)]
    assert {len(s) for s in shards} == {math.ceil(1297 / world_size)}
    assert set(torch.cat(shards).tolist()) == set(range(1297))
    assert not torch.equal(shards[0], shard_indices(1297, rank=0, world_size=world_size, epoch=4, seed=7))


def test_short_run_learns_and_reports_every_field(data, tmp_path):
    torch.set_num_threads(1)
    seen = []
    with single_rank_adapter("ddp") as (adapter, rank):
        result = run_accuracy(adapter, rank=rank, device=torch.device("cpu"), schedule="cosine", epochs=3,
                              batch_per_rank=32, base_lr=0.05, warmup_epochs=0.5, label_smoothing=0.1,
                              seed=1234, progress=lambda *args: seen.append(args), data=data)
    assert result["final_val_accuracy"] > 0.8, result  # chance is 0.1; a broken step stays near it
    assert result["val_accuracy_per_epoch"][-1] == result["final_val_accuracy"]
    assert result["train_loss_per_epoch"][-1] < result["train_loss_per_epoch"][0]
    assert result["global_batch"] == 32 and result["steps"] == 3 * (1297 // 32)
    assert result["lr_per_epoch"][0] == pytest.approx(0.05)  # warm-up starts at base_lr
    assert len(result["lr_per_epoch"]) == len(result["val_accuracy_per_epoch"]) == 3
    assert seen[-1] == ("eval", 3, 3) and ("train", result["steps"], result["steps"]) in seen

    paths = write_all([result, {**result, "schedule": "step", "global_batch": 64}], tmp_path)
    assert [p.name for p in paths] == ["lr_vs_epoch.png", "accuracy_vs_batch.png", "accuracy_vs_epoch.png"]
    for path in paths:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000


def test_a_global_batch_larger_than_the_training_set_is_refused(data):
    with single_rank_adapter("ddp") as (adapter, rank):
        with pytest.raises(ValueError, match="larger than the 1297 training images"):
            run_accuracy(adapter, rank=rank, device=torch.device("cpu"), schedule="step", epochs=2,
                         batch_per_rank=2048, base_lr=0.05, warmup_epochs=0, label_smoothing=0.1, seed=0,
                         progress=None, data=data)
