"""harness.judging.recording: a cell's repeated measurements become its baseline entry, without launching."""
from pathlib import Path

import pytest

from harness.judging.recording import baseline_entries, baseline_entry, why_not_recorded
from harness.judging.stats import Estimate, tolerance_from_repeats
from harness.judging.verdicts import Verdict
from harness.judging.yardstick import Yardstick
from harness.launch.runner import CellRun
from harness.rank.cell import Cell
from harness.session.results import CellResult

CELL = Cell(framework="ddp", loader="synthetic", model="resnet50", ranks=1)


def measured(throughput: float, yardstick_s: float, verdict: str = "pass") -> CellResult:
    run = CellRun(cell=CELL, launcher="srun", command=[], status="ok", records=[], error=None, wall_s=19.0,
                  log_path=Path("launcher.log"), token="t", orphans_killed=[])
    result = CellResult(cell=CELL, runs=[run], config_hash="abc")
    result.throughput = Estimate(value=throughput, low=throughput * 0.995, high=throughput * 1.005, n_steps=50)
    result.yardstick = Yardstick(seconds=yardstick_s, spread=0.05)
    result.verdicts = [Verdict(kind=verdict, message=f"throughput {verdict}")]
    return result


# eight back-to-back launches of ddp-synthetic-resnet50-g1 on this project's CI machine (the
# self-test's baseline): throughput as measured, and each launch's yardstick
THROUGHPUT = [68.56, 68.16, 71.81, 67.53, 65.16, 66.93, 70.17, 68.74]
YARDSTICK_S = [0.01810, 0.01792, 0.01862, 0.01803, 0.01834, 0.01956, 0.01838, 0.01823]


def test_repeats_give_the_mean_and_a_band_from_their_spread_as_measured():
    entry = baseline_entry([measured(t, y) for t, y in zip(THROUGHPUT, YARDSTICK_S)], config={"batch_size": 16},
                           provenance={"host": "vm"}, band_floor=0.05)
    assert entry["metrics"]["throughput"] == pytest.approx(sum(THROUGHPUT) / len(THROUGHPUT))
    lower, upper = tolerance_from_repeats(THROUGHPUT, floor_rel=0.05)
    assert entry["bands"]["throughput"]["lower"] == pytest.approx(lower, abs=1e-4) == pytest.approx(-0.110, abs=1e-3)
    assert entry["bands"]["throughput"]["repeats"] == THROUGHPUT  # not normalised by the yardstick
    stored = Yardstick.from_json(entry["yardstick"])
    assert stored.seconds == pytest.approx(sum(YARDSTICK_S) / len(YARDSTICK_S), rel=1e-4)
    assert stored.noise == pytest.approx(tolerance_from_repeats(YARDSTICK_S, floor_rel=0.0)[1], abs=1e-4)
    assert entry["provenance"] == {"host": "vm", "launcher": "srun", "ranks": 1}


def test_an_entry_names_the_package_set_its_ranks_ran_in_beside_what_the_session_recorded():
    """What rebuilds the environment (harness.judging.confirmation): the session's provenance (commit,
    code, torch's package set, launch environment) and the package set of the cell's own ranks."""
    recorded = {"git_commit": "a" * 40, "code": {"harness": "c0de", "figures": "f1g5"}, "environment": "t0rch",
                "launch_environment": {"OMP_PROC_BIND": "close"}}
    entry = baseline_entry([measured(68.0, 0.018)], config={}, provenance=recorded, band_floor=0.05,
                           rank_environment="tf0000")
    assert entry["provenance"] == {**recorded, "rank_environment": "tf0000", "launcher": "srun", "ranks": 1}
    entries, _ = baseline_entries([measured(68.0, 0.018)], config={}, provenance=recorded, band_floor=0.05,
                                  accept_regressions=False, widest=0.1, rank_environments={CELL.id: "t0rch"})
    assert entries[0]["provenance"]["rank_environment"] == "t0rch"
    assert "rank_environment" not in baseline_entry([measured(68.0, 0.018)], config={}, provenance=recorded,
                                                    band_floor=0.05)["provenance"]


def test_one_measurement_keeps_the_band_in_the_file_and_leaves_the_noise_unknown():
    entry = baseline_entry([measured(68.0, 0.018)], config={}, provenance={}, band_floor=0.05)
    assert entry["bands"] == {} and "noise" not in entry["yardstick"]
    assert "yardstick" not in baseline_entry([measured(68.0, 0.018)], config={}, provenance={}, band_floor=0.05,
                                             use_yardstick=False)


def test_a_regression_is_not_recorded_unless_accepted():
    results = [measured(68.0, 0.018), measured(50.0, 0.018, verdict="fail")]
    why = why_not_recorded(results, accept_regressions=False, widest=0.10)
    assert why == "judged fail against its baseline (throughput fail); --accept-regressions records it anyway"
    assert why_not_recorded(results, accept_regressions=True, widest=0.10) is None
