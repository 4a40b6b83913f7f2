"""Unit tests of the nightly history: its append-only file and corrupt lines (harness.store.history), its change
points (harness.judging.changepoints), and the report's exit code (harness.report.history)."""
from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from harness.judging import changepoints
from harness.judging.stats import Estimate
from harness.report import history as history_report
from harness.store import history


def nightly(values, cell="ddp-synthetic-resnet50-g1", fingerprint="fp1", start=0) -> list[dict]:
    """One row per night from 2025-01-01 (plus ``start`` nights), commit "1212..." for night 12."""
    return [history.make_row(cell, run_id=f"run{i:03d}", verdict="pass", date=f"2025-01-{i + 1:02d}T02:00:00+00:00",
                             git_commit=f"{i:02d}" * 20, fingerprint=fingerprint,
                             throughput=Estimate(value=v, low=v * 0.98, high=v * 1.02))
            for i, v in enumerate(values, start=start)]


def noisy(rng, n, level, cv=0.03):
    return list(level * (1 + cv * rng.standard_normal(n)))


def test_append_then_read_round_trips(tmp_path):
    path = tmp_path / "history" / "sys.jsonl"
    rows = nightly([100.0, 101.0])
    history.append(path, rows[:1])
    history.append(path, rows[1:])
    read, problems = history.read(path)
    assert problems == []
    assert read == json.loads(json.dumps(rows))
    assert read[0]["throughput"] == {"value": 100.0, "low": 98.0, "high": 102.0, "confidence": 0.95, "n_steps": 0}


def test_interval_without_ends_is_stored_as_null(tmp_path):
    row = history.make_row("c-x-m-g1", run_id="r", verdict="inconclusive",
                           throughput=Estimate(value=5.0, low=-np.inf, high=np.inf))
    assert row["throughput"]["low"] is None and row["throughput"]["high"] is None
    history.append(tmp_path / "h.jsonl", [row])  # allow_nan=False would raise on an infinity


def test_corrupt_line_is_reported_and_skipped_nothing_else_lost(tmp_path):
    path = tmp_path / "sys.jsonl"
    history.append(path, nightly([100.0, 101.0, 102.0]))
    lines = path.read_text().splitlines(keepends=True)
    lines.insert(1, '{"cell": "x", "run_id": \n')  # line 2: broken JSON
    lines.insert(3, '{"schema": 1, "cell": "x", "run_id": "r", "date": "d", "verdict": "pass", "throughput": {"value": -1}}\n')
    path.write_text("".join(lines))
    rows, problems = history.read(path)
    assert [r["throughput"]["value"] for r in rows] == [100.0, 101.0, 102.0]
    assert [p.line for p in problems] == [2, 4]
    assert "not valid JSON" in problems[0].why
    assert "positive" in problems[1].why and str(problems[1]).startswith("line 4: ")


def test_torn_last_line_stays_one_bad_line_after_the_next_append(tmp_path):
    path = tmp_path / "sys.jsonl"
    history.append(path, nightly([100.0]))
    with open(path, "a") as stream:
        stream.write('{"cell": "ddp-synthetic-resnet50-g1", "run_id": "run0')  # killed mid-line
    history.append(path, nightly([99.0], start=1))
    rows, problems = history.read(path)
    assert [r["throughput"]["value"] for r in rows] == [100.0, 99.0]
    assert [p.line for p in problems] == [2]


def test_lines_cut_short_are_told_from_lines_written_by_something_else(tmp_path):
    path = tmp_path / "sys.jsonl"
    history.append(path, nightly([100.0]))
    row = json.dumps(nightly([101.0])[0])
    with open(path, "ab") as stream:
        stream.write(row[:50].encode() + b"\n")  # cut short, then ended by the next append
        stream.write(b"nightly finished\n" + b'{"level": "info"}\n' + b"\xff\xfe\n" + b"{\n")
        stream.write(row[:70].encode())  # cut short, last
    rows, problems = history.read(path)
    assert len(rows) == 1
    assert [(p.line, p.torn) for p in problems] == [(2, True), (3, False), (4, False), (5, False), (6, True),
                                                     (7, True)]
    assert "cut short" in problems[0].why and "cut short" not in problems[1].why


def test_interrupt_mid_run_keeps_earlier_lines(tmp_path):
    """A process appending a line per cell, killed by SIGINT: every finished line survives."""
    path = tmp_path / "sys.jsonl"
    script = textwrap.dedent(f"""
        import time
        from harness.store import history
        for i in range(10_000):
            history.append({str(path)!r}, [history.make_row("c-x-m-g1", run_id=f"r{{i}}", verdict="pass")])
            if i == 20:
                print("ready", flush=True)
    """)
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                               cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__)))))
    assert process.stdout.readline().strip() == "ready"
    process.send_signal(signal.SIGINT)
    process.wait(timeout=30)
    rows, problems = history.read(path)
    assert len(rows) >= 21
    assert [r["run_id"] for r in rows] == [f"r{i}" for i in range(len(rows))]
    assert len(problems) <= 1 and all(p.line == len(rows) + 1 for p in problems)


def test_missing_file_is_an_empty_history(tmp_path):
    assert history.read(tmp_path / "none.jsonl") == ([], [])


def test_persistent_15_percent_drop_is_found_and_fails(tmp_path, capsys):
    rng = np.random.default_rng(7)
    values = noisy(rng, 12, 100.0) + noisy(rng, 8, 85.0)
    path = tmp_path / "sys.jsonl"
    history.append(path, nightly(values))
    [cell] = changepoints.report(history.read(path)[0])
    assert [c.at.index for c in cell.changes] == [13]
    assert cell.changes[0].relative == pytest.approx(-0.15, abs=0.04)
    assert cell.regressed(threshold=0.05)
    assert history_report.main([str(path)]) == 1
    out = capsys.readouterr().out
    assert "REGRESSION" in out and "2025-01-13" in out and "1212121212 " in out


def test_a_single_bad_night_is_not_flagged(tmp_path):
    rng = np.random.default_rng(8)
    values = noisy(rng, 20, 100.0)
    values[9] = 70.0  # one terrible night
    path = tmp_path / "sys.jsonl"
    history.append(path, nightly(values))
    [cell] = changepoints.report(history.read(path)[0])
    assert cell.changes == []
    assert history_report.main([str(path)]) == 0


def test_a_bad_last_night_is_not_flagged_yet(tmp_path):
    rng = np.random.default_rng(9)
    values = noisy(rng, 19, 100.0) + [80.0]
    path = tmp_path / "sys.jsonl"
    history.append(path, nightly(values))
    assert history_report.main([str(path)]) == 0


def test_recovered_drop_does_not_fail(tmp_path):
    rng = np.random.default_rng(10)
    values = noisy(rng, 8, 100.0) + noisy(rng, 6, 85.0) + noisy(rng, 6, 100.0)
    path = tmp_path / "sys.jsonl"
    history.append(path, nightly(values))
    [cell] = changepoints.report(history.read(path)[0])
    assert len(cell.changes) == 2 and cell.changes[-1].relative > 0
    assert history_report.main([str(path)]) == 0


def test_cell_filter_metric_and_errors_left_out(tmp_path, capsys):
    rng = np.random.default_rng(11)
    path = tmp_path / "sys.jsonl"
    rows = (nightly(noisy(rng, 10, 100.0), cell="a-synthetic-m-g1")
            + nightly(noisy(rng, 10, 50.0), cell="b-synthetic-m-g1"))
    rows.append(history.make_row("a-synthetic-m-g1", run_id="run999", verdict="error"))
    history.append(path, rows)
    reports = changepoints.report(history.read(path)[0], cell="a-synthetic-m-g1")
    assert [r.cell for r in reports] == ["a-synthetic-m-g1"] and len(reports[0].nights) == 10
    assert history_report.main([str(path), "--metric", "efficiency"]) == 0
    assert "no efficiency figures" in capsys.readouterr().out


def test_repeats_within_a_run_are_one_night():
    rows = nightly([100.0, 90.0, 110.0])
    for row in rows:
        row["run_id"] = "same"
    [nights] = changepoints.series(rows).values()
    assert len(nights) == 1 and nights[0].value == 100.0


def test_fingerprint_change_is_noted(tmp_path, capsys):
    rng = np.random.default_rng(12)
    path = tmp_path / "sys.jsonl"
    history.append(path, nightly(noisy(rng, 10, 100.0), fingerprint="old")
                   + nightly(noisy(rng, 10, 80.0), fingerprint="new", start=10))
    assert history_report.main([str(path)]) == 1
    assert "fingerprint changed" in capsys.readouterr().out


def test_cli_reports_skipped_lines_on_stderr(tmp_path, capsys):
    path = tmp_path / "sys.jsonl"
    history.append(path, nightly([100.0] * 8))
    with open(path, "a") as stream:
        stream.write("garbage\n")
    assert history_report.main([str(path)]) == 0
    assert "skipped line 9: not valid JSON" in capsys.readouterr().err


def test_a_slower_machine_is_told_apart_from_a_slower_stack_by_the_yardstick(tmp_path, capsys):
    """The machine gets 15% slower from night 13 and the throughput with it: a raw regression,
    but the normalised series stays level and the machine's own series carries the drop."""
    rng = np.random.default_rng(12)
    speeds = [1.0] * 12 + [0.85] * 8
    rows = nightly([100.0 * speed * (1 + 0.02 * rng.standard_normal()) for speed in speeds])
    for row, speed in zip(rows, speeds):
        row["yardstick_s"] = 0.08 / speed * (1 + 0.01 * rng.standard_normal())
    rows.append(history.make_row("ddp-synthetic-resnet50-g1", run_id="gpu", verdict="pass",
                                 throughput=Estimate(value=90.0, low=89.0, high=91.0)))  # no yardstick: left out
    path = tmp_path / "sys.jsonl"
    history.append(path, rows)
    assert history_report.main([str(path)]) == 1
    assert history_report.main([str(path), "--metric", "throughput-normalised"]) == 0
    assert history_report.main([str(path), "--metric", "machine"]) == 1
    [machine] = changepoints.report(history.read(path)[0], metric="machine")
    assert len(machine.nights) == 20 and machine.changes[0].relative == pytest.approx(-0.15, abs=0.02)
    capsys.readouterr()


def test_the_history_exports_to_csv(tmp_path, capsys):
    path = tmp_path / "sys.jsonl"
    history.append(path, [history.make_row("c-g1", run_id=f"r{n}", verdict="pass", date=f"2026-01-0{n + 1}",
                                           throughput=Estimate(value=100.0 + n, low=99.0 + n, high=101.0 + n))
                          for n in range(3)] + [history.make_row("d-g1", run_id="x", verdict="fail")])
    out = tmp_path / "h.csv"
    history_report.main([str(path), "--cell", "c-g1", "--csv", str(out)])
    rows = list(csv.DictReader(out.open()))
    assert [r["run_id"] for r in rows] == ["r0", "r1", "r2"] and rows[2]["throughput"] == "102.0"
    assert rows[0]["throughput_low"] == "99.0" and rows[0]["efficiency"] == ""
    assert "written to" in capsys.readouterr().out


def test_an_accuracy_cells_lost_accuracy_is_tracked_like_a_throughput(tmp_path):
    """Accuracy cells write their final accuracy into the same history (the suite's AccuracyResult rows)."""
    cell = "accuracy-ddp-cosine-b512-g2"
    values = [0.61, 0.62, 0.60, 0.61, 0.62, 0.61, 0.52, 0.51, 0.53, 0.52, 0.51]
    path = tmp_path / "sys.jsonl"
    history.append(path, [history.make_row(cell, run_id=f"run{i}", verdict="pass", date=f"2025-02-{i + 1:02d}T02:00:00+00:00",
                                           final_val_accuracy=v) for i, v in enumerate(values)]
                   + nightly([100.0] * 11))
    rows = history.read(path)[0]
    assert list(changepoints.series(rows, "throughput")) == ["ddp-synthetic-resnet50-g1"]  # accuracy rows have none
    [tracked] = changepoints.report(rows, metric="accuracy")
    assert tracked.cell == cell and [c.at.index for c in tracked.changes] == [7] and tracked.regressed(0.05)
