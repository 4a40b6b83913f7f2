"""Accuracy cells: a short real training per learning-rate schedule and global batch size,
judged by its final validation accuracy against the system's baseline file.

    pytest -m accuracy [--frameworks ddp,horovod] [--update-baselines]
"""
import pytest


@pytest.mark.accuracy
def test_accuracy(accuracy_cell, dlscale):
    dlscale.check_accuracy(accuracy_cell)
