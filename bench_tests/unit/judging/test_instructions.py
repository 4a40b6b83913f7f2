"""Host instructions compared (harness.judging.instructions): counts read from callgrind_annotate's
listing, the same within the counts' own noise, the functions that moved most named."""
import pytest

from harness.judging.instructions import (JIT_CODE, SAME_WITHIN, annotated_counts, cell_instructions,
                                          compare_instructions, most_moved)
from harness.session.instructions import instruction_lines

LISTING = """\
--------------------------------------------------------------------------------
Ir
--------------------------------------------------------------------------------
896,975,428  PROGRAM TOTALS

--------------------------------------------------------------------------------
Ir           file:function
--------------------------------------------------------------------------------
210,312,192  ???:dnnl::impl::cpu::jit_gemm_convolution_utils::col2im(conv_gemm_conf_t const&) [/lib/libtorch_cpu.so]
171,229,344  ???:0x00000000e9dbc000 [???]
148,008,091  ???:0x00000000e9efc000 [???]
 21,236,656 (2.37%)  ???:at::native::batch_norm_cpu_collect_stats_kernel(at::Tensor&) [/lib/libtorch_cpu.so]
     12,345  /tmp/python-build.2026/Python-3.11.7/Objects/obmalloc.c:_PyObject_Malloc [/usr/bin/python3.11]
"""


def counted(per_step: int, steps: tuple[int, int] | None = None, rank: int = 0) -> dict:
    steps = steps or (per_step, per_step)
    return {"rank": rank, "instructions": {"per_step": per_step, "steps": list(steps),
                                           "files": [f"callgrind-1.out.{n}" for n in (1, 2)]}}


def by_thread(rank: tuple[int, int], communication: tuple[int, int], rank_id: int = 0,
              transport: tuple[int, int] = (0, 0), other: tuple[int, int] = (0, 0)) -> dict:
    """A rank's record as one that counts every thread writes it (harness.rank.instructions)."""
    steps = [sum(counts) for counts in zip(rank, communication, transport, other)]
    return {"rank": rank_id, "instructions": {
        "per_step": steps[-1], "steps": steps,
        "kinds": {"rank": list(rank), "communication": list(communication), "transport": list(transport),
                  "loader": [0, 0], "other": list(other)},
        "files": ["callgrind-7.out.1-01", "callgrind-7.out.2-01"],
        "thread_files": ["callgrind-7.out.2-01", "callgrind-7.out.2-03", "callgrind-7.out.2-04"]}}


def test_the_listing_gives_each_function_and_run_time_code_as_one():
    counts = annotated_counts(LISTING)
    assert counts[JIT_CODE] == 171_229_344 + 148_008_091  # addresses move from launch to launch
    assert counts["at::native::batch_norm_cpu_collect_stats_kernel(at::Tensor&)"] == 21_236_656
    assert counts["obmalloc.c:_PyObject_Malloc"] == 12_345  # the interpreter's build directory left out
    assert "PROGRAM TOTALS" not in counts and sum(counts.values()) == 550_798_628


def test_a_cell_counts_its_ranks_summed_with_their_largest_step_spread():
    cell = cell_instructions([counted(1_000_000, (1_000_000, 999_000)), counted(1_002_000, rank=1),
                              {"rank": 2, "instructions": None}])
    assert cell["per_step"] == 2_002_000 and cell["ranks"] == {"0": 1_000_000, "1": 1_002_000}
    assert cell["step_spread"] == pytest.approx(0.001) and cell["files"]["0"] == ["callgrind-1.out.2"]
    assert cell_instructions([{"rank": 0}]) is None


def test_counts_within_their_own_noise_are_the_same_and_beyond_it_moved():
    base = cell_instructions([counted(897_000_000)])
    same = compare_instructions(base, cell_instructions([counted(897_100_000)]))
    assert not same.changed and same.tolerance == SAME_WITHIN and same.text().startswith("instructions: the same")
    wider = compare_instructions(base, cell_instructions([counted(950_000_000)]))
    assert wider.changed and wider.text().startswith("instructions: +5.91%")
    fewer = compare_instructions(base, cell_instructions([counted(890_000_000)]))
    assert fewer.changed and fewer.ratio < 1


def test_a_launch_whose_steps_spread_widens_what_counts_as_the_same():
    noisy = cell_instructions([counted(1_000_000, (1_000_000, 990_000))])  # 1% between its own steps
    change = compare_instructions(noisy, cell_instructions([counted(1_020_000)]))
    assert change.tolerance == pytest.approx(0.03) and not change.changed


def test_the_functions_that_moved_most_come_first_and_only_where_the_counts_moved():
    reference = {"conv": 100, "relu": 50, "gone": 7}
    current = {"conv": 160, "relu": 45, "new": 20}
    assert most_moved(reference, current, top=3) == (("conv", 100, 160), ("new", 0, 20), ("gone", 7, 0))
    base, wider = cell_instructions([counted(1_000_000)]), cell_instructions([counted(1_100_000)])
    change = compare_instructions(base, wider, (reference, current))
    assert change.moved_lines()[:2] == ["+60 (+60.0%) conv", "+20 (new) new"]
    assert compare_instructions(base, base, (reference, current)).moved == ()  # the same: nothing named


def test_the_summary_says_the_counts_their_cost_or_why_none_were_counted():
    base, wider = cell_instructions([counted(1_000_000)]), cell_instructions([counted(1_100_000)])
    change = compare_instructions(base, wider, ({"conv": 1}, {"conv": 5}))
    section = {"reading": change.text(), "moved": change.moved_lines(),
               "launches": {"reference": {"wall_s": 61.2}, "current": {"wall_s": 70.6}}}
    assert instruction_lines(section) == [
        "instructions: +10.00% (1,100,000 against 1,000,000 a step) (one launch a side under callgrind: 61 s and 71 s)",
        "moved most: +4 (+400.0%) conv"]
    assert instruction_lines({"error": "the reference side cannot count instructions: old"}) == [
        "instructions not counted: the reference side cannot count instructions: old"]
    assert instruction_lines(None) == []


def test_each_launch_under_callgrind_is_logged_with_the_error_that_ended_it(tmp_path):
    """The reference side's launch under callgrind completes, the current side's times out: both are
    in the section's launch log (the A/B's launch log takes them), the failure's first line kept."""
    from pathlib import Path

    from harness.launch.runner import CellRun
    from harness.rank.cell import Cell
    from harness.session.instructions import count_instructions
    from harness.session.rounds import timed_launches

    cell = Cell(framework="ddp", loader="synthetic", model="resnet20", ranks=1)

    def launch(side):
        ok = side == "reference"
        return CellRun(cell=cell, launcher="torchrun", command=[], status="ok" if ok else "timeout",
                       records=[counted(1_000_000)] if ok else [], error=None if ok else "rank 0: silent 1200 s\nmore",
                       wall_s=61.23, log_path=tmp_path / side / "launch.log", token="t", orphans_killed=[])

    section = count_instructions(launch, lambda side: None)
    logged = section["launches"]
    assert section["error"] == ("the current side's launch under callgrind counted no instructions: "
                                "rank 0: silent 1200 s")
    assert logged["reference"] == {"side": "reference", "under": "callgrind", "status": "ok", "wall_s": 61.2,
                                   "log": str(Path(tmp_path / "reference" / "launch.log"))}
    assert logged["current"]["status"] == "timeout" and logged["current"]["error"] == "rank 0: silent 1200 s"
    assert timed_launches(list(logged.values())) == []  # no timed figures are read off them


def test_a_cell_counts_each_thread_kind_summed_over_its_ranks_with_that_sums_spread():
    cell = cell_instructions([by_thread((897_000_000, 897_100_000), (450_000, 540_000)),
                              by_thread((897_200_000, 897_150_000), (690_000, 400_000), rank_id=1)])
    assert cell["per_step"] == 897_100_000 + 540_000 + 897_150_000 + 400_000
    assert cell["kinds"] == {"rank": 1_794_250_000, "communication": 940_000, "transport": 0, "loader": 0, "other": 0}
    assert cell["kind_spreads"]["communication"] == pytest.approx((1_140_000 - 940_000) / 1_140_000)
    assert cell["files"]["0"] == ["callgrind-7.out.2-01", "callgrind-7.out.2-03", "callgrind-7.out.2-04"]
    assert "kinds" not in cell_instructions([counted(1_000_000)])  # an older rank counted its thread only
    assert cell_instructions([counted(1_000_000)])["files"]["0"] == ["callgrind-1.out.2"]


def test_a_change_of_communication_alone_is_named_though_the_total_hardly_moves():
    """Communication three times the reference's is under 0.1% of the total: the total reads the
    same, the communication threads' count moved far beyond its own spread, and the change is one."""
    reference = cell_instructions([by_thread((900_000_000, 900_000_000), (400_000, 440_000))])
    current = cell_instructions([by_thread((900_000_000, 900_000_000), (1_200_000, 1_300_000))])
    change = compare_instructions(reference, current)
    assert not change.total_changed and change.changed
    rank, communication = change.kinds
    assert not rank.changed and communication.changed
    assert communication.tolerance == pytest.approx(3 * (440_000 - 400_000) / 440_000)
    assert change.text() == ("instructions: the same (901,300,000 against 900,440,000 a step, judged threads, "
                             "within 0.10%); "
                             "by thread: rank the same (900,000,000 against 900,000,000, within 0.1%), "
                             "communication +195.5% (1,300,000 against 440,000)")
    assert change.to_json()["kinds"][1] == {"kind": "communication", "reference": 440_000, "current": 1_300_000,
                                            "tolerance": communication.tolerance, "judged": True, "changed": True,
                                            "moved": []}


def test_thread_kinds_within_their_own_spread_are_the_same_and_a_side_without_kinds_compares_totals():
    reference = cell_instructions([by_thread((900_000_000, 900_000_000), (1_000_000, 1_300_000))])
    current = cell_instructions([by_thread((900_000_000, 900_000_000), (1_100_000, 1_000_000))])
    change = compare_instructions(reference, current)
    assert not change.changed and [kind.kind for kind in change.kinds] == ["rank", "communication"]
    older = cell_instructions([counted(900_000_000)])  # a reference whose ranks counted their own thread
    against_older = compare_instructions(older, current)
    assert against_older.kinds == () and "by thread" not in against_older.text()
    assert against_older.current == 900_000_000 and not against_older.changed  # the rank threads compared
    assert compare_instructions(older, cell_instructions([by_thread((909_000_000, 909_000_000), (0, 0))])).changed


def test_the_transport_and_helper_threads_are_shown_and_never_judged():
    """A rank's TCP loop counted 19 thousand to 476 thousand instructions a step in A/As of the same
    cell, its helper threads 0 to 726, and Horovod's thread polling MPI's progress engine 227 to 315
    million: none makes a change, nor moves the total compared, and each is said."""
    reference = cell_instructions([by_thread((900_000_000, 900_000_000), (300_000, 301_000),
                                             transport=(40_000, 41_000), other=(0, 4))])
    current = cell_instructions([by_thread((900_000_000, 900_000_000), (300_500, 300_000),
                                           transport=(476_000, 18_700), other=(0, 1_452))])
    change = compare_instructions(reference, current)
    assert not change.changed
    polling = cell_instructions([by_thread((900_000_000, 900_000_000), (300_000, 300_000),
                                           transport=(227_000_000, 240_000_000))])
    against_polling = compare_instructions(polling, cell_instructions(
        [by_thread((900_000_000, 900_000_000), (300_000, 300_000), transport=(315_000_000, 310_000_000))]))
    assert not against_polling.changed and against_polling.current == against_polling.reference == 900_300_000
    kinds = {kind.kind: kind for kind in change.kinds}
    assert not kinds["transport"].judged and not kinds["transport"].changed and not kinds["other"].changed
    assert ("transport 18,700 against 41,000 (not judged: its count follows when the peers' bytes arrive and how long "
            "the ranks wait for them)" in change.text())


def test_the_functions_of_a_kind_that_moved_on_its_own_are_named_with_the_kind():
    """The rank thread's functions dominate the whole's; a communication change is named by its
    threads' own functions, from the files of that kind's threads."""
    record = by_thread((900_000_000, 900_000_000), (400_000, 440_000))
    record["instructions"]["threads"] = [{"thread": 1, "kind": "rank"}, {"thread": 3, "kind": "transport"},
                                         {"thread": 4, "kind": "communication"}]
    reference = cell_instructions([record])
    assert reference["kind_files"] == {"0": {"rank": ["callgrind-7.out.2-01"], "transport": ["callgrind-7.out.2-03"],
                                             "communication": ["callgrind-7.out.2-04"]}}
    current = cell_instructions([by_thread((900_000_000, 900_000_000), (1_200_000, 1_300_000))])
    gloo = ({"gloo::sum<float>": 236_000, "c10d::ProcessGroupGloo::runLoop(int)": 9_000},
            {"gloo::sum<float>": 236_000, "c10d::ProcessGroupGloo::runLoop(int)": 99_000})
    change = compare_instructions(reference, current, ({"malloc": 10}, {"malloc": 30}),
                                  kind_functions={"communication": gloo, "rank": ({"a": 1}, {"a": 9})})
    assert change.moved_lines() == ["+20 (+200.0%) malloc",
                                    "in the communication threads: +90,000 (+1000.0%) c10d::ProcessGroupGloo::runLoop(int)"]


def test_the_communication_threads_are_the_same_within_their_own_floor_whatever_their_steps_said():
    """Two launches of the same 2-rank DDP cell: the run loops' count 596,371 and 603,834 (+1.3%),
    each launch's steps within 0.24% and 0.39% of each other, which alone would allow 1.2%."""
    reference = cell_instructions([by_thread((897_200_000, 897_100_000), (297_700, 298_400)),
                                   by_thread((897_200_000, 897_200_000), (298_000, 297_971), rank_id=1)])
    current = cell_instructions([by_thread((897_100_000, 897_100_000), (299_308, 306_063)),
                                 by_thread((897_100_000, 897_100_000), (306_880, 297_771), rank_id=1)])
    communication = {kind.kind: kind for kind in compare_instructions(reference, current).kinds}["communication"]
    assert communication.tolerance == 0.05 and not communication.changed
    assert communication.current / communication.reference - 1 == pytest.approx(0.0125, abs=0.001)
