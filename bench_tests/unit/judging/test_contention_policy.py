"""harness.judging.contention: when the ranks' wait for a CPU, or other work on their cores, makes a
fail untrustworthy, and when the cell's own processes made the wait."""
from harness.judging.contention import contended, distrust, launch_contended
from harness.judging.verdicts import Verdict


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
