"""The history's accepted changes and its lines' context (issue 63): an accepted drop no longer fails the
nightly's check, a new drop after it does, a blip never does; a change point says what changed there;
``dlscale-history --accept`` and its bad input; lines of an unknown schema."""
from __future__ import annotations

import numpy as np

from harness.judging import changepoints
from harness.judging.stats import Estimate
from harness.report import history as history_report
from harness.store import history

CELL = "ddp-synthetic-resnet50-g1"


def night(i: int, value: float, *, cell: str = CELL, work: str = "w1", packages: str = "p1") -> dict:
    return history.make_row(cell, run_id=f"run{i:03d}", verdict="pass", date=f"2026-01-{i % 28 + 1:02d}T02:00:00+00:00",
                            git_commit=f"{i:040d}", fingerprint="fp", throughput=Estimate(value=value, low=value * 0.98,
                                                                                           high=value * 1.02),
                            work={"digest": work, "flops": 1, "collective_bytes": 0}, package_set=packages,
                            machine="m")


def accepted(i: int, how: str = "re-recorded", cell: str = CELL) -> dict:
    return history.make_acceptance(cell, run_id=f"run{i:03d}", how=how, by="team@site", reason="a slower kernel we keep",
                                   date=f"2026-01-{i % 28 + 1:02d}T03:00:00+00:00")


def levels(*spans: tuple[int, float], seed: int = 1) -> list[float]:
    rng = np.random.default_rng(seed)
    return [level * (1 + 0.01 * rng.standard_normal()) for nights, level in spans for _ in range(nights)]


def check(tmp_path, rows: list[dict]) -> int:
    path = tmp_path / "sys.jsonl"
    path.unlink(missing_ok=True)
    history.append(path, rows)
    return history_report.main([str(path)])


def test_a_persistent_drop_fails_until_it_is_accepted_by_re_recording(tmp_path, capsys):
    values = levels((10, 100.0), (5, 85.0))
    rows = [night(i, v) for i, v in enumerate(values)]
    assert check(tmp_path, rows) == 1
    rows.append(accepted(len(values) - 1))  # the re-recording session's own night is the last one
    assert check(tmp_path, rows) == 0
    out = capsys.readouterr().out
    assert "ACCEPTED (re-recorded by team@site): a slower kernel we keep" in out
    more = [night(len(values) + i, v) for i, v in enumerate(levels((4, 85.0), seed=2))]
    assert check(tmp_path, rows + more) == 0  # the accepted level goes on: still no regression


def test_a_new_drop_after_the_acceptance_fails_again(tmp_path, capsys):
    values = levels((10, 100.0), (5, 85.0))
    rows = [night(i, v) for i, v in enumerate(values)] + [accepted(len(values) - 1)]
    rows += [night(len(values) + i, v) for i, v in enumerate(levels((6, 85.0), (5, 72.0), seed=3))]
    assert check(tmp_path, rows) == 1
    assert "REGRESSION: the latest level" in capsys.readouterr().out


def test_a_one_night_blip_after_an_acceptance_passes(tmp_path):
    values = levels((10, 100.0), (5, 85.0))
    rows = [night(i, v) for i, v in enumerate(values)] + [accepted(len(values) - 1)]
    after = levels((6, 85.0), seed=4)
    after[3] = 60.0
    rows += [night(len(values) + i, v) for i, v in enumerate(after)]
    assert check(tmp_path, rows) == 0


def test_an_acceptance_declared_before_the_drop_is_a_level_still_accepts_it():
    values = levels((10, 100.0), (6, 85.0))
    rows = [night(i, v) for i, v in enumerate(values[:12])] + [accepted(11, how="declared")]
    rows += [night(12 + i, v) for i, v in enumerate(values[12:])]
    [cell] = changepoints.report(rows)
    assert cell.accepted[0].after == 12 and not cell.regressed(0.05)
    assert cell.level_of(12) == cell.latest_level


def test_an_acceptance_of_another_cell_leaves_this_one_failing():
    rows = [night(i, v) for i, v in enumerate(levels((10, 100.0), (5, 85.0)))] + [accepted(14, cell="other-g1")]
    [cell] = changepoints.report(rows)
    assert cell.regressed(0.05) and cell.accepted == []


def test_a_change_point_says_what_changed_there(tmp_path, capsys):
    values = levels((8, 100.0), (8, 85.0))
    work_moved = [night(i, v, work="w1" if i < 8 else "w2") for i, v in enumerate(values)]
    packages_moved = [night(i, v, packages="p1" if i < 8 else "p2") for i, v in enumerate(values)]
    neither = [night(i, v) for i, v in enumerate(values)]
    for rows, words in ((work_moved, "the work changed here"), (packages_moved, "the package set changed here"),
                        (neither, "neither work nor packages: the node or the kernels")):
        check(tmp_path, rows)
        assert words in capsys.readouterr().out


def test_schema_1_lines_still_read_and_say_nothing_of_what_changed():
    old = {"schema": 1, "cell": CELL, "run_id": "r1", "date": "2025-01-01", "verdict": "pass",
           "throughput": {"value": 10.0}}
    [cell] = changepoints.report([old, {**old, "run_id": "r2"}])
    assert [n.work for n in cell.nights] == [None, None]
    assert changepoints.explained(cell.nights[0], cell.nights[1]) == ""


def test_a_line_of_an_unknown_schema_is_named_and_skipped(tmp_path):
    path = tmp_path / "sys.jsonl"
    history.append(path, [night(0, 100.0)])
    with open(path, "a") as stream:
        stream.write('{"schema": 3, "cell": "c", "run_id": "r", "date": "d", "verdict": "pass"}\n')
    rows, problems = history.read(path)
    assert len(rows) == 1
    assert str(problems[0]) == ("line 2: schema 3: not a schema this dlscale reads (1, 2; a newer dlscale wrote it?)")


def test_accept_without_re_recording_writes_who_when_and_why(tmp_path, capsys):
    path = tmp_path / "sys.jsonl"
    history.append(path, [night(i, v) for i, v in enumerate(levels((10, 100.0), (5, 85.0)))])
    assert history_report.main([str(path)]) == 1
    assert history_report.main([str(path), "--accept", CELL, "--reason", "new data layout, slower by design",
                                "--by", "alice"]) == 0
    line = history.read(path)[0][-1]
    assert (line["kind"], line["how"], line["by"], line["reason"]) == ("accepted", "declared", "alice",
                                                                      "new data layout, slower by design")
    assert line["run_id"] == "run014" and line["date"]
    assert history_report.main([str(path)]) == 0


def test_accepting_an_unknown_cell_is_one_line_and_leaves_the_file_alone(tmp_path, capsys):
    path = tmp_path / "sys.jsonl"
    history.append(path, [night(0, 100.0)])
    before = path.read_bytes()
    assert history_report.main([str(path), "--accept", f"{CELL},ddp-synthetic-resnet5-g1", "--reason", "x"]) == 2
    error = capsys.readouterr().err.strip()
    assert error == f"dlscale-history: {path} has no night of ddp-synthetic-resnet5-g1; its cells: {CELL}"
    assert path.read_bytes() == before


def test_accepting_into_a_file_something_else_wrote_to_leaves_it_alone(tmp_path, capsys):
    path = tmp_path / "sys.jsonl"
    history.append(path, [night(0, 100.0)])
    with open(path, "a") as stream:
        stream.write("not a history line\n")
    before = path.read_bytes()
    assert history_report.main([str(path), "--accept", CELL, "--reason", "x"]) == 2
    assert "line 2: not valid JSON" in capsys.readouterr().err
    assert path.read_bytes() == before
