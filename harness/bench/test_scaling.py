"""The scaling suite: one test per cell of the matrix (framework x loader x model x rank count),
each launched as a real multi-process job and judged against the system's baseline file.

    pytest --pyargs harness.bench -m scaling [--launcher srun] [--gpus 1,2,4] [--update-baselines]
"""
import pytest


@pytest.mark.scaling
def test_cell(dlscale_cell, dlscale):
    dlscale.check(dlscale_cell)
