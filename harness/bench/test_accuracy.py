"""Accuracy cells: a short real training per learning-rate schedule and global batch size,
judged by its final validation accuracy against the system's baseline file.

    pytest --pyargs harness.bench -m accuracy [--frameworks ddp,horovod] [--update-baselines]
"""
import pytest


@pytest.mark.accuracy
def test_accuracy(dlscale_accuracy_cell, dlscale):
    dlscale.check_accuracy(dlscale_accuracy_cell)
