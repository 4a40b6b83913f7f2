"""Failure handling: a rank that crashes, dies or hangs fails its cell quickly, names the rank,
and leaves no process behind."""
import re
import time

import pytest

from harness.launch.procs import processes_with_token
from harness.launch.runner import RunLimits, run_cell
from harness.rank.cell import Cell
from harness.rank.faults import Fault
from harness.rank.spec import RankOptions

from ..workloads import TEST_MODEL, TINY

pytestmark = pytest.mark.launch
CELL = Cell(framework="ddp", loader="synthetic", model=TEST_MODEL, ranks=2)


@pytest.mark.parametrize("launcher", ["srun", "mpirun", "torchrun"], indirect=True)
def test_crashing_rank_fails_the_cell_with_its_error(launcher, tmp_path):
    started = time.monotonic()
    run = run_cell(CELL, TINY, launcher, workdir=tmp_path, options=RankOptions(fault=Fault(rank=1, kind="crash", at_step=2)))
    assert run.status == "failed"
    assert "rank1" in run.error and "injected crash on rank 1 at timed step 2" in run.error
    assert processes_with_token(run.token) == []
    assert time.monotonic() - started < 90


@pytest.mark.parametrize("launcher", ["srun", "torchrun"], indirect=True)
def test_killed_rank_fails_the_cell(launcher, tmp_path):
    run = run_cell(CELL, TINY, launcher, workdir=tmp_path, limits=RunLimits(heartbeat_s=30),
                   options=RankOptions(fault=Fault(rank=0, kind="exit", at_step=2)))
    assert run.status == "failed"
    # rank 1 reports the lost peer, unless its launcher terminates it first (torchrun does so at once)
    assert re.search(r"rank\(s\) 0(, 1)? ended without a record or an error report", run.error), run.error
    assert processes_with_token(run.token) == []


@pytest.mark.parametrize("launcher", ["torchrun"], indirect=True)
def test_hung_rank_is_stopped_by_the_heartbeat(launcher, tmp_path):
    run = run_cell(CELL, TINY, launcher, workdir=tmp_path, limits=RunLimits(heartbeat_s=8),
                   options=RankOptions(fault=Fault(rank=1, kind="hang", at_step=2)))
    assert run.status == "hung"
    assert "no progress from any rank for 8 s" in run.error
    assert processes_with_token(run.token) == []
