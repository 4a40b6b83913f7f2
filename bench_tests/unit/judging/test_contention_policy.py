"""harness.judging.contention: when the ranks' wait for a CPU, or other work on their cores, makes a
fail untrustworthy, and when the cell's own processes made the wait."""
import pytest

from harness.judging.contention import beyond_contention, contended, distrust, launch_contended
from harness.judging.kinds import VerdictKind
from harness.judging.stats import Estimate
from harness.judging.verdicts import Verdict
from harness.rank.contention import TICKS_PER_S, TICKS_UNCERTAIN_PER_CORE, outside_share, outside_stall


def test_a_fail_is_distrusted_only_when_the_wait_grew_past_the_baseline():
    fail = Verdict(kind="fail", message="throughput -20%")
    assert distrust(fail, 0.02, 0.01) == fail
    assert distrust(fail, 0.30, 0.28) == fail  # a cell whose own workers always make it wait
    grown = distrust(fail, 0.20, 0.01)
    assert grown.kind == "inconclusive" and "1% when" in grown.message
    assert "waited for a CPU for 20% of the step time" in grown.message
    unknown = distrust(fail, 0.20, None)
    assert unknown.kind == "fail" and "other work on the node?" in unknown.message
    passing = Verdict(kind="pass", message="ok")
    assert distrust(passing, 0.5, 0.0) == passing
    assert contended(0.2, 0.1) and not contended(0.2, None) and not contended(None, 0.0)


def test_a_wait_the_cells_own_processes_made_never_excuses_a_fail():
    fail = Verdict(kind="fail", message="throughput -20%")
    # a loader whose workers now take the rank's core: the rank waits 30%, nothing outside took it
    own = distrust(fail, 0.30, 0.02, outside=0.01)
    assert own.kind == "fail" and "its own processes (loader workers, framework threads) made that wait" in own.message
    # another job took 20% of the cores: the fail is not trusted, whatever the baseline's wait
    taken = distrust(fail, 0.25, 0.25, outside=0.20)
    assert taken.kind == "inconclusive" and "work outside the cell took 20% of its cores' time" in taken.message
    assert contended(0.0, None, outside=0.2) and not contended(0.9, 0.0, outside=0.01)
    quiet = [{"rank": 0, "outside_cpu": [0.0], "cpu_wait": [0.5], "step_times": [1.0], "cores": [0]}]
    assert not launch_contended(quiet, 0.0)


def test_a_fail_further_below_than_the_outside_work_can_explain_stands():
    """A neighbour that took 10% of one rank's two cores can have stood the cell still for 20% of its
    window at most: a cell at a tenth of its baseline fails whatever the neighbour did, one 15% under
    its edge is not trusted."""
    fail = Verdict(kind=VerdictKind.FAIL, message="throughput -90%")
    measured = Estimate(value=10.0, low=9.5, high=10.5)
    assert beyond_contention(measured, edge=90.0, stall=0.2)
    assert not beyond_contention(measured, edge=12.0, stall=0.2)  # 10.5 / 0.8 = 13.1 reaches it
    assert not beyond_contention(measured, edge=90.0, stall=None) and not beyond_contention(measured, 90.0, 1.0)
    stands = distrust(fail, 0.2, 0.0, outside=0.10, stall=0.2, beyond=True)
    assert stands.kind == "fail" and "stood it still for 20% of the window at most" in stands.message
    assert distrust(fail, 0.2, 0.0, outside=0.10, stall=0.2, beyond=False).kind == "inconclusive"


def test_outside_work_stalls_a_cell_at_most_for_its_share_of_each_ranks_cores_summed_over_ranks():
    tick = 1 / TICKS_PER_S
    unresolved = TICKS_UNCERTAIN_PER_CORE * tick
    records = [{"rank": 0, "outside_cpu": [0.1 + 2 * unresolved], "step_times": [1.0], "cores": [0, 1]},
               {"rank": 1, "outside_cpu": [0.05 + 2 * unresolved], "step_times": [1.0], "cores": [2, 3]}]
    assert outside_share(records) == pytest.approx(0.05)  # rank 0: 0.1 s of its 2 core-seconds
    assert outside_stall(records) == pytest.approx(0.15)
    assert outside_stall([{"rank": 0, "step_times": [1.0], "cores": [0]}]) is None
