"""Host instructions under valgrind's callgrind (``--count-instructions``): an A/B whose sides run
other oneDNN kernels (the same FLOPs), each side's rank under callgrind counting its two steps alike,
told apart by their instructions, with the functions that moved named (one session for both: a
launch under callgrind takes a minute here); and a 2-rank DDP launch whose gloo threads' instructions
are counted as communication, and move where only its gradient buckets do."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.judging.instructions import SAME_WITHIN, cell_instructions, compare_instructions
from harness.launch.launchers import LAUNCHERS
from harness.launch.runner import RunLimits, run_cell
from harness.rank.cell import Cell
from harness.rank.instructions import INSTRUCTION_STEPS, missing_tools
from harness.rank.spec import RankOptions
from harness.session.instructions import instruction_limits, instruction_workload

from ..components import needs
from ..workloads import SCALING_TEST, TEST_MODEL, TINY, TINY_FLAGS

pytestmark = pytest.mark.launch
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def torchrun():
    needs("callgrind", missing_tools())
    launcher = LAUNCHERS.create("torchrun")
    needs("torchrun", launcher.unavailable_reason())
    return launcher


def test_an_ab_tells_other_kernels_apart_by_their_instructions_though_their_work_is_the_same(torchrun, tmp_path):
    """The reference's ranks run oneDNN's SSE4.1 kernels, the current side's its AVX ones: the same
    operators and FLOPs, other instructions, and the kernels' functions named among those that moved."""
    shutil.copy(SCALING_TEST, tmp_path / "test_scaling.py")
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-m", "scaling", "test_scaling.py",
               "--system", "cgsys", "--baselines-dir", str(tmp_path / "baselines"), "--no-history",
               "--launcher", "torchrun", "--frameworks", "ddp", "--loaders", "synthetic", "--models", TEST_MODEL,
               "--gpus", "1", *TINY_FLAGS, "--against", "env:ONEDNN_MAX_CPU_ISA=SSE41", "--count-instructions",
               "--pairs", "6", "--max-pairs", "6", "--results-json", "r.json"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1500)
    output = done.stdout + done.stderr
    assert done.returncode in (0, 1), output[-3000:]
    cell, = json.loads((tmp_path / "r.json").read_text())["paired_cells"]
    counted = cell["instructions"]
    assert "error" not in counted, counted
    assert counted["change"]["changed"] and counted["change"]["reference"] != counted["change"]["current"]
    print("moved most:", *counted["moved"], sep="\n  ")
    assert any("dnnl" in line for line in counted["moved"]), counted["moved"]  # a oneDNN symbol, not our JIT label
    under = [entry for entry in cell["launch_log"] if entry.get("under") == "callgrind"]
    assert [entry["side"] for entry in under] == ["reference", "current"] and cell["launches"] == len(cell["launch_log"])
    assert cell["work"]["change"]["moved"] == [] or all(moved["part"] != "flops" for moved in cell["work"]["change"]["moved"])
    assert f"{cell['cell']}: instructions: " in output and "moved most: " in output, output[-3000:]
    for side in ("reference", "current"):  # each side's one launch under callgrind, as its rank recorded it
        launch = Path(counted["sides"][side]["output_dir"])
        record = json.loads((launch / "record-rank0.json").read_text())
        steps = record["instructions"]["steps"]
        assert len(steps) == INSTRUCTION_STEPS and record["instructions"]["per_step"] == steps[-1] > 10 ** 8
        assert abs(steps[0] - steps[1]) < SAME_WITHIN * steps[-1], steps  # a step's count is nearly exact
        assert record["threads"] == 1 and record["instructions"]["hash_seed"] == "0"
        assert record["instructions"]["kinds"]["rank"][-1] > 10 ** 8
        assert all((launch / name).is_file() for name in record["instructions"]["files"])
        assert "instructions" in record["work"]["not_counted"]["flops"]  # the work's counting would be counted


def launched_under_callgrind(launcher, workdir: Path, framework: str = "ddp", **framework_options) -> list[dict]:
    """The records of one launch of the 2-rank cell of ``framework`` with its ranks under callgrind."""
    cell = Cell(framework=framework, loader="synthetic", model=TEST_MODEL, ranks=2)
    options = RankOptions(count_instructions=True, count_work=False, yardstick=False, compute_probe=False,
                          framework_options=framework_options)
    run = run_cell(cell, instruction_workload(TINY), launcher, workdir=workdir, options=options,
                   limits=instruction_limits(RunLimits()))
    assert run.ok, run.error
    return run.records


def test_two_ddp_ranks_count_their_gloo_threads_as_communication_which_moves_with_the_buckets(torchrun, tmp_path):
    """Each rank's gloo threads (its run loops, communication; its TCP loop, transport) are counted
    beside the rank's own thread; DDP's gradient in buckets of 0.05 MB instead of its default 25 (2
    all-reduces a step become 22) doubles the run loops' count (599 thousand instructions a step
    against 1.2 million, within 1.3% across A/As), which names the change though the total moves by
    less than 0.1%."""
    records = launched_under_callgrind(torchrun, tmp_path / "default")
    for record in records:
        counted = record["instructions"]
        names = {thread["kind"]: set() for thread in counted["threads"]}
        for thread in counted["threads"]:
            names[thread["kind"]].add(thread["name"])
        assert names["communication"] == {"pt_gloo_runloop"} and names["transport"] == {"gloo_tcp_loop"}, names
        assert all(count > 100_000 for count in counted["kinds"]["communication"]), counted["kinds"]
        assert counted["steps"] == [sum(counted["kinds"][kind][step] for kind in counted["kinds"])
                                    for step in range(INSTRUCTION_STEPS)]
        assert counted["per_step"] > counted["kinds"]["rank"][-1] > 10 ** 8
    default = cell_instructions(records)
    small = cell_instructions(launched_under_callgrind(torchrun, tmp_path / "small", bucket_cap_mb=0.05))
    change = compare_instructions(default, small)
    print(change.text())
    by_kind = {kind.kind: kind for kind in change.kinds}
    assert by_kind["communication"].changed
    assert small["kinds"]["communication"] > 1.5 * default["kinds"]["communication"]
    assert change.changed and not by_kind["rank"].changed


def test_two_tensorflow_ranks_count_their_runtimes_pools_as_the_rank(tmp_path):
    """TensorFlow runs a step's operations on its own pool (``tf_Compute``), not on the rank's
    thread, which only dispatches them (14.5 million instructions a step against the pool's 697
    million), and the ring all-reduce's reductions on its collective executor's threads or on that
    pool, whichever is free: the rank's kind holds them all, steady from step to step though the
    executor's own threads counted 1.62 million in one step and 0.22 million in the next."""
    from harness.rank.frameworks import FRAMEWORKS
    from harness.rank.runtime import unavailable

    from ..components import framework_component

    needs("callgrind", missing_tools())
    needs(framework_component("tensorflow"), unavailable("tensorflow", FRAMEWORKS.entry("tensorflow")))
    launcher = LAUNCHERS.create("mpirun")
    needs("mpirun", launcher.unavailable_reason())
    for record in launched_under_callgrind(launcher, tmp_path, "tensorflow"):
        counted = record["instructions"]
        kinds = {thread["name"]: thread["kind"] for thread in counted["threads"] if thread["name"]}
        assert kinds["tf_Compute"] == "rank" and kinds["collective_ops"] == "rank", kinds
        assert kinds.get("event_engine", "transport") == "transport"
        rank = counted["kinds"]["rank"]
        assert rank[-1] > 0.99 * counted["per_step"] > 5 * 10 ** 8  # the pools' compute in it
        assert abs(rank[0] / rank[1] - 1) < 0.005, rank  # the reductions' threads change, their sum does not
