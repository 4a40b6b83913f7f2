"""harness.report.compare: two results files judged cell by cell through the suite's judging core."""
import json

from harness.report.compare import compare, main

HARDWARE = {"cpu": "AMD EPYC", "cpu_id": "AuthenticAMD family 25 model 17 stepping 1", "cores": 2,
            "cores_per_rank": 1, "ranks": 1}


def cell(cell_id: str, value: float, *, torch: str = "2.14.1", yardstick_s: float = 0.02, half: float = 0.5) -> dict:
    return {"cell": cell_id, "throughput": {"value": value, "low": value - half, "high": value + half, "n_steps": 50},
            "efficiency": None, "efficiency_source": "by definition", "config_hash": "abc", "runs": 1,
            "contended_runs": 0, "fingerprint": {"hardware": HARDWARE, "stack": {"torch": torch}},
            "yardstick": {"seconds": yardstick_s, "spread": 0.03, "version": 1, "drift": 0.01},
            "cpu_wait_share": 0.01, "outside_share": 0.01}


def document(*cells: dict) -> dict:
    return {"workload": {"batch_size": 16}, "cells": list(cells)}


OLD = document(cell("ddp-synthetic-resnet50-g1", 68.0), cell("horovod-synthetic-resnet50-g1", 70.0),
               cell("deepspeed-synthetic-resnet50-g1", 55.0))
NEW = document(cell("ddp-synthetic-resnet50-g1", 67.0), cell("horovod-synthetic-resnet50-g1", 49.0, torch="2.15.0"),
               cell("ddp-native-resnet50-g1", 60.0))


def test_each_cell_is_judged_as_the_suite_would_judge_it():
    by_cell = {c.cell: c for c in compare(OLD, NEW)}
    assert by_cell["ddp-synthetic-resnet50-g1"].verdict == "pass"
    regressed = by_cell["horovod-synthetic-resnet50-g1"]
    assert regressed.verdict == "fail" and regressed.row()[3] == "-30.0%"
    assert "torch 2.14.1 -> 2.15.0" in regressed.messages[0]  # the software that changed is named
    assert by_cell["ddp-native-resnet50-g1"].verdict == "only in new"
    assert by_cell["deepspeed-synthetic-resnet50-g1"].verdict == "only in old"


def test_another_machine_is_not_a_regression():
    faster_machine = document(cell("ddp-synthetic-resnet50-g1", 40.0, yardstick_s=0.006))
    [compared] = [c for c in compare(OLD, faster_machine) if c.cell == "ddp-synthetic-resnet50-g1"]
    assert compared.verdict == "machine-differs"


def test_the_command_prints_the_table_writes_csv_and_exits_1_on_a_fail(tmp_path, capsys):
    old, new, table = tmp_path / "old.json", tmp_path / "new.json", tmp_path / "c.csv"
    old.write_text(json.dumps(OLD))
    new.write_text(json.dumps(NEW))
    assert main([str(old), str(new), "--csv", str(table)]) == 1
    out = capsys.readouterr().out
    assert "horovod-synthetic-resnet50-g1: fail: throughput -30.0%" in out
    assert table.read_text().splitlines()[0].startswith("cell,old,old_low,old_high,new")
    assert main([str(old), str(old)]) == 0


def test_a_file_that_is_not_a_results_file_is_refused(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    try:
        main([str(bad), str(bad)])
    except SystemExit as error:
        assert "is not a dlscale results file" in str(error)
    else:
        raise AssertionError("accepted a file without cells")


def test_the_counted_work_that_moved_between_the_files_is_named(capsys, tmp_path):
    def counted(convolution: int) -> dict:
        return {"flops": {"total": convolution, "by_operator": {"aten::convolution": convolution}},
                "collectives": {"all_reduce": {"calls": 1, "bytes": 400}}, "not_counted": {}}

    old = document({**cell("ddp-synthetic-resnet50-g1", 68.0), "work": counted(1000)},
                   {**cell("horovod-synthetic-resnet50-g1", 70.0), "work": counted(1000)})
    new = document({**cell("ddp-synthetic-resnet50-g1", 68.0), "work": counted(1060)},
                   {**cell("horovod-synthetic-resnet50-g1", 70.0), "work": counted(1000)})
    by_cell = {c.cell: c for c in compare(old, new)}
    assert by_cell["ddp-synthetic-resnet50-g1"].row()[-2] == "moved"
    assert by_cell["horovod-synthetic-resnet50-g1"].row()[-2] == "same"
    assert [c.row()[-2] for c in compare(OLD, NEW)][:2] == ["-", "-"]  # files without counted work
    (tmp_path / "old.json").write_text(json.dumps(old))
    (tmp_path / "new.json").write_text(json.dumps(new))
    assert main([str(tmp_path / "old.json"), str(tmp_path / "new.json")]) == 0
    printed = capsys.readouterr().out
    assert "ddp-synthetic-resnet50-g1: work: +6.0% FLOPs (aten::convolution), collectives the same" in printed
    assert "horovod-synthetic-resnet50-g1: work" not in printed
