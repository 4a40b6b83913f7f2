"""Host instructions under valgrind's callgrind (``--count-instructions``): a real launch whose rank
executes itself under callgrind and counts two steps alike, and an A/B whose sides run other oneDNN
kernels (the same FLOPs) told apart by their instructions, with the functions that moved named."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.judging.instructions import SAME_WITHIN
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


def test_a_rank_under_callgrind_counts_its_steps_alike_on_one_thread(torchrun, tmp_path):
    cell = Cell(framework="ddp", loader="synthetic", model=TEST_MODEL, ranks=1)
    run = run_cell(cell, instruction_workload(TINY), torchrun, workdir=tmp_path,
                   limits=instruction_limits(RunLimits()),
                   options=RankOptions(count_instructions=True, yardstick=False, compute_probe=False))
    assert run.ok, run.error
    record, = run.records
    counted = record["instructions"]
    assert len(counted["steps"]) == INSTRUCTION_STEPS and counted["per_step"] == counted["steps"][-1]
    # a ResNet20 step at batch 8 is hundreds of millions of instructions, its two steps within 0.1%
    assert counted["per_step"] > 10 ** 8
    assert abs(counted["steps"][0] - counted["steps"][1]) < SAME_WITHIN * counted["per_step"], counted
    assert record["threads"] == 1 and counted["threads"] == 1 and counted["hash_seed"] == "0"
    assert all((run.log_path.parent / name).is_file() for name in counted["files"])
    assert "instructions" in record["work"]["not_counted"]["flops"]  # the work's counting would be counted


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
    assert any("dnnl" in line or "oneDNN" in line for line in counted["moved"]), counted["moved"]
    assert cell["work"]["change"]["moved"] == [] or all(moved["part"] != "flops" for moved in cell["work"]["change"]["moved"])
    assert f"{cell['cell']}: instructions: " in output and "moved most: " in output, output[-3000:]
