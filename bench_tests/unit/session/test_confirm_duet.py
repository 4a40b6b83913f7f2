"""``--confirm --duet`` (issue 57): only a duet's launches run on half the node. The session's own
launches, judged against baselines recorded on the whole node, keep the whole node's cores per rank;
and a duet's reference launches, on half the node, are not the baseline environment's figure on it
now, so they can never make a stored move the system's."""
import os
from pathlib import Path

import pytest

from harness.config.options import SuiteError, SuiteOptions
from harness.judging.confirmation import Rebuild
from harness.judging.kinds import PairedKind
from harness.judging.paired import Pair, PairedVerdict
from harness.judging.stats import Estimate
from harness.judging.verdicts import Reference
from harness.machine.references import Environment
from harness.rank.cell import Cell
from harness.session import duet, preflight
from harness.session.paired import PairedResult, confirmed_by


@pytest.fixture
def node(monkeypatch):
    """A node of the given CPUs outside any Slurm job, halved for the duet in their order."""
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.delenv("SLURM_JOBID", raising=False)

    def of(cpus: int) -> None:
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cpus)))
        monkeypatch.setattr(duet, "plan", lambda uses_gpus, gpus=0: duet.DuetPlan(
            cores=(tuple(range(cpus // 2)), tuple(range(cpus // 2, cpus)))))
    return of


@pytest.mark.parametrize("cpus, gpus", [(2, "1"), (4, "1,2")])
def test_a_confirm_duet_session_launches_its_cells_on_the_whole_node_and_its_duets_on_half(
        node, tmp_path, monkeypatch, cpus, gpus):
    """This 2-core VM's one-rank cells: 2 cores per rank for the cell's own launches, judged against a
    baseline recorded with 2; 1 for each side of a duet. A duet's launches keep to their half."""
    from harness.session import launching, suite as suite_module

    node(cpus)
    suite = suite_module.Suite(SuiteOptions(
        launcher="torchrun", confirm=True, duet=True, device="cpu", gpus=gpus, frameworks="ddp",
        loaders="synthetic", workdir=tmp_path / "cells", baselines_dir=tmp_path, history_dir=None))
    ready = suite.prepare()
    assert (ready.cores_per_rank, ready.duet_cores_per_rank) == (2, 1)
    assert suite.launching.rank_options().cores_per_rank == 2
    assert suite.launching.pair_rank_options().cores_per_rank == 2

    largest = suite.cells()[-1]
    assert suite.launching.cannot_duet(largest, ready.current_environment) is None  # its ranks at 1 core fit a half
    launched = []
    monkeypatch.setattr(launching, "run_cells_together", lambda launches, limits: launched.extend(launches) or
                        [None] * len(launches))
    sides = {side: (ready.launcher, ready.current_environment) for side in ("reference", "current")}
    suite.launching.duet_launches(largest, sides, None, None)({"reference": 1, "current": 0})
    assert [(launch.options.cores_per_rank, launch.options.core_set) for launch in launched] == [
        (1, ready.duet.core_set(1)), (1, ready.duet.core_set(0))]


def test_cores_per_rank_asked_beyond_a_duets_half_names_the_half(node):
    node(4)
    options = SuiteOptions(device="cpu", gpus="1,2", frameworks="ddp", loaders="synthetic", cores_per_rank=2)
    assert preflight.cores_per_rank(options, (1, 2), gpus=False) == 2
    with pytest.raises(SuiteError) as error:
        preflight.cores_per_rank(options, (1, 2), gpus=False, halves=True)
    assert str(error.value) == ("--cores-per-rank 2: the largest cell puts 2 rank(s) on each half of a node for "
                                "--duet, 2 of its 4 core(s), which holds at most 1 per rank")


CELL = Cell(framework="ddp", loader="synthetic", model="resnet44", ranks=1)
REFERENCE = Environment(label="reference: git aaaaaaaaaa", source=Path("."), launch_environment={}, commit="a" * 40)
BAND = Reference(value=100.0, lower=-0.1, upper=0.1, unit="img/s")
STORED = Estimate(value=0.60, low=0.59, high=0.61)  # the cell ran at 60% of its stored figure
EXACT = Rebuild(commit="a" * 40, parts=("pkg:numpy==2.4.6",))
HALF_NODE = [60.0, 61.0, 59.0, 60.5, 59.5, 60.0, 61.5, 58.5]
"""The reference side's duet launches: on half the node, at 60% of the stored figure."""


def duet_pairs(current: list[float], kind: PairedKind) -> PairedResult:
    ratios = sorted(c / r for r, c in zip(HALF_NODE, current))
    verdict = PairedVerdict(kind=kind, ratio=Estimate(value=ratios[len(ratios) // 2], low=ratios[1], high=ratios[-2]),
                            p_value=0.008, pairs=len(ratios), min_effect=0.03)
    launch_log = [{"side": side, "pair": index, "status": "ok", "throughput_as_stored": figure, "wall_s": 4.0,
                   "window_s": 0.5}
                  for index, (r, c) in enumerate(zip(HALF_NODE, current)) for side, figure in (("reference", r),
                                                                                             ("current", c))]
    return PairedResult(cell=CELL, reference=REFERENCE, duet=True, verdict=verdict, launch_log=launch_log,
                        pairs=[Pair(order="current-first", reference=r, current=c) for r, c in zip(HALF_NODE, current)])


def test_a_duets_half_node_reference_launches_cannot_make_a_stored_move_the_systems():
    """Back to back, these reference launches at 60% of the stored figure would reproduce the move
    (bench_tests/unit/session/test_confirmed_by.py); in a duet they ran on half the node, and a figure
    stored from the whole node's is not theirs to reproduce."""
    confirmation = confirmed_by(duet_pairs([f * 1.002 for f in HALF_NODE], PairedKind.SAME), EXACT,
                                stored=STORED, band=BAND)
    assert confirmation.cause == "unknown"
    assert confirmation.message.startswith("unknown: both environments run the same on this node now (A/B same: ")
    assert ("but the baseline's own environment's figure on it was not measured: the duet's launches ran on half "
            "the node, and half-node launches cannot reproduce a stored figure measured on the whole node; run "
            "--confirm without --duet to tell the system from the software") in confirmation.message
    split = confirmation.to_json()["split"]
    assert split["baseline_environment_now"] is None and split["baseline_environment_now_verdict"] is None
    assert split["software"]["value"] == pytest.approx(1.002)


def test_a_duet_that_regressed_is_still_the_softwares():
    confirmation = confirmed_by(duet_pairs([f * 0.8 for f in HALF_NODE], PairedKind.REGRESSED), EXACT,
                                stored=STORED, band=BAND)
    assert confirmation.cause == "software"
    assert confirmation.message.startswith("software: the current environment is slower than the baseline's")
