"""``--against env:NAME`` through each real launcher, with NAME exported in the session's own
environment (as a shell would): the current side's ranks get it, and say so in their records; the
reference's ranks are started without it. The session is the suite's own, in this process: its
options, its reference, its launches (Suite.launch_in), two ranks a launch."""
import pytest

from harness.config.options import SuiteOptions
from harness.launch.launchers import LAUNCHERS
from harness.rank.cell import Cell
from harness.session.suite import Suite

from ..components import LAUNCHER_COMPONENTS, needs
from ..workloads import TEST_MODEL, TINY

pytestmark = pytest.mark.launch
NAME = "DLSCALE_AGAINST_UNSET_CHECK"
CELL = Cell(framework="ddp", loader="synthetic", model=TEST_MODEL, ranks=2)


@pytest.mark.parametrize("launcher", ["srun", "mpirun", "torchrun"])
def test_an_exported_variable_the_reference_unsets_reaches_only_the_current_sides_ranks(launcher, tmp_path,
                                                                                        monkeypatch):
    needs(LAUNCHER_COMPONENTS[launcher], LAUNCHERS.create(launcher).unavailable_reason())
    monkeypatch.setenv(NAME, "exported")
    suite = Suite(SuiteOptions(
        launcher=launcher, against=(f"env:{NAME}",), device="cpu", frameworks="ddp", loaders="synthetic",
        models=TEST_MODEL, gpus=str(CELL.ranks), system="envsys", baselines_dir=tmp_path / "baselines",
        workdir=tmp_path / "cells", history_dir=None, image_size=TINY.image_size, batch_size=TINY.batch_size,
        steps=TINY.steps, warmup_steps=TINY.warmup_steps, num_workers=TINY.num_workers))
    ready = suite.prepare()
    assert ready.reference.difference["launch_environment"] == {NAME: [None, "exported"]}
    seen = {}
    for side, environment, side_launcher in (("reference", ready.reference.environment, ready.reference.launcher),
                                             ("current", ready.current_environment, ready.launcher)):
        run = suite.launch_in(CELL, environment, side, launcher=side_launcher)
        assert run.ok, run.error
        seen[side] = sorted((record["rank"], record["launch_environment"][NAME]) for record in run.records)
    assert seen == {"reference": [(0, None), (1, None)], "current": [(0, "exported"), (1, "exported")]}
