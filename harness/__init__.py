"""dlscale's harness: the shared training loop, framework adapters, loaders, models, launchers,
metrics and baselines behind the scaling suite in ``bench_tests/``. Its packages and their layers:
docs/architecture.md, "Architecture"."""
from pathlib import Path

HARNESS_SOURCE = Path(__file__).resolve().parent
"""This package's directory: its parent goes first on the ranks' PYTHONPATH, so that they run this
same code, and its git checkout, if it is one, is the code's provenance."""
