"""Real cells through each real launcher: one process per rank, records from every rank."""
import math
import os
import subprocess
import sys

import pytest

from harness.config.cells import implemented
from harness.launch.launchers import LAUNCHERS, with_harness_importable
from harness.launch.procs import processes_with_token
from harness.launch.runner import run_cell
from harness.rank.cell import Cell
from harness.rank.frameworks import FRAMEWORKS, has_servers, training_ranks
from harness.rank.loaders import LOADERS
from harness.rank.runtime import unavailable
from harness.rank.spec import RankOptions

from ..components import framework_component, needs
from ..workloads import TEST_MODEL, TINY

SOURCES = {"srun": "slurm", "mpirun": "openmpi", "torchrun": "torchrun"}

pytestmark = pytest.mark.launch


def covering(cells: list[tuple], parts) -> set[tuple]:
    """CI's share of ``cells``: each cell whose ``parts(cell)`` names a part no earlier cell covered
    (a framework under a launcher, a loader in a runtime); the others only combine covered parts
    again (ci/test --full). The most ranks come first, so that each part is tested distributed."""
    covered: set = set()
    kept = set()
    for cell in sorted(cells, key=lambda cell: -cell[-1]):
        new = set(parts(cell)) - covered
        if new:
            kept.add(cell)
            covered |= new
    return kept


DDP_CELLS = [(launcher, loader, ranks) for launcher in ("srun", "mpirun", "torchrun")
             for loader in ("synthetic", "native") for ranks in (1, 2)]


DDP_CI = covering(DDP_CELLS, lambda cell: [("launcher", cell[0]), ("loader", cell[1]), ("ranks", cell[2])])


@pytest.mark.parametrize("launcher, loader, ranks",
                         [pytest.param(*cell, marks=() if cell in DDP_CI else pytest.mark.full) for cell in DDP_CELLS],
                         indirect=["launcher"])
def test_ddp_cell_runs_on_every_rank(launcher, loader, ranks, tmp_path, tiny_dataset):
    """Each rank bound to a core of its own, as the suite binds them (--cores-per-rank 1; the
    launcher's own binding, then the rank's). The study's ResNet50 on one rank through srun; the
    other cells test launchers and loaders, on ResNet20."""
    model = "resnet50" if (launcher.name, loader, ranks) == ("srun", "synthetic", 1) else TEST_MODEL
    cell = Cell(framework="ddp", loader=loader, model=model, ranks=ranks)
    run = run_cell(cell, TINY.replace(data_dir=str(tiny_dataset)), launcher, workdir=tmp_path,
                   options=RankOptions(cores_per_rank=1))
    assert run.ok, run.error
    assert sorted(r["rank"] for r in run.records) == list(range(ranks))
    assert len({r["pid"] for r in run.records}) == ranks  # a real process per rank
    cores = [tuple(record["cores"]) for record in run.records]
    assert all(len(own) == 1 for own in cores) and len(set(cores)) == ranks, cores  # disjoint, one each
    assert {record["threads"] for record in run.records} == {1}
    for record in run.records:
        assert record["source"] == SOURCES[launcher.name]
        assert record["world_size"] == ranks
        assert record["images"] == TINY.steps * TINY.batch_size
        assert len(record["step_times"]) == TINY.steps and all(t > 0 for t in record["step_times"])
        assert all(math.isfinite(loss) for loss in record["losses"])
        assert record["node"]["cores"] >= 1 and record["node"]["cpu_id"]  # the rank's own node, for the fingerprint
    if loader == "native":
        assert run.records[0]["loader_settings"]["images"] == 80
    assert processes_with_token(run.token) == []


# Every registered framework with every loader a CPU runs, at 1 and 2 ranks through srun (DDP's
# synthetic and native cells are above, through all three launchers), and each framework's own
# launcher once. A backend added to a registry is tested here without a line changed. A
# parameter-server framework trains on one and two workers beside its server, on the synthetic
# loader (the loaders are the torch frameworks' own, tested above).
FRAMEWORK_CELLS = [
    *[(framework, "srun", loader, ranks)
      for framework in FRAMEWORKS.names()
      for loader in LOADERS.names() if not LOADERS.entry(loader).needs_gpu and implemented(framework, loader, "resnet50")
      and (loader == "synthetic" or not has_servers(framework))
      for ranks in ((2, 3) if has_servers(framework) else (1, 2))
      if framework != "ddp" or loader not in ("synthetic", "native")],
    ("horovod", "horovodrun", "synthetic", 2),
    ("deepspeed", "deepspeed", "synthetic", 2),
    # the other runtimes' ranks through the other launchers too (torchrun runs in torch's interpreter
    # and starts them with --no-python; Horovod, which needs MPI or its own rendezvous, through horovodrun);
    # a parameter-server framework's roles follow the rank any launcher gives, as its runtime's ranks do
    *[(framework, launcher, "synthetic", 2) for framework in FRAMEWORKS.names()
      if FRAMEWORKS.entry(framework).runtime != "torch" and not has_servers(framework)
      for launcher in ("mpirun", "horovodrun" if FRAMEWORKS.entry(framework).uses_mpi else "torchrun")],
]


def framework_cell_parts(cell: tuple) -> list[tuple]:
    framework, launcher, loader, _ = cell
    runtime = FRAMEWORKS.entry(framework).runtime
    # DDP's synthetic and native cells above cover the torch loaders they read
    loader_part = [] if runtime == "torch" and loader in ("synthetic", "native") else [(runtime, loader)]
    return [(framework, launcher), *loader_part]


def ci_and_full(cells: list[tuple]) -> list:
    """The cells above with ResNet50, all for ci/test --full; CI's share (:func:`covering`: each
    framework under each of its launchers, each loader in each runtime) with the test model, whose
    graph TensorFlow traces in a fraction of ResNet50's time (a TensorFlow cell took 60-100 s at two
    ranks here), and each other runtime's ResNet50 once, on its first framework's one-rank synthetic
    cell (torch's is DDP's, above): the model is what that cell tests, its distribution the others."""
    ci = covering(cells, framework_cell_parts)
    model_cells = {next(cell for cell in cells if FRAMEWORKS.entry(cell[0]).runtime == runtime
                        and cell[1:] == ("srun", "synthetic", 1))
                   for runtime in {FRAMEWORKS.entry(cell[0]).runtime for cell in cells} - {"torch"}}
    return ([pytest.param(*cell, "resnet50", marks=() if cell in model_cells else pytest.mark.full) for cell in cells]
            + [pytest.param(*cell, TEST_MODEL) for cell in cells if cell in ci])


@pytest.mark.parametrize("framework, launcher, loader, ranks, model", ci_and_full(FRAMEWORK_CELLS),
                         indirect=["launcher"])
def test_every_framework_and_loader_trains_on_every_rank(framework, launcher, loader, ranks, model, tmp_path,
                                                        tiny_dataset, tiny_tfrecords):
    runtime = FRAMEWORKS.entry(framework).runtime
    needs(framework_component(framework), unavailable(runtime, FRAMEWORKS.entry(framework)))
    if runtime == "torch" and loader.startswith("dali"):
        needs("dali", LOADERS.missing(loader))
    cell = Cell(framework=framework, loader=loader, model=model, ranks=ranks)
    workload = TINY.replace(data_dir=str(tiny_dataset), tfrecord_dir=str(tiny_tfrecords), dali_threads=1)
    run = run_cell(cell, workload, launcher, workdir=tmp_path)
    assert run.ok, run.error
    trained = training_ranks(framework, ranks, workload.ps_servers)
    assert sorted(r["rank"] for r in run.records) == list(range(trained))
    assert sorted(r["rank"] for r in run.server_records) == list(range(trained, ranks))
    for record in run.records:
        assert record["images"] == TINY.steps * TINY.batch_size
        assert all(math.isfinite(loss) for loss in record["losses"])
    versions = {record["versions"].get(runtime) for record in run.records}
    assert len(versions) == 1 and None not in versions, versions  # every rank ran the runtime, and said which
    if loader.startswith("dali"):
        assert run.records[0]["loader_settings"]["reader"] == ("tfrecord" if loader.endswith("tfrecord") else "folder")
    assert processes_with_token(run.token) == []


def test_inside_an_allocation_whether_cells_use_gpus_is_asked_of_a_job_step():
    """``--rank-device auto`` after salloc: the allocation's variables say no GPU, so a one-task probe
    step asks torch on the job's node (here the local cluster's, which has none)."""
    needs("slurm", LAUNCHERS.create("srun").unavailable_reason())
    probe = ("from harness.session.preflight import uses_gpus; from harness.launch.launchers import gpus_a_job_step_sees; "
             "from harness.machine.allocation import from_env; import os; "
             "print(gpus_a_job_step_sees(from_env(os.environ)), uses_gpus('auto'))")
    done = subprocess.run(["salloc", "--quiet", "--ntasks=1", sys.executable, "-c", probe], capture_output=True,
                          text=True, timeout=300, env=with_harness_importable(os.environ))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-2:] == ["0", "False"]
