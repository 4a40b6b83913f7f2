"""A cell's counted work from its ranks' records, and what moved between two launches."""
import pytest

from harness.judging.work import (PARTS, WorkChange, against_baseline, cell_work, compare_work, launches_work,
                                   work_digest, work_reading)

CPU_NOTE = {"gpu": "a CPU rank runs no GPU kernels"}


def rank_work(*, convolution=100, addmm=10, calls=None, all_reduce=4000, memory=800, bytes_read=0, not_counted=None):
    return {"operators": calls or {"aten::convolution": 2, "aten::addmm": 1, "aten::add_": 5},
            "flops": {"total": convolution + addmm, "by_operator": {"aten::convolution": convolution,
                                                                      "aten::addmm": addmm}},
            "collectives": {"all_reduce": {"calls": 2, "bytes": all_reduce}, "broadcast": {"calls": 1, "bytes": 8}},
            "memory": {"step_peak_bytes": memory},
            "data": {"images": 8, "images_decoded": 8, "bytes_read": bytes_read},
            "not_counted": dict(CPU_NOTE if not_counted is None else not_counted), "steps": 1, "cost_s": 0.2}


def launch(*works):
    return [{"rank": rank, "work": work} for rank, work in enumerate(works)]


def test_a_launch_sums_its_ranks_and_takes_the_largest_memory():
    work = cell_work(launch(rank_work(memory=800, bytes_read=100), rank_work(memory=900, bytes_read=50)))
    assert work["ranks"] == 2
    assert work["flops"] == {"total": 220, "by_operator": {"aten::addmm": 20, "aten::convolution": 200}}
    assert work["operators"] == {"aten::add_": 10, "aten::addmm": 2, "aten::convolution": 4}
    assert work["collectives"] == {"all_reduce": {"calls": 4, "bytes": 8000}, "broadcast": {"calls": 2, "bytes": 16}}
    assert work["memory"] == {"step_peak_bytes": 900}
    assert work["data"] == {"bytes_read": 150, "images": 16, "images_decoded": 16}
    assert "gpu" not in work and work["not_counted"] == CPU_NOTE


def test_a_part_one_rank_did_not_count_is_not_summed_but_named():
    why = "DALI's reader shuffles"
    work = cell_work(launch(rank_work(), {**rank_work(), "not_counted": {"data": why}}))
    assert "data" not in work and work["not_counted"]["data"] == why
    assert "flops" in work


def test_records_without_work_give_none():
    assert cell_work([{"rank": 0}]) is None
    assert cell_work(launch(rank_work()) + [{"rank": 1}]) is None  # never a partial sum over the ranks


def test_the_same_work_is_the_same_digest_and_compares_the_same():
    one, two = cell_work(launch(rank_work())), cell_work(launch({**rank_work(), "cost_s": 9.0}))
    assert work_digest(one) == work_digest(two)
    change = compare_work(one, two)
    assert not change.changed and change.comparable
    assert change.same == ("flops", "operators", "collectives", "memory", "data")
    assert change.text() == "work: the same (flops, operators, collectives, memory, data)"


def test_a_wider_convolution_is_named_with_its_operator():
    before = cell_work(launch(rank_work(convolution=1000)))
    after = cell_work(launch(rank_work(convolution=1092, memory=832)))
    change = compare_work(before, after)
    assert [moved.part for moved in change.moved] == ["flops", "memory"]
    assert change.moved[0].text == "+9.1% FLOPs (aten::convolution)"
    assert change.moved[0].ratio == pytest.approx(1102 / 1010)
    assert change.text() == ("work: +9.1% FLOPs (aten::convolution), memory +4.0%, operators the same, "
                             "collectives the same, data the same")
    assert work_digest(before) != work_digest(after)


def test_flops_say_which_phase_moved():
    def phased(forward, backward):
        work = rank_work(convolution=forward + backward)
        work["flops"]["by_phase"] = {"forward": forward, "backward": backward}
        return work

    one = cell_work(launch(phased(300, 600), phased(300, 600)))
    assert one["flops"]["by_phase"] == {"forward": 600, "backward": 1200}
    moved = compare_work(one, cell_work(launch(phased(300, 660), phased(300, 660)))).moved
    assert [m.text for m in moved] == ["+6.6% FLOPs (aten::convolution; backward +10.0%)"]
    shifted = compare_work(one, cell_work(launch(phased(330, 570), phased(330, 570)))).moved
    assert [m.text for m in shifted] == ["+0.0% FLOPs (forward +10.0%, backward -5.0%)"]  # the same total, moved


def test_phases_a_runtime_cannot_count_are_carried_with_why_never_as_zero():
    work = rank_work()
    work["flops"].update(by_phase={"forward": 110}, phases_not_counted={"backward": "MXNet counts no FLOPs"})
    cell = cell_work(launch(work, work))
    assert cell["flops"]["by_phase"] == {"forward": 220}
    assert cell["flops"]["phases_not_counted"] == {"backward": "MXNet counts no FLOPs"}


def test_an_allocators_peak_is_named_apart_from_the_dispatchers():
    def gpu_rank(dispatcher, allocator):
        return {**rank_work(), "memory": {"step_peak_bytes": dispatcher, "allocator_peak_bytes": allocator}}

    before = cell_work(launch(gpu_rank(800, 5000), gpu_rank(900, 4000)))
    assert before["memory"] == {"allocator_peak_bytes": 5000, "step_peak_bytes": 900}
    after = cell_work(launch(gpu_rank(800, 5500), gpu_rank(900, 4000)))
    assert [m.text for m in compare_work(before, after).moved] == ["allocator peak +10.0%"]
    cpu = cell_work(launch(rank_work(memory=800), rank_work(memory=900)))
    assert [m.text for m in compare_work(cpu, before).moved] == ["allocator peak counted by one side only"]
    allocator_only = cell_work(launch({**rank_work(), "memory": {"allocator_peak_bytes": 7}}))
    assert allocator_only["memory"] == {"allocator_peak_bytes": 7}


def test_collectives_name_their_kind_bytes_and_calls():
    before = cell_work(launch(rank_work()))
    fewer = {**rank_work(), "collectives": {"all_reduce": {"calls": 1, "bytes": 4000},
                                            "broadcast": {"calls": 1, "bytes": 8}}}
    change = compare_work(before, cell_work(launch(fewer)))
    assert [moved.text for moved in change.moved] == ["all_reduce 2 -> 1 calls"]
    more = {**rank_work(), "collectives": {"all_reduce": {"calls": 2, "bytes": 4400}}}
    texts = [moved.text for moved in compare_work(before, cell_work(launch(more))).moved]
    assert texts == ["all_reduce bytes +10.0%", "broadcast bytes -100.0%, 1 -> 0 calls"]


def test_operators_name_those_whose_calls_moved():
    before = cell_work(launch(rank_work()))
    after = cell_work(launch(rank_work(calls={"aten::convolution": 2, "aten::addmm": 1, "aten::add_": 7,
                                              "aten::mul": 1})))
    moved = compare_work(before, after).moved
    assert [m.text for m in moved] == ["operator calls +37.5% (aten::add_ 5 -> 7, aten::mul 0 -> 1)"]


def test_a_side_that_did_not_count_is_not_compared_and_says_why():
    change = compare_work(None, cell_work(launch(rank_work())))
    assert not change.comparable
    assert change.text().startswith("work: not compared (the reference counted no work")
    half = compare_work(cell_work(launch({**rank_work(), "not_counted": {"data": "no reader"}})),
                        cell_work(launch(rank_work())))
    assert half.comparable and "data" not in half.same
    assert half.uncompared == ("data: the reference did not count it (no reader)",)


def gpu_work(kernels: int, kernel_time_s: float) -> dict:
    return {**rank_work(not_counted={}), "gpu": {"kernels": kernels}, "timed": {"gpu_kernel_time_s": kernel_time_s}}


def test_gpu_kernels_are_work_and_their_time_is_said_beside_it_never_in_it():
    before = cell_work(launch(gpu_work(500, 0.100)))
    within = cell_work(launch(gpu_work(500, 0.102)))
    slower = cell_work(launch(gpu_work(500, 0.110)))
    assert before["gpu"] == {"kernels": 500} and before["timed"] == {"gpu_kernel_time_s": 0.1}
    assert not compare_work(before, within).changed and compare_work(before, within).timed == ()
    timed_only = compare_work(before, slower)
    assert not timed_only.changed and timed_only.moved == ()  # a slower GPU doing the same work
    assert timed_only.timed == ("gpu kernel time +10.0%",)
    assert timed_only.text().endswith("; timed, beside the work: gpu kernel time +10.0%")
    assert work_digest(before) == work_digest(slower)
    assert "launches_differ" not in launches_work([launch(gpu_work(500, 0.100)), launch(gpu_work(500, 0.110))])
    more = compare_work(before, cell_work(launch(gpu_work(520, 0.110))))
    assert [m.text for m in more.moved] == ["GPU kernels 500 -> 520"]


def test_an_older_records_kernel_time_inside_gpu_is_read_as_timed():
    old = cell_work(launch({**rank_work(not_counted={}), "gpu": {"kernels": 500, "kernel_time_s": 0.1}}))
    assert old["gpu"] == {"kernels": 500} and old["timed"] == {"gpu_kernel_time_s": 0.1}
    assert work_digest(old) == work_digest(cell_work(launch(gpu_work(500, 0.2))))


def test_the_digest_is_of_the_counts_not_of_the_words_that_say_what_was_not():
    reworded = {**rank_work(), "not_counted": {"gpu": "no GPU kernels on a CPU rank"}}
    assert work_digest(cell_work(launch(rank_work()))) == work_digest(cell_work(launch(reworded)))
    uncounted_data = {**rank_work(), "not_counted": {**CPU_NOTE, "data": "no reader"}}
    assert work_digest(cell_work(launch(rank_work()))) != work_digest(cell_work(launch(uncounted_data)))


def test_the_ab_reads_the_work_beside_the_speed():
    same = WorkChange(same=("flops", "operators"))
    assert work_reading(same, "regressed").endswith(
        "so the change is in the kernels, the environment or the machine")
    assert work_reading(same, "same") == "work: the same (flops, operators)"
    before, after = cell_work(launch(rank_work(convolution=1000))), cell_work(launch(rank_work(convolution=1100)))
    assert work_reading(compare_work(before, after), "inconclusive").endswith(
        "the software does other work, though the speed could not be told apart yet")


def test_every_part_is_known_and_is_a_count():
    assert PARTS == ("flops", "operators", "collectives", "memory", "data", "gpu")
    assert not set(PARTS) & {"timed", "cost_s", "gpu_kernel_time_s"}


def test_the_docs_table_of_what_is_counted_is_the_one_list():
    """docs/verdicts.md's table of counted work names the parts of harness.rank.work.WORK, each once,
    and says the timed figure is beside the work, not a part of it."""
    from pathlib import Path

    from harness.rank.work import TIMED_FIGURES, WORK

    text = (Path(__file__).parents[3] / "docs" / "verdicts.md").read_text()
    section = text[text.index("## Counted work"):]
    section = section[:section.index("\n## ", 3)]
    rows = [line.split("|")[1].strip().strip("`") for line in section.splitlines()
            if line.startswith("| `")]
    assert rows == [count.part for count in WORK]
    for name in TIMED_FIGURES:
        assert f"`timed.{name}`" in section
    gpu_row = next(line for line in section.splitlines() if line.startswith("| `gpu`"))
    assert "time" not in gpu_row


def test_launches_that_did_other_work_are_named():
    same = launches_work([launch(rank_work()), launch({**rank_work(), "cost_s": 3.0})])
    assert same["launches"] == 2 and "launches_differ" not in same
    other = launches_work([launch(rank_work()), launch(rank_work(memory=801))])
    assert other["launches_differ"] == ["memory"]
    assert launches_work([[{"rank": 0}]]) is None


def test_a_baseline_is_compared_only_when_counted_with_the_same_packages():
    def counted(versions, **changes):
        return cell_work([{"rank": 0, "work": rank_work(**changes), "versions": versions}])

    torch_then, torch_now = {"torch": "2.13.1"}, {"torch": "2.14.1"}
    other = against_baseline(counted(torch_then), counted(torch_now))
    assert other.uncompared == ("the baseline's work was counted with other packages (torch 2.13.1 -> 2.14.1)",)
    assert not other.comparable
    moved = against_baseline(counted(torch_now), counted(torch_now, convolution=106))
    assert moved.text().startswith("work: +5.5% FLOPs (aten::convolution)")
    assert against_baseline(None, counted(torch_now)) is None


def test_a_change_comes_back_from_its_json():
    before, after = cell_work(launch(rank_work(convolution=1000))), cell_work(launch(rank_work(convolution=1100)))
    change = compare_work(before, after)
    assert WorkChange.from_json(change.to_json()) == change


def served(server: int, push_bytes: int, workers: int = 2) -> dict:
    """A parameter server's record of the workers' counted step, as torch's and TensorFlow's give it."""
    share = {"push": {"calls": 1, "bytes": push_bytes}, "pull": {"calls": 1, "bytes": push_bytes}}
    return {"role": "server", "server": server,
            "work": {"by_worker": {str(worker): share for worker in range(workers)}, "steps": 1}}


def test_parameters_spread_otherwise_over_the_servers_move_the_work_where_the_workers_totals_do_not():
    """Two workers push 1,000 bytes a step each, first 600 to server 0 and 400 to server 1, then
    500 and 500: their own counts are the same, the servers' are not."""
    workers = launch(rank_work(), rank_work())
    before = cell_work(workers, [served(0, 600), served(1, 400)])
    after = cell_work(workers, [served(0, 500), served(1, 500)])
    assert before["servers"]["0"]["push"] == {"calls": 2, "bytes": 1200}
    change = compare_work(before, after)
    assert change.changed and [moved.part for moved in change.moved] == ["collectives"] * 4
    assert "push at server 0 bytes -16.7%" in change.text() and "pull at server 1 bytes +25.0%" in change.text()
    assert work_digest(before) != work_digest(after)
    assert work_digest(cell_work(workers)) == work_digest({**cell_work(workers), "servers": {}})  # other cells: as before
    assert launches_work([workers, workers], [[served(0, 600)], [served(0, 500)]])["launches_differ"] == ["collectives"]
