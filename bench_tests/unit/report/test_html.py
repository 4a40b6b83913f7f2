"""Plots, the HTML report, JUnit properties, time-to-train projections, collective-bandwidth
arithmetic and the published figures file: all from hand-made results, no process launched."""
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from harness.judging.stats import Estimate
from harness.report import collectives
from harness.report import html as report
from harness.report import plots
from harness.report import projection
from harness.store.baselines import BaselineError, BaselineFile
from harness.store.history import append, make_row

REPO = Path(__file__).resolve().parents[3]
PUBLISHED = REPO / "harness" / "report" / "published-aach2023.json"
PNG = b"\x89PNG\r\n\x1a\n"


def rank_record(rank, *, data=0.01, fwd_bwd=0.5, optimizer=0.05, probe=0.4, steps=6):
    return {"rank": rank, "step_times": [data + fwd_bwd + optimizer] * steps, "data_wait": [data] * steps,
            "fwd_bwd": [fwd_bwd] * steps, "optimizer": [optimizer] * steps, "compute_probe": [probe] * 4,
            "losses": [2.3] * steps, "images": 8 * steps, "window_s": 3.4}


def cell_json(cell_id, throughput, *, efficiency=None, ranks=1, interval=True, verdict="pass", records=True):
    low, high = (0.9 * throughput, 1.1 * throughput) if interval else (None, None)
    return {
        "cell": cell_id, "launcher": "torchrun", "status": "ok", "error": None, "runs": 1, "verdict": verdict,
        "metrics": {"throughput": throughput, "per_rank": throughput / ranks, "step_time": 8 * ranks / throughput,
                    "ranks": ranks, "slowest_rank": 0},
        "throughput": {"value": throughput, "low": low, "high": high, "confidence": 0.95, "n_steps": 6},
        "efficiency": None if efficiency is None else {"value": efficiency, "low": efficiency - 0.05,
                                                       "high": efficiency + 0.05},
        "efficiency_source": "by definition" if ranks == 1 else "measured",
        "verdicts": [{"kind": verdict, "message": f"throughput -20.0% against baseline: {verdict}"}],
        "records": [rank_record(r) for r in range(ranks)] if records else [],
    }


@pytest.fixture
def results():
    return {
        "system": "unit", "launcher": "torchrun",
        "workload": {"image_size": 32, "batch_size": 8, "num_classes": 10},
        "provenance": {"date": "2026-01-01T00:00:00+00:00", "host": "h", "git_commit": "abc123",
                       "versions": {"torch": "2"}},
        "cells": [
            cell_json("ddp-synthetic-resnet50-g1", 14.0, efficiency=1.0),
            cell_json("ddp-synthetic-resnet50-g2", 26.0, efficiency=0.93, ranks=2, verdict="fail"),
            cell_json("deepspeed_zero1-dali-cpu-tfrecord-resnet50-g2", 20.0, ranks=2, interval=False),
            cell_json("ddp-native-resnet152-g2", 9.0, efficiency=0.8, ranks=2, records=False),
            {"cell": "horovod-native-resnet50-g2", "status": "failed", "error": "rank 1 crashed", "runs": 1,
             "verdict": "error", "metrics": None, "throughput": None, "efficiency": None, "verdicts": [],
             "records": []},
        ],
    }


@pytest.fixture
def collectives_results():
    rows = [collectives.result_row(n, n / 1e9 + 1e-4, 2, rounds=5, iterations=1) for n in (4096, 1 << 20, 64 << 20)]
    return {"kind": "collectives", "op": "allreduce", "backend": "gloo", "device": "cpu", "ranks": 2,
            "statistic": "median", "results": rows}


def is_png(path):
    return path is not None and path.stat().st_size > 1000 and path.read_bytes()[:8] == PNG


# -- plots -----------------------------------------------------------------------------------------


def test_estimates_come_from_intervals_or_flat_metrics():
    assert plots.estimate({"throughput": {"value": 5.0, "low": 4.0, "high": 6.0}}, "throughput") == (5.0, 4.0, 6.0)
    flat = {"metrics": {"throughput": 5.0, "throughput_low": 4.5, "throughput_high": 5.5}}
    assert plots.estimate(flat, "throughput") == (5.0, 4.5, 5.5)
    assert plots.estimate({"metrics": {"throughput": 5.0}}, "throughput") == (5.0, None, None)
    assert plots.estimate({"throughput": None, "metrics": None}, "throughput") is None
    assert plots.estimate({"efficiency": {"value": 0.9, "low": None, "high": None}}, "efficiency") == (0.9, None, None)


def test_scaling_plots_are_written_one_panel_per_model(results, tmp_path):
    throughput = plots.plot_scaling(results["cells"], tmp_path / "t.png", metric="throughput")
    efficiency = plots.plot_scaling(results["cells"], tmp_path / "e.png", metric="efficiency")
    assert is_png(throughput) and is_png(efficiency)
    assert plots.plot_scaling([results["cells"][-1]], tmp_path / "none.png") is None  # nothing measured
    with pytest.raises(ValueError):
        plots.plot_scaling(results["cells"], tmp_path / "x.png", metric="latency")


def test_published_points_overlay_only_from_a_published_file(results, tmp_path):
    published = json.loads(PUBLISHED.read_text())
    assert is_png(plots.plot_scaling(results["cells"], tmp_path / "p.png", metric="efficiency", published=published))
    assert {p["value"] for p in plots.published_points(published, "resnet152")} >= {0.81}
    with pytest.raises(ValueError, match="published"):
        plots.published_points({"schema_version": 1, "cells": {}}, "resnet50")


def test_breakdown_and_collective_plots(results, collectives_results, tmp_path):
    assert is_png(plots.plot_breakdown(results["cells"], tmp_path / "b.png"))
    assert plots.plot_breakdown([results["cells"][3]], tmp_path / "nob.png") is None  # no records
    assert is_png(plots.plot_collectives(collectives_results, tmp_path / "c.png"))


# -- report ----------------------------------------------------------------------------------------


def test_report_writes_html_with_a_row_per_cell_and_its_figures(results, collectives_results, tmp_path):
    index = report.write_report(results, tmp_path / "out", collectives=collectives_results, published=PUBLISHED)
    text = index.read_text()
    for cell in results["cells"]:
        assert f"<tr class=" in text and f"<td>{cell['cell']}</td>" in text
    for name in ("throughput.png", "efficiency.png", "efficiency_published.png", "breakdown.png", "collectives.png"):
        assert f'src="{name}"' in text and is_png(tmp_path / "out" / name)
    assert "rank 1 crashed" in text
    assert "0 (slowest)" in text  # the breakdown table
    assert "Time to train" in text and "more than 12.0 h" in text  # projection and the study's runtime
    assert "lower bound s/step" in text and "ddp-synthetic-resnet50-g2" in text
    assert "abc123" in text  # provenance
    assert text.count("<tr") > 30


def test_report_without_collectives_says_how_to_get_them(results, tmp_path):
    text = report.write_report(results, tmp_path, published=None).read_text()
    assert "DLSCALE_BENCHMARKS=1" in text
    assert "efficiency_published.png" not in text


def test_report_sets_frameworks_side_by_side_where_ddp_ran_beside_them(results, tmp_path):
    assert "Frameworks side by side" not in report.write_report(results, tmp_path / "a", published=None).read_text()
    results["cells"].append(cell_json("horovod-synthetic-resnet50-g2", 26.0, ranks=2))
    text = report.write_report(results, tmp_path / "b", published=None).read_text()
    assert "Frameworks side by side" in text and "<td>horovod</td>" in text and "2.65X" in text


def test_report_refuses_a_baseline_file_as_published(results, tmp_path):
    with pytest.raises(ValueError, match="published"):
        report.write_report(results, tmp_path, published={"schema_version": 1, "cells": {}})


def test_the_report_draws_each_cells_history_trend(results, tmp_path):
    cell = results["cells"][1]["cell"]
    rows = [make_row(cell, run_id=f"r{night}", verdict="fail" if night == 4 else "pass",
                     throughput=Estimate(value=100.0 - 10 * (night == 4), low=93.0 - 10 * (night == 4), high=107.0),
                     date=f"2026-01-0{night + 1}T00:00:00+00:00") for night in range(5)]
    rows.append(make_row("a-cell-not-in-the-results-g1", run_id="x", verdict="pass",
                         throughput=Estimate(value=1.0, low=1.0, high=1.0)))
    text = report.write_report(results, tmp_path / "out", published=None, history=rows).read_text()
    assert "<h2>History</h2>" in text and is_png(tmp_path / "out" / "history.png")
    assert plots.plot_history(rows, ["a-cell-without-history-g1"], tmp_path / "none.png") is None
    assert "history.png" not in report.write_report(results, tmp_path / "bare", published=None).read_text()
    history_file = tmp_path / "unit.jsonl"
    append(history_file, rows)
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results))
    arguments = [str(path), "--out", str(tmp_path / "cli"), "--no-published", "--history", str(history_file)]
    assert report.main(arguments) == 0
    assert (tmp_path / "cli" / "history.png").is_file()


def test_report_command_line(results, tmp_path, capsys):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results))
    assert report.main([str(path), "--out", str(tmp_path / "html"), "--no-published"]) == 0
    assert capsys.readouterr().out.strip().endswith("index.html")
    assert report.main([str(tmp_path / "missing.json"), "--out", str(tmp_path / "x")]) == 1


def test_junit_properties_carry_the_figures_and_the_breakdown(results):
    properties = dict(report.junit_properties(results["cells"][1]))
    assert properties["dlscale_cell"] == "ddp-synthetic-resnet50-g2"
    assert properties["dlscale_throughput_img_s"] == 26.0
    assert properties["dlscale_throughput_img_s_low"] == pytest.approx(23.4)
    assert properties["dlscale_efficiency"] == 0.93
    assert properties["dlscale_communication_s_per_step"] == pytest.approx(0.1)
    assert properties["dlscale_data_share"] == pytest.approx(0.01 / 0.56, abs=1e-6)
    assert properties["dlscale_slowest_rank"] in (0, 1)
    assert properties["dlscale_time_to_train_90_epochs_s"] == pytest.approx(90 * 1281167 / 26.0, rel=1e-6)
    assert "against baseline" in properties["dlscale_verdict_message"]
    failed = dict(report.junit_properties(results["cells"][-1]))
    assert failed["dlscale_verdict"] == "error" and "dlscale_throughput_img_s" not in failed


def test_junit_properties_land_in_junit_xml(pytester, results):
    pytester.makepyfile(test_cell=f"""
        PROPERTIES = {report.junit_properties(results["cells"][1])!r}

        def test_cell(record_property):
            for name, value in PROPERTIES:
                record_property(name, value)
    """)
    pytester.runpytest_subprocess("--junitxml=out.xml", "-p", "no:cacheprovider").assert_outcomes(passed=1)
    found = {p.get("name"): p.get("value") for p in ET.parse(pytester.path / "out.xml").iter("property")}
    assert found["dlscale_cell"] == "ddp-synthetic-resnet50-g2"
    assert float(found["dlscale_communication_s_per_step"]) == pytest.approx(0.1)
    assert len(found) == len(report.junit_properties(results["cells"][1]))


# -- projection ------------------------------------------------------------------------------------


def test_time_to_train_is_90_epochs_of_imagenet():
    assert projection.time_to_train_s(90 * 1_281_167 / 200) == pytest.approx(200)
    assert projection.time_to_train_s(1000.0, epochs=1) == pytest.approx(1281.167)
    assert projection.throughput_for(200) == pytest.approx(576_525.15)
    with pytest.raises(ValueError):
        projection.time_to_train_s(0)


@pytest.mark.parametrize("seconds, text", [(45, "45 s"), (200, "3.3 min"), (13 * 3600, "13.0 h"),
                                           (3 * 86400, "3.0 d"), (float("inf"), "-")])
def test_durations_read_naturally(seconds, text):
    assert projection.format_duration(seconds) == text


def test_projection_rows_skip_cells_without_throughput(results):
    rows = projection.projection_rows(results["cells"])
    assert rows[1][0] == "ddp-synthetic-resnet50-g1" and rows[1][2].endswith(" d")
    assert rows[-1][1:] == ["-", "-"]


# -- collectives arithmetic ------------------------------------------------------------------------


def test_bus_bandwidth_follows_nccl_tests():
    assert collectives.bus_factor(1) == 0 and collectives.bus_factor(2) == 1 and collectives.bus_factor(8) == 1.75
    assert collectives.busbw(1e9, 1.0, 8) == pytest.approx(1.75e9)
    assert collectives.allreduce_lower_bound_s(1e9, 8, 1.75e9) == pytest.approx(1.0)
    assert collectives.allreduce_lower_bound_s(1e9, 1, 1e9) == 0
    row = collectives.result_row(1 << 20, 1e-3, 4)
    assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * 1.5)
    with pytest.raises(ValueError):
        collectives.bus_factor(0)


def test_parameter_counts_match_torchvision():
    torchvision = pytest.importorskip("torchvision")
    for model in ("resnet50", "resnet101", "resnet152"):
        for classes in (10, 1000):
            built = getattr(torchvision.models, model)(weights=None, num_classes=classes)
            assert collectives.parameter_count(model, classes) == sum(p.numel() for p in built.parameters())
    assert collectives.gradient_bytes("resnet50") == 4 * 25_557_032
    with pytest.raises(ValueError, match="known"):
        collectives.parameter_count("vit")


def test_lower_bound_rows_pair_each_model_with_its_cells(results, collectives_results, tmp_path):
    rows = collectives.lower_bound_rows(collectives_results, results["cells"], num_classes=10)
    by_cell = {row[4]: row for row in rows[1:]}
    assert set(by_cell) == {c["cell"] for c in results["cells"]}
    g2 = by_cell["ddp-synthetic-resnet50-g2"]
    bandwidth = collectives.peak_busbw(collectives_results)["busbw_gbps"] * 1e9
    assert float(g2[3]) == pytest.approx(collectives.gradient_bytes("resnet50", 10) / bandwidth, abs=1e-4)
    assert g2[5] == "0.1000"  # the cell's measured exposed communication
    assert by_cell["ddp-native-resnet152-g2"][5] == "-"  # no records, no breakdown
    path = tmp_path / "c.json"
    path.write_text(json.dumps(collectives_results))
    assert collectives.load_collectives(path)["backend"] == "gloo"
    path.write_text(json.dumps({"kind": "published"}))
    with pytest.raises(ValueError):
        collectives.load_collectives(path)


# -- the published figures file ----------------------------------------------------------------------


def test_published_file_is_never_a_baseline():
    data = json.loads(PUBLISHED.read_text())
    assert data["kind"] == "published" and "schema_version" not in data and "cells" not in data
    with pytest.raises(BaselineError):
        BaselineFile.load(PUBLISHED, "published-aach2023")


def test_published_figures_are_quoted_and_located():
    data = json.loads(PUBLISHED.read_text())
    for point in data["efficiency"]:
        assert point["relation"] in ("=", "<", ">") and 0 < point["value"] < 1
        assert point["quote"] and point["where"] and point["model"] in collectives.RESNET_BACKBONE_PARAMETERS
        assert ("gpus" in point) != ("gpus_range" in point)
    stated = {(p["model"], p["loader"], p.get("gpus"), p["value"]) for p in data["efficiency"]}
    assert {("resnet50", "dali-cpu", 1024, 0.76), ("resnet50", "dali-gpu", 1024, 0.68),
            ("resnet152", "dali-cpu", 1024, 0.81), ("resnet50", "native", 512, 0.24)} <= stated
    rows = data["table2"]["rows"]
    assert len(rows) == 51  # 3 models x 9 DALI rows + 3 models x 8 native rows
    for share in data["text_shares"]:  # the text's figures agree with the table's
        match = [r for r in rows if (r["model"], r["gpus"], r["loader"]) == (share["model"], share["gpus"],
                                                                              share["loader"])]
        assert match and match[0][share["part"]] == pytest.approx(share["percent"])


def test_projection_quotes_match_the_published_file():
    runtimes = json.loads(PUBLISHED.read_text())["runtime"]
    assert [(r["model"], r["gpus"], r["seconds"], r["relation"]) for r in runtimes] == \
        [(p.model, p.gpus, p.seconds, p.relation) for p in projection.STUDY_RUNTIMES]
    assert all(r["quote"] == p.quote for r, p in zip(runtimes, projection.STUDY_RUNTIMES))


def test_an_a_b_session_reports_its_pairs_and_what_changed(tmp_path):
    results = {"system": "s", "launcher": "mpirun", "cells": [], "provenance": {}, "workload": None,
               "against": {"reference": {"label": "reference: git 0123456789 (HEAD~1)"},
                           "difference": {"commits": ["0123456 slower steps"], "launch_environment": {"X": [None, "1"]}}},
               "paired_cells": [{"cell": "ddp-synthetic-resnet44-g1", "verdict": "regressed", "p_value": 0.03125,
                                 "ratio": {"value": 0.32, "low": 0.30, "high": 0.35}, "flags": [],
                                 "pairs": [{"order": "reference-first", "reference": 60.0, "current": 20.0},
                                           {"order": "current-first", "reference": 61.0, "current": 19.0}],
                                 "failures": [{"side": "reference", "pair": 2, "order": "current-first",
                                               "status": "failed", "error": "rank 0: boom"}],
                                 "left_out": [{"pair": 1, "why": "outside work took 20% of one side's cores"}]}]}
    text = report.write_report(results, tmp_path).read_text()
    assert "<h2>A/B against the reference: git 0123456789 (HEAD~1)</h2>" in text
    assert "0123456 slower steps; X: None -&gt; 1" in text
    assert "<td>0.320 [0.300, 0.350] 95.0%</td><td>0.0312</td><td>regressed</td>" in text
    assert "<td>2</td><td>current-first</td><td>61.0</td><td>19.0</td><td>0.311</td>" in text
    assert "failed: the reference side&#x27;s launch in pair 3: rank 0: boom" in text
    assert "left out: pair 2: outside work took 20% of one side&#x27;s cores" in text


def test_the_counted_work_has_a_table_of_its_own_and_its_junit_properties(results, tmp_path):
    assert "Counted work" not in report.write_report(results, tmp_path / "a", published=None).read_text()
    results["cells"][0]["work"] = {
        "flops": {"total": 2_000_000_000, "by_operator": {"aten::convolution": 2_000_000_000}},
        "operators": {"aten::convolution": 20, "aten::add_": 30},
        "collectives": {"all_reduce": {"calls": 2, "bytes": 4_000_000}},
        "memory": {"step_peak_bytes": 12_500_000}, "data": {"images": 16, "images_decoded": 16, "bytes_read": 40_000},
        "not_counted": {"gpu": "a CPU rank runs no GPU kernels"}, "cost_s": 0.41}
    text = report.write_report(results, tmp_path / "b", published=None).read_text()
    assert "Counted work" in text and "FlopCounterMode" in text
    for shown in ("<td>2.000</td>", "<td>125.0</td>", "<td>50</td>", "all_reduce 2, 4.00", "<td>12.5</td>",
                  "16, 0.040", "gpu: a CPU rank runs no GPU kernels"):
        assert shown in text, shown
    properties = dict(report.junit_properties(results["cells"][0]))
    assert properties["dlscale_work_flops_per_step"] == 2_000_000_000
    assert properties["dlscale_work_collective_bytes_per_step"] == 4_000_000
