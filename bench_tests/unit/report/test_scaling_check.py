"""The scaling model against this machine's own cells (harness.report.scaling_check): a 2-rank
cell's E_G predicted from its 1-rank cell's records alone, beside what the suite measured."""
import json
import random

import pytest

from harness.report import scaling_validation
from harness.report.network import Link
from harness.report.scaling_check import cell_step_s, predict_from_reference, reference_pairs
from harness.report.stragglers import expected_wait, estimate_rank_delay


def record(rank, steps, *, probe=0.08):
    count = len(steps)
    return {"rank": rank, "step_times": steps, "data_wait": [0.0] * count, "fwd_bwd": [s - 0.003 for s in steps],
            "optimizer": [0.003] * count, "compute_probe": [probe] * 3, "cpu_wait": [0.001] * count,
            "framework_settings": {"bucket_cap_mb": 25},
            "work": {"collectives": {"all_reduce": {"calls": 1, "bytes": 1_000_000}}}}


def steps_with_delays(seed, count=300):
    rng = random.Random(seed)
    steps = [0.08 + rng.gauss(0, 0.001) for _ in range(count)]
    for i in rng.sample(range(count), count // 10):
        steps[i] += 0.02
    return steps


def results(measured=0.9):
    one = {"cell": "ddp-synthetic-resnet20-g1", "records": [record(0, steps_with_delays(1))]}
    two = {"cell": "ddp-synthetic-resnet20-g2",
           "records": [record(0, steps_with_delays(2)), record(1, steps_with_delays(3))],
           "efficiency": {"value": measured, "low": measured - 0.02, "high": measured + 0.02}}
    other = {"cell": "ddp-synthetic-resnet50-g2", "records": [record(0, steps_with_delays(4))]}  # no 1-rank cell
    return {"workload": {"batch_size": 16, "num_classes": 100}, "cells": [two, one, other]}


def test_each_larger_cell_is_paired_with_the_same_cell_at_fewest_ranks():
    pairs = reference_pairs(results())
    assert [(a["cell"], b["cell"]) for a, b in pairs] == [("ddp-synthetic-resnet20-g1", "ddp-synthetic-resnet20-g2")]


def test_two_ranks_are_predicted_from_one_ranks_step_and_its_delays_alone():
    one = results()["cells"][1]
    predicted = predict_from_reference(one, 2, batch_per_gpu=16, num_classes=100, link=None, resamples=200)
    steps = one["records"][0]["step_times"]
    wait = expected_wait(estimate_rank_delay([steps]), 2)
    assert predicted.wait_s == pytest.approx(wait) and predicted.exposed_s == 0
    assert predicted.value == pytest.approx(cell_step_s([steps]) / (cell_step_s([steps]) + wait))
    assert predicted.low < predicted.value < predicted.high < 1
    slow = Link.stated(1e-4, 1e7, "slow")  # 1 MB over 10 MB/s: more than backward hides
    with_link = predict_from_reference(one, 2, batch_per_gpu=16, num_classes=100, link=slow, resamples=200)
    assert with_link.value < predicted.value and with_link.exposed_s > 0


def test_the_command_prints_predicted_beside_measured(tmp_path, capsys):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results(measured=0.5)))
    assert scaling_validation.main(["--results", str(path)]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("ddp-synthetic-resnet20-g2"))
    assert "0.500 [0.480, 0.520]" in row and " no " in row and "counts as hidden" in out
    path.write_text(json.dumps({"workload": {"batch_size": 16}, "cells": [results()["cells"][2]]}))
    assert scaling_validation.main(["--results", str(path)]) == 2
    assert "no two cells that differ only in ranks" in capsys.readouterr().err


def test_a_measured_cell_beyond_the_models_band_is_named_with_its_gap_and_the_rest_are_extrapolations():
    from harness.report.scaling_check import gap_lines, measured_beside_predicted, session_lines

    missed = results(measured=0.5)
    beside, = measured_beside_predicted(missed, None)
    assert beside.gap == pytest.approx(0.5 - beside.predicted.low)
    lines = gap_lines(missed, None)
    assert lines[0].startswith("scaling model: 0 of 1 cell(s) measured inside the band")
    assert lines[1].startswith("ddp-synthetic-resnet20-g2: measured E_G 0.500, -0.") and "beyond" in lines[1]
    assert "beyond 2 rank(s) on one node are extrapolations" in lines[-1]
    inside = results(measured=beside.predicted.value)
    assert [line for line in gap_lines(inside, None) if line.startswith("ddp-")] == []  # inside: no gap line
    assert "1 of 1" in gap_lines(inside, None)[0]
    assert session_lines(missed["cells"], batch_per_gpu=16, num_classes=100) == lines
    unmeasured = results()
    del unmeasured["cells"][0]["efficiency"]
    assert gap_lines(unmeasured, None) == []


def test_the_reports_scaling_section_labels_extrapolations_and_sets_the_measured_beside_the_predicted():
    from harness.report import html

    rows = [{"bytes": s, "time_s": 1e-4 + s / 1e9} for s in (2**16, 2**20, 2**24)]
    collectives = {"kind": "collectives", "ranks": 2, "backend": "gloo", "results": rows}
    data = results(measured=0.5)
    published = json.loads(scaling_validation.PUBLISHED.read_text())
    text = html._scaling_model_section(published, collectives, data["cells"], data["workload"])
    assert "E_G at 1024 (extrapolation)" in text and "Out of sample" in text and "Goyal et al. 2017" in text
    assert "gap beyond the band" in text and "ddp-synthetic-resnet20-g2" in text
