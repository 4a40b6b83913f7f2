"""How widely an A/B's launches spread, and what narrows it: A/A sessions of the A/B benchmarks' cell
through a real launcher, each its own session of the scaling suite as a user runs it, the reference
differing from the current side only by a variable no code reads.

- ``test_sequential_and_duet_pairs_side_by_side``: sessions of each arrangement in turn (pairs back
  to back with the rank on both cores, back to back on one core, and duets, one core each), so that
  an hour's drift of the VM reaches all alike; per arrangement the per-launch spread, the spread of
  a pair's log ratio, how the two launches of a pair correlate, what a launch costs against what it
  measures, and the machine time per pair.
- ``test_each_lead_as_an_ab``: each lead of issue 51 given to the current side only
  (``--launch-env NAME=VALUE --against env:NAME``): each side's per-launch spread and the speed
  ratio, with the verdict.

    DLSCALE_BENCHMARKS=1 pytest bench_tests/benchmarks/test_ab_spread.py -s
    DLSCALE_SPREAD_SESSIONS=3 DLSCALE_SPREAD_PAIRS=16 ...     # sessions per arrangement, pairs each
    DLSCALE_AB_KEEP=DIR ...                                   # keep each results file: dlscale-launches DIR/*.json

Not part of ordinary runs (a session of 16 pairs takes 1.5-3 minutes on a 2-core VM).
"""
from __future__ import annotations

import json
import math
import os
import statistics
import time
from pathlib import Path

from bench_tests.benchmarks.ab_common import compare, only_when_asked  # noqa: F401
from harness.report.launches import between_launch_share, cv, launches_of, pair_logs

SESSIONS = int(os.environ.get("DLSCALE_SPREAD_SESSIONS", "3"))
PAIRS = os.environ.get("DLSCALE_SPREAD_PAIRS", "16")
A_A = ["--launch-env", "DLSCALE_AA_MARK=1", "--against", "env:DLSCALE_AA_MARK", "--pairs", PAIRS, "--max-pairs", PAIRS]
ARRANGEMENTS = {
    "sequential, the node's cores": ("sequential", []),
    "sequential, one core": ("sequential-1core", ["--cores-per-rank", "1"]),
    "duet, one core each": ("duet", ["--duet"]),
}
"""Each arrangement's name, its sessions' directory and its flags."""
LEADS = {
    "tcmalloc": "LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4",
    "jemalloc": "LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2",
    "glibc thresholds pinned": "MALLOC_MMAP_THRESHOLD_=33554432",
    "torch's huge pages (THP_MEM_ALLOC_ENABLE)": "THP_MEM_ALLOC_ENABLE=1",
    "a fixed hash seed": "PYTHONHASHSEED=0",
    "no address-space randomisation": "DLSCALE_NO_ASLR=1",
    "the environment padded to 64 KiB": "DLSCALE_ENV_BYTES=65536",
    "denormals flushed": "DLSCALE_FLUSH_DENORMAL=1",
}
"""Issue 51's leads, each a variable of the current side's launch environment (harness.rank.layout)."""


def _spread(cells: list[dict]) -> dict:
    launches = launches_of({"paired_cells": [cell]} for cell in cells)
    logs = pair_logs(launches)
    ratios = [current - reference for reference, current in logs]
    sides = {side: [entry for entry in launches if entry["side"] == side] for side in ("reference", "current")}
    return {
        "pairs": len(logs),
        "launch_cv": {side: cv([entry["relative"] for entry in mine]) for side, mine in sides.items()},
        "pair_sd": statistics.stdev(ratios) if len(ratios) > 1 else math.nan,
        "correlation": statistics.correlation(*zip(*logs)) if len(logs) > 2 else math.nan,
        "between_launches": between_launch_share(launches),
        "img_s": {side: statistics.median(entry["throughput"] for entry in mine) for side, mine in sides.items()},
        "launch_s": statistics.median(entry["wall_s"] for entry in launches),
        "measured_s": statistics.median(entry["window_s"] for entry in launches),
        "pair_s": sum(cell["wall_s"] for cell in cells) / max(1, len(logs)),
    }


def _line(name: str, spread: dict) -> str:
    return (f"{name}: {spread['pairs']} pairs; per-launch cv reference {spread['launch_cv']['reference']:.3f}, "
            f"current {spread['launch_cv']['current']:.3f}; pair log-ratio sd {spread['pair_sd']:.4f}; pair "
            f"correlation {spread['correlation']:.2f}; between launches {spread['between_launches'] or math.nan:.0%} "
            f"of the windows' variance; {spread['img_s']['reference']:.1f} img/s; launch {spread['launch_s']:.2f} s "
            f"for {spread['measured_s']:.2f} s measured; {spread['pair_s']:.1f} s of machine time a pair")


def test_sequential_and_duet_pairs_side_by_side(tmp_path):
    cells: dict[str, list[dict]] = {name: [] for name in ARRANGEMENTS}
    started = time.monotonic()
    for index in range(SESSIONS):
        for name, (directory, flags) in ARRANGEMENTS.items():
            cells[name].append(compare(tmp_path / directory, name, index, SESSIONS, *A_A, *flags, system="spread"))
    spreads = {name: _spread(found) for name, found in cells.items()}
    for name, spread in spreads.items():
        print(_line(name, spread))
    print(f"{time.monotonic() - started:.0f} s in all")
    (tmp_path / "spread.json").write_text(json.dumps(spreads, indent=1))
    assert all(spread["pairs"] >= int(PAIRS) * SESSIONS // 2 for spread in spreads.values()), spreads


def test_each_lead_as_an_ab(tmp_path):
    rows = {}
    for index, (name, setting) in enumerate(LEADS.items()):
        variable, value = setting.split("=", 1)
        if variable == "LD_PRELOAD" and not Path(value).exists():
            print(f"{name}: {value} is not installed (Debian's libgoogle-perftools4, libjemalloc2)")
            continue
        cell = compare(tmp_path / f"lead-{index}", name, 0, 1, "--launch-env", setting, "--against", f"env:{variable}",
                       "--pairs", PAIRS, "--max-pairs", PAIRS, system="leads")
        spread = _spread([cell])
        rows[name] = spread
        print(f"{name}: current/reference {cell['ratio']['value'] if cell['ratio'] else math.nan:.3f} "
              f"({cell['verdict']}); per-launch cv without {spread['launch_cv']['reference']:.3f}, with "
              f"{spread['launch_cv']['current']:.3f}; pair log-ratio sd {spread['pair_sd']:.4f}", flush=True)
    assert rows
