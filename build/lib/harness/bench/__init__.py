"""The suite's own test modules, shipped with the package so that an installed dlscale runs them
from any directory (its ``baselines/``, ``history/`` and ``results/`` are that project's):

    pytest --pyargs harness.bench -m scaling [--launcher srun] [--update-baselines]
    pytest --pyargs harness.bench -m accuracy
"""
