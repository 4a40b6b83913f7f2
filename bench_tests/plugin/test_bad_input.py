"""Bad input, tried wholesale: the mistakes users really make with the scaling suite's files and
options, each run as a user runs the suite (pytest in a subprocess). Every one must end the session
with a one-line error naming the file or option at fault and a non-zero exit status, before any
cell is launched, leaving every file as it was. A history line cut short by an interrupted run is
the one exception: it is expected damage, and the run goes on (history/README.md, "Damage")."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from harness.store.history import make_row
from harness.store.history import read as read_history

from ..workloads import SCALING_TEST, TEST_MODEL
from ..workloads import TINY_FLAGS as BASE_FLAGS

REPO = Path(__file__).resolve().parents[2]
SYSTEM = "badsys"
CELL = "ddp-synthetic-resnet50-g1"
BASELINE = "baselines/badsys.json"
HISTORY = "history/badsys.jsonl"
TINY_FLAGS = [*BASE_FLAGS, "--measure-budget", "0"]


def baseline(throughput: dict | None = None, cell: str = CELL, **top) -> str:
    reference = {"value": 30.0, "lower": -0.9, "upper": None, "unit": "img/s", **(throughput or {})}
    return json.dumps({"schema_version": 1, "system": SYSTEM, "cells": {cell: {"throughput": reference}}, **top})


def row(night: int) -> str:
    return json.dumps(make_row(CELL, run_id=f"run{night}", verdict="pass", date=f"2025-01-{night:02d}T02:00:00+00:00"))


def history(*lines: str, end: str = "\n") -> str:
    return "\n".join(lines) + end


GOOD = {BASELINE: baseline(), HISTORY: history(row(1), row(2))}

# (files written into the session's directory, options after the good ones, what the error line holds)
CASES = {
    # baseline file
    "baseline-truncated-json": ({BASELINE: baseline()[:40]}, [], ["baseline file {tmp}/baselines/badsys.json is not valid JSON"]),
    "baseline-cells-a-list": ({BASELINE: json.dumps({"schema_version": 1, "cells": []})}, [],
                              ["baseline file {tmp}/baselines/badsys.json is invalid", '"cells" must be an object',
                               "found a list"]),
    "baseline-value-a-string": ({BASELINE: baseline({"value": "30"})}, [],
                                ["{tmp}/baselines/badsys.json is invalid", f"'{CELL}' throughput", 'found "30"']),
    "baseline-config-a-string": ({BASELINE: baseline().replace('"throughput"', '"config": "cpu-small", "throughput"')},
                                 [], ["{tmp}/baselines/badsys.json is invalid", "config: must be an object or null",
                                      "found a string"]),
    "baseline-nan": ({BASELINE: baseline({"value": float("nan")})}, [],
                     ["{tmp}/baselines/badsys.json is invalid", 'positive numeric "value", found NaN']),
    "baseline-negative-throughput": ({BASELINE: baseline({"value": -30.0})}, [],
                                     ["{tmp}/baselines/badsys.json is invalid", "found -30.0"]),
    "baseline-zero-throughput": ({BASELINE: baseline({"value": 0})}, [],
                                 ["{tmp}/baselines/badsys.json is invalid", "found 0"]),
    "baseline-schema-99": ({BASELINE: baseline(schema_version=99)}, [],
                           ["{tmp}/baselines/badsys.json is invalid", "schema_version must be one of 1, 2, found 99"]),
    "baseline-cell-of-no-model": ({BASELINE: baseline(cell="ddp-synthetic-resnet49-g1")}, [],
                                  ["baseline file {tmp}/baselines/badsys.json", "'ddp-synthetic-resnet49-g1'",
                                   "unknown model 'resnet49'", "correct or remove that entry"]),
    "baseline-cell-of-no-framework": ({BASELINE: baseline(cell="jax-synthetic-resnet50-g1")}, [],
                                      ["baseline file {tmp}/baselines/badsys.json", "unknown framework 'jax'"]),
    # history file: a line something else wrote, anywhere in it
    "history-plain-text-line": ({HISTORY: history(row(1), "nightly run finished OK", row(2))}, [],
                                ["history file {tmp}/history/badsys.jsonl line 2 is not a line dlscale writes",
                                 "not valid JSON", "--no-history"]),
    "history-other-programs-json": ({HISTORY: history(row(1), row(2), '{"level": "info", "msg": "backup done"}', end="")},
                                    [], ["history file {tmp}/history/badsys.jsonl line 3", "field 'cell'"]),
    "history-not-utf8": ({HISTORY: history(row(1), "\udcff\udcfe", row(2))}, [],
                         ["history file {tmp}/history/badsys.jsonl line 2", "not UTF-8"]),
    # places the session writes to
    "results-json-under-a-file": ({"afile": "x"}, ["--results-json={tmp}/afile/r.json"],
                                  ["--results-json: cannot write {tmp}/afile/r.json: {tmp}/afile is not a directory"]),
    "results-dir-a-file": ({"afile": "x"}, ["--results-dir={tmp}/afile"],
                           ["--results-dir: cannot write {tmp}/afile/", "{tmp}/afile is not a directory"]),
    "report-under-a-file": ({"afile": "x"}, ["--dlscale-report={tmp}/afile/report"],
                            ["--dlscale-report: cannot write {tmp}/afile/report: {tmp}/afile is not a directory"]),
    "history-dir-under-a-file": ({"afile": "x"}, ["--history-dir={tmp}/afile/history"],
                                 ["--history-dir: cannot write {tmp}/afile/history: {tmp}/afile is not a directory"]),
    # rank counts
    "gpus-0": ({}, ["--gpus", "0"], ["--gpus takes comma-separated positive rank counts", "got '0'"]),
    "gpus-negative": ({}, ["--gpus", "-1"], ["--gpus takes comma-separated positive rank counts", "got '-1'"]),
    "gpus-not-a-number": ({}, ["--gpus", "x"], ["--gpus takes comma-separated positive rank counts", "got 'x'"]),
    "gpus-beyond-the-machine": ({}, ["--gpus", "1,1024"], ["--gpus 1,1024: 1024 ranks asked for, but this machine"]),
    # names
    "unknown-framework": ({}, ["--frameworks", "nope"], ["--frameworks: unknown framework 'nope'; valid names: ddp"]),
    "unknown-loader": ({}, ["--loaders", "nope"], ["--loaders: unknown loader 'nope'; valid names: synthetic"]),
    "no-cell-implemented": ({}, ["--frameworks", "ddp", "--loaders", "native-tfrecord"],
                            ["the matrix holds no cell: no framework's runtime implements ddp-native-tfrecord-resnet50"]),
    "unknown-model": ({}, ["--models", "nope"], ["--models: unknown model 'nope'; valid names: resnet50"]),
    "unknown-launcher": ({}, ["--launcher", "nope"], ["--launcher: unknown launcher 'nope'; valid names: srun"]),
    "unknown-device": ({}, ["--rank-device", "gpu"], ["--rank-device: unknown device 'gpu'; valid names: auto, cpu, cuda"]),
    # numerics
    "unknown-dtype": ({}, ["--dtypes", "fp32,fp8"], ["--dtypes: unknown dtype 'fp8'; valid names: fp32, tf32, bf16, fp16"]),
    "gpu-dtype-on-cpus": ({}, ["--rank-device", "cpu", "--dtypes", "bf16,tf32"],
                          ["--dtypes tf32: tf32 is a GPU arithmetic; these ranks run on CPUs (use fp32 or bf16)"]),
    "dtype-no-framework-of-the-matrix-has": ({}, ["--frameworks", "tensorflow", "--loaders", "synthetic", "--dtypes", "bf16"],
                                             ["the matrix holds no cell", "tensorflow-synthetic-resnet50-bf16"]),
    "baseline-cell-of-a-dtype-its-framework-lacks": (
        {BASELINE: baseline(cell="mxnet-synthetic-resnet50-bf16-g1")}, [],
        ["baseline file {tmp}/baselines/badsys.json", "'mxnet-synthetic-resnet50-bf16-g1'",
         "mxnet trains in fp32 here, not bf16"]),
    # dataset
    "data-a-file": ({"afile": "x"}, ["--loaders", "native", "--dlscale-data={tmp}/afile"],
                    ["--dlscale-data: dataset {tmp}/afile is a file, not an ImageFolder tree"]),
    "data-missing": ({}, ["--loaders", "native", "--dlscale-data={tmp}/nowhere"], ["--dlscale-data: dataset {tmp}/nowhere does not exist"]),
    # numbers no cell can run with
    "repeat-0": ({}, ["--cell-repeats", "0"], ["--cell-repeats must be at least 1, got 0"]),
    "steps-0": ({}, ["--steps", "0"], ["--steps must be at least 1, got 0"]),
    "precision-negative": ({}, ["--precision", "-0.02"], ["--precision must be greater than 0, got -0.02"]),
    "batch-size-0": ({}, ["--batch-size", "0"], ["--batch-size must be at least 1, got 0"]),
    "cores-per-rank-beyond-the-node": ({}, ["--cores-per-rank", "4096"],
                                       ["--cores-per-rank 4096: the largest cell puts 1 rank(s) on a node of"]),
    "ps-servers-0": ({}, ["--frameworks", "mxnet_ps_sync", "--ps-servers", "0"], ["--ps-servers must be at least 1, got 0"]),
    "ps-servers-as-many-as-the-ranks": ({}, ["--frameworks", "torch_ps_sync", "--gpus", "2", "--ps-servers", "2"],
                                        ["--ps-servers 2: the parameter-server cells have 2 rank(s), which leaves no "
                                         "worker beside 2 server(s)"]),
    "system-with-a-path-separator": ({}, ["--system", "site/partition"],
                                     ["--system 'site/partition' is not usable as a file name"]),
    "against-a-commit-that-does-not-exist": ({}, ["--against", "git:no-such-branch-x1"],
                                             ["--against git:no-such-branch-x1: no such commit in"]),
    "against-a-package-version-no-index-has": ({}, ["--against", "pkg:numpy==0.0.7"],
                                               ["--against pkg: numpy==0.0.7 cannot be built: "]),
    "against-something-not-a-reference": ({}, ["--against", "torch-2.13"],
                                          ["--against torch-2.13: not a reference; say one of git:REF"]),
    "against-with-update-baselines": ({}, ["--against", "env:X=1", "--update-baselines"],
                                      ["--against compares two environments", "leave out --update-baselines"]),
    "count-instructions-without-against": ({}, ["--count-instructions"],
                                           ["--count-instructions compares the host instructions of an A/B's two "
                                            "sides: give it with --against"]),
}


def session_directory(root: Path, files: dict) -> None:
    """The scaling test and ``files`` (surrogate escapes stand for bytes that are not UTF-8)."""
    shutil.copy(SCALING_TEST, root / "test_scaling.py")
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(text.encode("utf-8", "surrogateescape"))


def snapshot(root: Path) -> dict[str, str]:
    """Every directory and file under ``root``, each file by the hash of its bytes; not pytest-benchmark's
    empty store, which that plugin makes in any session's directory."""
    return {str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
            for path in sorted(root.rglob("*")) if path.relative_to(root).parts[0] != ".benchmarks"}


def processes_with(mark: str) -> list[int]:
    needle = f"DLSCALE_DRILL_MARK={mark}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and needle in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def run_suite(root: Path, flags: list[str], mark: str, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """The suite as a user runs it (after ``prefix``); every process it starts carries ``mark`` in
    its environment."""
    command = [*prefix, sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-m", "scaling", "test_scaling.py",
               "--system", SYSTEM, f"--baselines-dir={root / 'baselines'}", f"--history-dir={root / 'history'}",
               "--launcher", "torchrun", "--frameworks", "ddp", "--loaders", "synthetic", "--gpus", "1",
               *TINY_FLAGS, *flags]
    env = dict(os.environ, DLSCALE_DRILL_MARK=mark, PYTHONDONTWRITEBYTECODE="1",  # no __pycache__ in the snapshot
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    return subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("files, flags, expected", CASES.values(), ids=CASES.keys())
def test_bad_input_is_one_line_naming_it_and_nothing_runs_or_changes(tmp_path, files, flags, expected):
    session_directory(tmp_path, {**GOOD, **files})
    before = snapshot(tmp_path)
    mark = uuid.uuid4().hex
    result = run_suite(tmp_path, [flag.format(tmp=tmp_path) for flag in flags], mark)
    output = result.stdout + result.stderr

    assert result.returncode == pytest.ExitCode.USAGE_ERROR, output[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("ERROR: "), output[-3000:]
    for part in expected:
        assert part.format(tmp=tmp_path) in errors[0]
    assert "Traceback" not in output
    assert "[dlscale]" not in output, "a cell was launched"
    assert snapshot(tmp_path) == before, "a file was written, changed or removed (a cell's directory?)"
    assert processes_with(mark) == []


def test_a_baselines_directory_it_cannot_write_is_refused_before_any_cell(tmp_path):
    """--update-baselines into a directory the session cannot write: refused at the start, not after
    every cell has run. Root writes through any mode bits, so there a read-only mount stands for it."""
    session_directory(tmp_path, GOOD)
    baselines = tmp_path / "baselines"
    prefix: tuple[str, ...] = ()
    if os.geteuid() == 0:
        prefix = ("unshare", "--mount", "sh", "-c", 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"',
                  str(baselines))
    else:
        baselines.chmod(0o555)
    before = snapshot(tmp_path)
    mark = uuid.uuid4().hex
    try:
        result = run_suite(tmp_path, ["--update-baselines"], mark, prefix)
    finally:
        baselines.chmod(0o755)
    output = result.stdout + result.stderr
    assert result.returncode == pytest.ExitCode.USAGE_ERROR, output[-3000:]
    assert result.stderr.strip() == f"ERROR: --baselines-dir: cannot write {baselines}: {baselines} is not writable", output[-3000:]
    assert "[dlscale]" not in output and snapshot(tmp_path) == before and processes_with(mark) == []


@pytest.mark.launch
def test_a_history_line_cut_short_by_an_interrupted_run_does_not_stop_the_next(tmp_path):
    """An interrupted append leaves the start of a row, last in the file, and the next append ends
    it with a newline, so it may sit in the middle too. Neither is refused: the cell runs, and its
    row is appended after every byte that was there, the cut line ended."""
    torn = row(3)[:60]
    old = history(row(1), row(2)[:45], row(2), torn, end="")  # cut short once before, ended by the next append
    session_directory(tmp_path, {BASELINE: baseline(cell="ddp-synthetic-resnet50-g2"), HISTORY: old})  # no verdict to fail
    mark = uuid.uuid4().hex
    result = run_suite(tmp_path, ["--models", TEST_MODEL], mark)  # the file is the subject, not the model
    output = result.stdout + result.stderr

    assert result.returncode == pytest.ExitCode.OK, output[-3000:]
    assert "Traceback" not in output
    now = (tmp_path / HISTORY).read_text()
    assert now.startswith(old + "\n")
    rows, problems = read_history(tmp_path / HISTORY)
    assert [problem.line for problem in problems] == [2, 4] and all(problem.torn for problem in problems)
    assert [r["run_id"] for r in rows][:2] == ["run1", "run2"] and len(rows) == 3
    assert rows[-1]["cell"] == f"ddp-synthetic-{TEST_MODEL}-g1"
    assert processes_with(mark) == []


def test_help_lists_every_option_with_the_default_declared_with_its_setting(pytester):
    """pytest --help formats option help with %, which a literal "95%" once broke."""
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--help")
    assert result.ret == 0, result.stderr.str()
    text = " ".join(result.stdout.str().split())
    for expected in ("srun, mpirun, torchrun, horovodrun, deepspeed", "95% throughput interval",
                     "clear verdict (default 90)", "(default 0.02)", "counts as hung (default 180)",
                     "a cell may take in all (default 900)"):
        assert expected in text, expected
