"""dlscale-launches on results files written as an A/B session writes them: the spread, what a
launch costs, and which launch fact goes with the slow launches."""
import json
import math

import pytest

from harness.report import launches


def _document(rng_speeds, faults):
    log = []
    for pair, (speed, fault) in enumerate(zip(rng_speeds, faults)):
        for side in ("reference", "current"):
            log.append({"pair": pair, "side": side, "order": "reference-first", "status": "ok", "wall_s": 4.0,
                        "window_s": 0.5, "throughput": speed, "window_throughputs": [speed * 0.99, speed, speed * 1.01],
                        "launch_facts": [{"minor_faults": fault, "steal_share": 0.01, "ran_on": {"0": 12}}]})
    return {"paired_cells": [{"cell": "ddp-synthetic-resnet44-g1", "duet": False, "launch_log": log}]}


def test_the_slow_launches_are_the_ones_with_the_faults(tmp_path, capsys):
    speeds = [100, 80, 101, 79, 99, 81, 100, 80]
    faults = [1000 if speed > 90 else 90000 for speed in speeds]
    path = tmp_path / "r.json"
    path.write_text(json.dumps(_document(speeds, faults)))
    assert launches.main([str(path), "--launches"]) == 0
    printed = capsys.readouterr().out
    assert "minor_faults  16        -0.88" in printed  # the rank correlation with the speed
    assert "log ratio sd 0.0000" in printed  # both launches of a pair at one speed: the pair cancels it
    assert "more windows per launch would add little" in printed


def test_the_windows_share_of_variance_between_launches():
    found = launches.launches_of([_document([100, 80, 100, 80], [1, 1, 1, 1])])
    assert launches.between_launch_share(found) == pytest.approx(1.0, abs=0.05)
    assert math.isclose(launches.cv([1.0, 1.0]), 0.0)


def test_a_file_without_an_ab_is_a_clear_error(tmp_path, capsys):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"cells": []}))
    assert launches.main([str(path)]) == 2
    assert "no completed A/B launch" in capsys.readouterr().err


def test_each_launch_lists_its_huge_pages_transparent_and_from_the_pool():
    found = launches.launches_of([_document([100, 80], [1, 1])])
    found[0]["launch_facts"] = [{"anon_huge_kib": 63488, "hugetlb_kib": 1228800,
                                 "variables": {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=2"}}]
    header, first = launches.launch_rows(found)[:2]
    assert {"anon_huge_kib", "hugetlb_kib"} <= set(header)
    assert first[header.index("anon_huge_kib")] == "6.349e+04" and first[header.index("hugetlb_kib")] == "1.229e+06"
    assert first[-1] == "GLIBC_TUNABLES=glibc.malloc.hugetlb=2"
