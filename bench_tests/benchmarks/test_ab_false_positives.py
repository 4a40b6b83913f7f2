"""How often the A/B calls a change where there is none: A/A comparisons of the current environment
against a separately built copy of it (``--against pkg:numpy==<the installed numpy>``: a package
set built with uv whose only difference is a second install of the same numpy), each its own
session of the scaling suite as a user runs it, through a real launcher. It prints every
comparison's verdict, ratio and pairs, and the false-positive rate with its exact 95% interval,
and fails on any ``regressed``.

    DLSCALE_BENCHMARKS=1 pytest bench_tests/benchmarks/test_ab_false_positives.py -s
    DLSCALE_AA_COMPARISONS=20 DLSCALE_AA_LAUNCHER=srun ...      # more comparisons, another launcher
    DLSCALE_AA_MAX_PAIRS=8 ...                                  # the first round's verdicts only

Not part of ordinary runs (a comparison of 8 pairs took about 3 minutes on a 2-core VM, of 32 pairs
about 12: 10 comparisons are 30 minutes to 2 hours).
"""
from __future__ import annotations

import importlib.metadata
import os
from collections import Counter

from bench_tests.benchmarks.ab_common import LAUNCHER, compare, exact_interval, only_when_asked  # noqa: F401

COMPARISONS = int(os.environ.get("DLSCALE_AA_COMPARISONS", "10"))
MAX_PAIRS = os.environ.get("DLSCALE_AA_MAX_PAIRS", "32")


def test_identical_environments_are_not_called_regressed(tmp_path):
    same = f"pkg:numpy=={importlib.metadata.version('numpy')}"
    rows = [compare(tmp_path, "A/A", index, COMPARISONS, "--max-pairs", MAX_PAIRS, "--against", same,
                    system="aa")
            for index in range(COMPARISONS)]
    verdicts = Counter(cell["verdict"] for cell in rows)
    called = verdicts["regressed"] + verdicts["improved"]
    low, high = exact_interval(called, len(rows))
    print(f"{len(rows)} A/A comparisons through {LAUNCHER}: {dict(verdicts)}; a change called in {called} "
          f"(false-positive rate {called / len(rows):.2f}, 95% interval [{low:.2f}, {high:.2f}]); pairs "
          f"{sorted(len(cell['pairs']) for cell in rows)}")
    assert verdicts["regressed"] == 0
