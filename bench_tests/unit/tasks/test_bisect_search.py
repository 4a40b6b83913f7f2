"""The bisect's search on fixed launch outcomes where it once answered another question than the
user's (issue 65): a work change and a slowdown in different commits, a verification stopped by a
failed launch or a busy node, the ends held by a step in the node's speed, the counted launches
logged, and ``--rounds`` below what a look can judge. (Fakes: :mod:`test_bisect_cli`.)"""
import dataclasses
import json
from pathlib import Path

import pytest

from bench_tests.unit.tasks.test_bisect_cli import CELL, JITTER, QUICK, BusyNode, Node, bound, env_points
from harness.launch.runner import CellRun
from harness.tasks.bisect import main
from harness.tasks.bisect_points import BisectError
from harness.tasks.bisect_report import report, succeeded
from harness.tasks.bisect_search import Bisect
from harness.tasks.bisect_settings import BudgetSpent, NodeTooBusy


def record(step_s: float, flops: int | None = None) -> dict:
    kept = {"rank": 0, "step_times": [step_s] * 8, "images": 128, "window_s": 8 * step_s, "losses": [1.0] * 8,
            "data_wait": [0.0] * 8}
    if flops is not None:
        kept["work"] = {"flops": {"total": flops, "by_operator": {"aten::convolution": flops}},
                        "operators": {"aten::convolution": 20}, "not_counted": {}, "cost_s": 0.1}
    return kept


def ran(cell, records, status="ok", error=None) -> CellRun:
    return CellRun(cell=cell, launcher="mpirun", command=[], status=status, records=records, error=error,
                   wall_s=1.0, log_path=Path("log"), token="t", orphans_killed=[])


class SplitNode(Node):
    """Seven points: from ``work_from`` on a step counts 3% more FLOPs at the same speed (a cheap
    operator change), from ``slow_from`` on it runs 25% slower with the same work; the two in
    different commits. The launches named in ``failing`` (a point and which of its launches) fail
    with a rank's error."""

    def __init__(self, work_from=2, slow_from=4, slower=1.25, failing=()):
        super().__init__()
        self.work_from, self.slow_from, self.slower, self.failing = work_from, slow_from, slower, set(failing)

    def launch_in(self, cell, environment, place):
        point = int(environment.launch_environment["X"])
        step = 0.2 * (self.slower if point >= self.slow_from else 1.0) * JITTER[len(self.launched) % len(JITTER)]
        self.launched.append(str(point))
        if (str(point), self.launched.count(str(point))) in self.failing:
            return ran(cell, [], status="failed", error="rank 0: RuntimeError: out of memory\ntraceback")
        return ran(cell, [record(step, 1030 if point >= self.work_from else 1000)])


def test_a_work_change_at_the_same_speed_is_listed_and_the_slowdown_found_by_time(tmp_path):
    """The work changes at point 2 (3% more FLOPs, the same speed) and the step slows at point 4
    (the same work): the bisect by work finds the work change, its pairs say the speed is the same,
    so it is listed as a work change, not a culprit; the range's slowdown is not accounted for, so
    the same-work part of the range is searched by time and point 4 named. (On the main of issue
    65: point 2 named the culprit, "verified" by its work, and point 4 never searched.)"""
    said = []
    done = Bisect(SplitNode(), CELL, tmp_path, env_points(*range(7)), QUICK, tmp_path / "state.json",
                  settings_bound=bound(), seed=5, say=said.append).run()
    assert [(c["point"], c["verified"], c["verdict"]) for c in done["culprits"]] == [("X=4", True, "regressed")]
    change, = done["work_changes"]
    assert change["point"] == "X=2" and change["verdict"] != "regressed"
    assert change["work"]["changed"] and "+3.0% FLOPs" in change["evidence"]
    assert done["accounting"]["holds"], done["accounting"]
    assert done["range_speed"]["verdict"] == "regressed"
    assert {step["placed_by"] for step in done["steps"]} >= {"work", "test"}
    assert succeeded([done])
    lines = report([done]).splitlines()
    assert any(line.startswith("  culprit X=4: verified (made it slower: current/reference 0.8") for line in lines), lines
    assert any(line.startswith("  work change X=2: changed the work, speed the same or not shown to differ (") and
               "+3.0% FLOPs" in line for line in lines), lines


def test_where_the_work_changed_and_nothing_ran_slower_the_bisect_says_so():
    """The ends differ in work but not in speed: no culprit to name, the good end is not faster."""
    with pytest.raises(BisectError, match="the good end is not faster than the bad one"):
        Bisect(SplitNode(slow_from=99), CELL, Path("."), env_points(*range(7)), QUICK,
               Path(__import__("tempfile").mkdtemp()) / "state.json", settings_bound=bound(), seed=5).run()


def test_a_counted_launch_is_logged_and_its_failure_kept(tmp_path):
    """Each launch that counts a point's work has its launch-log entry, as a round's launches do; a
    failed one keeps its error, and the midpoint skipped for it says it."""
    node, said = SplitNode(work_from=3, slow_from=3, failing={("3", 1)}), []
    done = Bisect(node, CELL, tmp_path, env_points(*range(7)), QUICK, tmp_path / "state.json",
                  settings_bound=bound(), seed=5, say=said.append).run()
    counted = done["counted_log"]
    assert len(counted) == len(done["work"]) and {entry["side"] for entry in counted} == set(done["work"])
    failed, = [entry for entry in counted if entry["status"] != "ok"]
    assert failed["side"] == "X=3" and "RuntimeError: out of memory" in failed["error"]
    skipped = done["steps"][0]["skipped"][0]
    assert skipped["point"] == "X=3" and "RuntimeError: out of memory" in skipped["why"], skipped


class TimingOutNode(Node):
    """Point 1's launches numbered in ``timing_out`` time out."""

    def __init__(self, timing_out=()):
        super().__init__()
        self.timing_out = set(timing_out)

    def launch_in(self, cell, environment, place):
        run = super().launch_in(cell, environment, place)
        if self.launched[-1] == "1" and self.launched.count("1") in self.timing_out:
            return dataclasses.replace(run, status="timeout", records=[], error="no progress for 600 s")
        return run


def test_a_launch_that_times_out_in_a_two_point_range_is_said_and_not_kept(tmp_path):
    """A range of one commit goes straight to its verification; an end's launch times out there: the
    bisect says so (not "the good end is not faster"), and a rerun measures afresh rather than
    reusing the failed verification."""
    state = tmp_path / "state.json"
    with pytest.raises(BisectError, match=r"the range's end X=1 cannot be launched: the current side's launch "
                                          r"timed out in pair"):
        Bisect(TimingOutNode(timing_out={3}), CELL, tmp_path, env_points(0, 1), QUICK, state, settings_bound=bound(),
               seed=1).run()
    assert json.loads(state.read_text())["verifying"] is None
    done = Bisect(Node(), CELL, tmp_path, env_points(0, 1), QUICK, state, settings_bound=bound(), seed=1).run()
    assert [(c["point"], c["verified"]) for c in done["culprits"]] == [("X=1", True)]


def test_a_busy_node_during_verification_stops_to_resume_not_a_culprit_not_confirmed(tmp_path):
    """The culprit's verification pairs all meet outside work: the bisect stops (exit status 3, as a
    step does) with its pairs kept, and goes on from them on a quiet node to a verified culprit."""
    state = tmp_path / "state.json"
    busy = {("1", n) for n in range(8, 60)} | {("2", n) for n in range(8, 60)}  # every launch after the step's
    with pytest.raises(NodeTooBusy, match="too busy to compare on"):
        Bisect(BusyNode(busy=busy), CELL, tmp_path, env_points(0, 2, 1), QUICK, state, settings_bound=bound(),
               seed=6).run()
    kept = json.loads(state.read_text())
    assert kept["verifying"]["point"] == "X=1" and kept["verifying"]["result"]["left_out"] and not kept["culprits"]
    done = Bisect(BusyNode(), CELL, tmp_path, env_points(0, 2, 1), QUICK, state, settings_bound=bound(), seed=6).run()
    assert [(c["point"], c["verified"]) for c in done["culprits"]] == [("X=1", True)]


class SteppingNode(Node):
    """The bad end (point 1) runs at 0.5 s a step in its first eight launches of the rounds (after
    the one that counts its work), then at the good end's 0.2 s: the ratio steps within the step's
    rounds, so a regression its twelve rounds would show is held inconclusive."""

    def launch_in(self, cell, environment, place):
        run = super().launch_in(cell, environment, place)
        if self.launched[-1] == "1" and self.launched.count("1") > 9:
            run.records[0].update(step_times=[0.2] * 8, window_s=1.6)
        return run


def test_ends_held_by_a_step_in_the_nodes_speed_say_why():
    """The range's first step judges its ends inconclusive because the ratio stepped within its
    rounds: the one line says so, not only that the good end is not faster."""
    twelve = dataclasses.replace(QUICK, rounds=12, max_rounds=12, verify_pairs=12)
    with pytest.raises(BisectError, match="held inconclusive: .*stepped"):
        Bisect(SteppingNode(), CELL, Path("."), env_points(0, 2, 1), twelve,
               Path(__import__("tempfile").mkdtemp()) / "state.json", settings_bound=bound(settings=twelve),
               seed=6).run()


@pytest.mark.parametrize("option", ["--rounds", "--max-rounds", "--verify-pairs"])
def test_fewer_rounds_than_a_look_can_judge_is_one_line_before_any_launch(option, capsys, tmp_path):
    """The CLI asks what the suite asks of --pairs (on the main of issue 65 --rounds 1 crashed after
    three launches)."""
    assert main(["ddp-synthetic-resnet44-g1", "--good", "HEAD~1", option, "1", "--repo", str(tmp_path)]) == 2
    line, = capsys.readouterr().err.strip().splitlines()
    assert line == f"dlscale-bisect: {option} must be at least 6, got 1", line
    assert main(["ddp-synthetic-resnet44-g1", "--good", "HEAD~1", "--rounds", "40", "--repo", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == "dlscale-bisect: --rounds (40) must not exceed --max-rounds (32)"


def test_a_version_5_state_file_written_before_the_fields_added_since_still_loads(tmp_path):
    """The state file's version-5 schema is the persistent contract: a file without the fields
    added since (work changes, the range's A/B, the counted launches' log, the search by time after
    the work's) loads, each at its default, and the bisect goes on from it."""
    state = tmp_path / "state.json"
    Bisect(Node(), CELL, tmp_path, env_points(0, 1), QUICK, state, settings_bound=bound()).save()
    added = ["work_changes", "range_speed", "counted_log", "counted_errors", "time_after_work", "slowdown_unknown",
             "same_speed", "not_searched"]
    kept = json.loads(state.read_text())
    assert set(added) <= set(kept)
    state.write_text(json.dumps({name: value for name, value in kept.items() if name not in added}))
    done = Bisect(Node(), CELL, tmp_path, env_points(0, 1), QUICK, state, settings_bound=bound(), seed=1).run()
    assert [(c["point"], c["verified"]) for c in done["culprits"]] == [("X=1", True)]
    assert done["work_changes"] == [] and done["range_speed"] is None and len(done["counted_log"]) == 2


def test_an_ends_counting_launch_that_fails_is_named_with_its_error(tmp_path):
    said = []
    with pytest.raises(BudgetSpent):
        Bisect(SplitNode(failing={("0", 1)}), CELL, tmp_path, env_points(*range(7)),
               dataclasses.replace(QUICK, max_launches=2), tmp_path / "state.json", settings_bound=bound(),
               say=said.append).run()
    assert said[0] == ("dlscale-bisect: an end's launch counted no work (its launch failed, X=0: rank 0: RuntimeError: "
                       "out of memory): each midpoint placed by its speed, in rounds"), said


def test_a_same_work_range_whose_ends_the_rounds_cannot_tell_apart_is_left_unresolved(tmp_path):
    """A range of the same work searched by time whose ends' rounds scatter both ways (bad/good from
    0.70 to 1.30): not shown to hold a slowdown, nor shown not to. It is left unresolved, never
    reported as holding no slowdown (as the proof over six commits once read a held verdict)."""
    from harness.judging import bisection

    said = []
    search = Bisect(SplitNode(), CELL, tmp_path, env_points(*range(7)), QUICK, tmp_path / "state.json",
                    settings_bound=bound(), seed=5, say=said.append)
    search.state.slowdown_unknown.append([search.run_.keys[2], search.run_.keys[6]])
    scatter = [0.7, 1.3, 0.8, 1.2, 0.75, 1.25, 0.9, 1.1]
    rounds = [bisection.Round(order=bisection.ORDERS[i % len(bisection.ORDERS)], good=100.0, mid=100.0 * s,
                              bad=100.0 * s) for i, s in enumerate(scatter)]
    placement = bisection.place(rounds, min_effect=0.03, looks=[8], most=8)
    assert placement.ends.kind == "inconclusive"
    search._finish({}, 2, 4, 6, placement)
    assert search.state.same_speed == [] and len(search.state.unresolved) == 1
    assert search.state.unresolved[0]["why"].startswith("whether its ends differ in speed is unclear")
