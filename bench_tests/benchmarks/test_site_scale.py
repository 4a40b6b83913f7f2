"""The site of a year of nightlies: 56 cells x 365 nights (generated from real lines,
bench_tests/site_history.py) published within 30 s, each kind of page loaded in headless chromium
within 2 s.

    DLSCALE_BENCHMARKS=1 pytest bench_tests/benchmarks/test_site_scale.py -s

Not part of ordinary runs: without that (or ``--benchmark-only``) it skips. It prints the figures
docs/measurements.md quotes.
"""
from __future__ import annotations

import json
import time

import pytest

from bench_tests import site_history
from bench_tests.benchmarks.ab_common import only_when_asked  # noqa: F401 - the opt-in gate
from bench_tests.browser import Browser, missing
from bench_tests.components import needs
from harness.report.site.publish import main

CELLS, NIGHTS = 56, 365
BUILD_LIMIT_S, LOAD_LIMIT_S = 30.0, 2.0


@pytest.fixture(scope="module")
def year(tmp_path_factory):
    folder = tmp_path_factory.mktemp("year")
    cells = site_history.templates(CELLS)
    rows = site_history.history(cells, NIGHTS, dict(zip((cell["cell"] for cell in cells), site_history.ROLES)))
    history = folder / "history.jsonl"
    history.write_text("".join(json.dumps(row) + "\n" for row in rows))
    started = time.perf_counter()
    assert main([str(history), "--out", str(folder / "site"), "--summary", str(folder / "summary.md")]) == 0
    built = time.perf_counter() - started
    print(f"\n{CELLS} cells x {NIGHTS} nights ({len(rows)} lines, {history.stat().st_size / 1e6:.1f} MB): "
          f"published in {built:.1f} s, {sum(p.stat().st_size for p in (folder / 'site').iterdir()) / 1e6:.1f} MB")
    return folder / "site", built, cells


def test_a_year_of_nightlies_publishes_within_30_s(year):
    assert year[1] < BUILD_LIMIT_S


def test_each_kind_of_page_loads_within_2_s(year):
    needs("chromium", missing())
    site, _, cells = year
    with Browser() as browser:
        for page in ("index.html", "regressions.html", "compare.html", f"cell-{cells[0]['cell']}.html"):
            seconds = max(browser.open(site / page) for _ in range(3))
            print(f"{page}: loaded in {seconds:.3f} s (the slowest of 3)")
            assert seconds < LOAD_LIMIT_S and not browser.console_errors()
