"""The suite's checks of its options before any cell starts (harness.session.suite)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from harness.config.cells import DatasetShape, parse_ranks
from harness.config.options import SuiteError, SuiteOptions, check_settings
from harness.data.dataset import validate_image_folder
from harness.rank.cell import Cell
from harness.session import preflight
from harness.session.preflight import unwritable


@pytest.mark.parametrize("option, value, message", [
    ("repeat", 0, "--cell-repeats must be at least 1, got 0"),
    ("steps", 0, "--steps must be at least 1, got 0"),
    ("warmup_steps", -1, "--warmup-steps must be at least 0, got -1"),
    ("measure_budget", float("nan"), "--measure-budget must be at least 0, got nan"),
    ("precision", 0.0, "--precision must be greater than 0, got 0.0"),
    ("hang_timeout", -5.0, "--hang-timeout must be greater than 0, got -5.0"),
    ("profile", "huge", "--workload-profile: unknown profile 'huge'; valid names: auto, study, cpu-small, cpu-cifar"),
    ("device", "gpu", "--rank-device: unknown device 'gpu'; valid names: auto, cpu, cuda"),
])
def test_a_setting_no_cell_can_run_with_is_named(option, value, message):
    with pytest.raises(SuiteError) as error:
        check_settings(SuiteOptions(**{option: value}))
    assert str(error.value) == message


def test_the_defaults_and_the_smallest_settings_pass():
    check_settings(SuiteOptions())
    check_settings(SuiteOptions(steps=1, warmup_steps=0, num_workers=0, repeat=1, measure_budget=0, precision=1e-6))


def test_a_directory_to_be_made_under_a_file_is_unwritable(tmp_path):
    (tmp_path / "file").write_text("x")
    assert unwritable(tmp_path / "file" / "deeper" / "dir") == f"{tmp_path / 'file'} is not a directory"
    assert unwritable(tmp_path / "new" / "dir") is None
    assert unwritable(tmp_path) is None


def test_a_relative_directory_is_checked_from_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "file").write_text("x")
    assert unwritable(os.path.join("file", "results")) == f"{tmp_path / 'file'} is not a directory"
    assert unwritable("results") is None


@pytest.mark.parametrize("gpus, asked, expected", [
    ("1,2", None, 2),   # 4 cores, at most 2 ranks on the node: 2 each, in every cell
    ("1,2,4", None, 1),
    ("1,2", 1, 1),
    ("8", None, None),  # more ranks than cores: they share, unbound
])
def test_cpu_ranks_own_the_same_cores_in_every_cell(monkeypatch, gpus, asked, expected):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.delenv("SLURM_JOBID", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    options = SuiteOptions(device="cpu", gpus=gpus, frameworks="ddp", loaders="synthetic", cores_per_rank=asked)
    assert preflight.cores_per_rank(options, parse_ranks(gpus), gpus=False) == expected


def test_more_cores_per_rank_than_the_node_holds_is_an_error(monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.delenv("SLURM_JOBID", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    options = SuiteOptions(device="cpu", gpus="1,2", frameworks="ddp", loaders="synthetic", cores_per_rank=3)
    with pytest.raises(SuiteError, match=r"--cores-per-rank 3: the largest cell puts 2 rank\(s\) on a node of 4 "
                                         r"core\(s\), which holds at most 2 per rank"):
        preflight.cores_per_rank(options, (1, 2), gpus=False)


ALLOCATION = {"SLURM_JOB_ID": "118", "SLURM_JOB_NUM_NODES": "1", "SLURM_NTASKS": "2", "SLURM_JOB_NODELIST": "vm"}


@pytest.mark.parametrize("device, env, step_sees, gpus", [
    ("cpu", dict(ALLOCATION, SLURM_GPUS_ON_NODE="4"), None, False),   # said outright
    ("cuda", {}, None, True),
    ("auto", dict(ALLOCATION, SLURM_GPUS_ON_NODE="4"), None, True),   # the allocation's variables say
    ("auto", ALLOCATION, 0, False),                                   # they do not: the probe step answers
    ("auto", ALLOCATION, 8, True),
])
def test_whether_cells_use_gpus_is_decided_where_the_ranks_run(monkeypatch, device, env, step_sees, gpus):
    from harness.session import preflight

    def probe(job):
        assert step_sees is not None, "no probe step expected"
        return step_sees

    monkeypatch.setattr(preflight, "gpus_a_job_step_sees", probe)
    assert preflight.uses_gpus(device, env) is gpus


def test_outside_an_allocation_torch_is_asked_only_where_the_kernel_shows_a_gpu():
    """A session on a machine without GPU device files decides --rank-device auto without importing torch
    (a usage error then takes a second, not five); where one exists, torch's answer counts."""
    ask = ("import sys; from harness.session.preflight import machine_may_have_gpus, uses_gpus; "
           "print(uses_gpus('auto', {}), 'torch' in sys.modules, machine_may_have_gpus())")
    done = subprocess.run([sys.executable, "-c", ask], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(Path(preflight.__file__).parents[2])))
    gpus, imported, may = done.stdout.split()
    assert imported == may, done.stdout  # torch imported exactly where the kernel shows a GPU
    torch_says = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
                                capture_output=True, text=True, timeout=120).stdout.strip()
    assert gpus == torch_says


def test_an_allocation_that_cannot_be_asked_about_gpus_is_a_usage_error(monkeypatch):
    from harness.session import preflight

    def probe(job):
        raise RuntimeError("the probe step failed: srun: error: Unable to create step")

    monkeypatch.setattr(preflight, "gpus_a_job_step_sees", probe)
    with pytest.raises(SuiteError, match=r"allocation 118 has GPUs could not be asked \(the probe step failed: "
                                         r"srun: error: Unable to create step\); say it with --rank-device cpu"):
        preflight.uses_gpus("auto", ALLOCATION)


def test_gpus_only_a_probe_step_saw_count_for_the_capacity_and_the_layout(monkeypatch):
    from harness.machine import allocation
    from harness.machine.system import rank_capacity
    from harness.session import preflight

    for name, value in ALLOCATION.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv(allocation.GPU_OVERRIDE, raising=False)
    monkeypatch.setattr(preflight, "gpus_a_job_step_sees", lambda job: 4)
    assert preflight.uses_gpus("auto") is True
    capacity, words = rank_capacity(True)
    assert capacity == 2 and f"4 GPU(s) per node from {allocation.GPU_OVERRIDE}=4" in words  # 2 tasks bound it


def test_a_named_profile_brings_its_models_and_the_options_override_them():
    assert preflight.matrix_of(SuiteOptions(profile="cpu-cifar")).models == ("resnet44",)
    assert preflight.matrix_of(SuiteOptions(profile="cpu-cifar", models="resnet50")).models == ("resnet50",)
    assert preflight.matrix_of(SuiteOptions()).models == ("resnet50",)


def test_each_profile_generates_its_own_dataset_beside_the_others(tmp_path, monkeypatch):
    monkeypatch.setattr(preflight, "DATA_CACHE", tmp_path)
    shape = DatasetShape(name="tiny-cifar", classes=3, per_class=2, size=32)
    folder, tfrecord = preflight.prepare_data(SuiteOptions(), {"native", "dali-cpu-tfrecord"}, shape)
    assert (folder, tfrecord) == (tmp_path / "tiny-cifar", tmp_path / "tiny-cifar-tfrecord")
    assert validate_image_folder(folder) == {"classes": 3, "images": 6}
    with Image.open(next(folder.glob("*/*.jpg"))) as image:
        assert image.size == (32, 32)


def test_a_parameter_server_cell_needs_a_worker_and_counts_only_its_workers_against_the_capacity():
    def reason(ranks: int, servers: int = 1, capacity: int = 2) -> str | None:
        cell = Cell(framework="torch_ps_async", loader="synthetic", model="resnet50", ranks=ranks)
        return preflight.skip_reason(cell, False, capacity, "this machine offers 2 CPU core(s)", ps_servers=servers)

    assert "1 rank(s) leave no worker beside 1 parameter server(s)" in reason(1)
    assert "2 rank(s) leave no worker beside 2" in reason(2, servers=2)
    assert reason(2) is None and reason(3) is None  # 3 ranks: 2 workers on 2 cores, the server shares them
    assert "needs 3 training ranks" in reason(4)


def test_a_rank_count_fits_where_one_of_its_cells_fits():
    options = SuiteOptions(device="cpu", gpus="1,2,3", frameworks="ddp,torch_ps_sync", loaders="synthetic")
    ddp, ps = ([Cell(framework=f, loader="synthetic", model="resnet50", ranks=r) for r in (1, 2, 3)]
               for f in ("ddp", "torch_ps_sync"))
    # 3 ranks: DDP's 3 training ranks do not fit 2 cores, the parameter server's 2 workers do
    preflight.check_rank_counts(options, ddp + ps, 1, 2, "2 cores")
    with pytest.raises(SuiteError, match="--gpus 1,2,3: 3 ranks asked for, but 2 cores"):
        preflight.check_rank_counts(options, ddp, 1, 2, "2 cores")
    assert preflight.processes(ddp + ps, 1, 2) == [1, 2, 1, 2, 3]
    assert preflight.reference_cell(ps[2], (1, 2, 3), 1) == ps[1]  # a parameter server's 1 rank trains nothing
    assert preflight.reference_cell(ddp[2], (1, 2, 3), 1) == ddp[0]


def test_against_env_name_names_the_shells_value_for_the_current_side_and_unsets_it_for_the_reference(
        monkeypatch):
    """A variable the shell exports and ``--against env:NAME`` takes away: the current side's launch
    environment carries it (so mpirun forwards it and the records and the difference name it), the
    reference's launcher starts its ranks without it."""
    from harness.machine import references
    from harness.session.suite import Suite

    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")
    monkeypatch.delenv("DLSCALE_ENV_FILE", raising=False)
    suite = Suite(SuiteOptions(launcher="torchrun", against=("env:ATEN_CPU_CAPABILITY",), launch_env=("A=1",)))
    assert suite.launch_environment == {"A": "1", "ATEN_CPU_CAPABILITY": "default"}
    reference = suite.preparation._reference(references.current(suite.launch_environment))
    assert reference.launcher.environment == {"A": "1"} and reference.launcher.unset == ("ATEN_CPU_CAPABILITY",)
    assert reference.difference["launch_environment"] == {"ATEN_CPU_CAPABILITY": [None, "default"]}
    assert Suite(SuiteOptions(launcher="torchrun", launch_env=("A=1",))).launch_environment == {"A": "1"}


def test_a_duet_is_refused_with_the_srun_launcher_before_any_launch():
    """Two srun job steps at once without --overlap each take the node's CPUs (the second waits, the
    first dies at the gate), Slurm's GPU binding overrides each half's CUDA_VISIBLE_DEVICES, and the
    core halves would be the harness process's, not the compute node's."""
    duet = SuiteOptions(duet=True, against=("env:A=1",))
    with pytest.raises(SuiteError) as error:
        preflight.check_duet(duet, "srun")
    assert str(error.value) == (
        "--duet cannot run with the srun launcher: two job steps at once without --overlap each take the node's "
        "CPUs, Slurm's GPU binding overrides each half's CUDA_VISIBLE_DEVICES, and the core halves come from this "
        "process's affinity, not the compute node's; measure the pairs back to back (without --duet)")
    preflight.check_duet(duet, "torchrun")
    preflight.check_duet(SuiteOptions(against=("env:A=1",)), "srun")


def test_a_session_refuses_the_duet_with_srun_first_of_all(tmp_path):
    from harness.session.suite import Suite

    suite = Suite(SuiteOptions(launcher="srun", duet=True, against=("env:A=1",), device="cpu", frameworks="ddp",
                               loaders="synthetic", workdir=tmp_path / "cells", baselines_dir=tmp_path,
                               history_dir=None))
    with pytest.raises(SuiteError, match="^--duet cannot run with the srun launcher: "):
        suite.prepare()
    assert suite.prepared is None and not (tmp_path / "cells").exists()



def older_reference(tmp_path, *lacking):
    """A reference whose harness's worker does not know the rank options ``lacking``: this
    checkout's spec.py without their fields."""
    from harness.machine.references import Environment
    from harness.rank import spec

    older = tmp_path / "older"
    (older / "harness" / "rank").mkdir(parents=True)
    source = Path(spec.__file__).read_text()
    for option in lacking:
        assert option in source
        source = source.replace(option, "")
    (older / "harness" / "rank" / "spec.py").write_text(source)
    return Environment(label="reference: git 1a2b3c4d5e (HEAD~30)", source=older, launch_environment={},
                       commit="1a2b3c4d5e")


def test_a_reference_whose_worker_lacks_an_option_the_pairs_set_is_refused_with_its_name(tmp_path):
    """An older commit's worker that does not know "skip the probe" would run the probe on its side
    only."""
    import dataclasses

    from harness.rank.spec import RankOptions

    reference = older_reference(tmp_path, "    compute_probe: bool = True\n")
    pairs = RankOptions(device="cpu", cores_per_rank=1, yardstick=False, compute_probe=False)
    assert preflight.worker_cannot_pair(reference, pairs) == (
        "the reference: git 1a2b3c4d5e (HEAD~30)'s harness predates the rank option(s) compute_probe that both "
        "sides of each pair run with: its ranks would run without them, unlike the current side's; compare against "
        "a commit that has them")
    assert preflight.worker_cannot_pair(reference, dataclasses.replace(pairs, compute_probe=True)) is None
    current = dataclasses.replace(reference, label="current", source=Path(preflight.__file__).parents[2])
    assert preflight.worker_cannot_pair(current, pairs) is None


def test_a_reference_whose_worker_does_not_count_work_is_compared_without(tmp_path):
    """Counting the work happens after the window; the A/B says the reference counted none."""
    from harness.rank.spec import RankOptions

    reference = older_reference(tmp_path, "    count_work: bool = True\n")
    assert preflight.worker_cannot_pair(reference, RankOptions(compute_probe=False, count_work=False)) is None
