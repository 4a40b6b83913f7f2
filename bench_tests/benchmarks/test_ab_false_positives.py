"""How often the A/B calls a change where there is none: A/A comparisons of the current environment
against a separately built copy of it (``--against pkg:numpy==<the installed numpy>``: a package
set built with uv whose only difference is a second install of the same numpy), each its own
session of the scaling suite as a user runs it, through a real launcher. It prints every
comparison's verdict, ratio and pairs, and the false-positive rate with its exact 95% interval,
and fails where more than one in 40 calls a change.

    DLSCALE_BENCHMARKS=1 pytest bench_tests/benchmarks/test_ab_false_positives.py -s
    DLSCALE_AA_COMPARISONS=20 DLSCALE_AA_LAUNCHER=srun ...      # more comparisons, another launcher
    DLSCALE_AA_MAX_PAIRS=8 ...                                  # the first round's verdicts only
    DLSCALE_AA_REFERENCE=env ...                                # against a variable no code reads
    DLSCALE_AA_ALSO_AT=0.01,0.03 ...                            # the same pairs judged at these too
    DLSCALE_AB_DUET=1 DLSCALE_AB_MIN_EFFECT=0.01 ...            # duet pairs, a 1% minimum effect

Each verdict is the sequential A/B's, its looks' error spent (harness.judging.sequential): at most
2.5% a verdict wrong. DLSCALE_AA_ALSO_AT re-judges each comparison's recorded pairs, in the order
they came, at other minimum effects with the same looks (harness.judging.paired.judge_sequentially):
a session at the smallest of them takes the most pairs, so its pairs hold every look the larger ones
need.

Not part of ordinary runs (a comparison of 8 pairs took about 3 minutes on a 2-core VM, of 32 pairs
about 12: 10 comparisons are 30 minutes to 2 hours).
"""
from __future__ import annotations

import importlib.metadata
import os
from collections import Counter

from bench_tests.benchmarks.ab_common import LAUNCHER, compare, exact_interval, only_when_asked  # noqa: F401
from harness.judging.paired import Pair, judge_sequentially

COMPARISONS = int(os.environ.get("DLSCALE_AA_COMPARISONS", "10"))
MAX_PAIRS = os.environ.get("DLSCALE_AA_MAX_PAIRS", "32")
ALSO_AT = [float(value) for value in os.environ.get("DLSCALE_AA_ALSO_AT", "").split(",") if value]


def _rate(what: str, verdicts: Counter, comparisons: int) -> int:
    called = verdicts["regressed"] + verdicts["improved"]
    low, high = exact_interval(called, comparisons)
    print(f"{what}: {dict(verdicts)}; a change called in {called} of {comparisons} (false-positive rate "
          f"{called / comparisons:.3f}, exact 95% interval [{low:.3f}, {high:.3f}])")
    return called


def test_identical_environments_are_not_called_regressed(tmp_path):
    if os.environ.get("DLSCALE_AA_REFERENCE") == "env":
        against = ["--launch-env", "DLSCALE_AA_MARK=1", "--against", "env:DLSCALE_AA_MARK"]
    else:
        against = ["--against", f"pkg:numpy=={importlib.metadata.version('numpy')}"]
    rows = [compare(tmp_path, "A/A", index, COMPARISONS, "--pairs", "8", "--max-pairs", MAX_PAIRS, *against,
                    system="aa")
            for index in range(COMPARISONS)]
    called = _rate(f"{len(rows)} A/A comparisons through {LAUNCHER}", Counter(cell["verdict"] for cell in rows),
                   len(rows))
    print(f"pairs {sorted(len(cell['pairs']) for cell in rows)}")
    for min_effect in ALSO_AT:
        again = Counter(judge_sequentially([Pair(**pair) for pair in cell["pairs"]], min_effect=min_effect, first=8,
                                           most=int(MAX_PAIRS)).kind for cell in rows if len(cell["pairs"]) >= 2)
        _rate(f"the same pairs judged at a {min_effect:.0%} minimum effect", again, sum(again.values()))
    assert called <= max(1, len(rows) // 40)
