import os

import pytest

from harness.launch.launchers import LAUNCHERS, LaunchRequest

REQUEST = LaunchRequest(ranks=2, module="harness.rank.worker", args=("/tmp/spec.json",), job_name="dlscale-x",
                        master_port=29555, master_addr="127.0.0.1", python="/venv/bin/python")


def test_srun_starts_one_task_per_rank_and_kills_the_step_when_one_fails():
    command = LAUNCHERS.create("srun").command(REQUEST)
    assert command[0] == "srun"
    assert "--ntasks=2" in command and "--kill-on-bad-exit=1" in command and "--job-name=dlscale-x" in command
    assert command[-4:] == ["/venv/bin/python", "-m", "harness.rank.worker", "/tmp/spec.json"]


def test_mpirun_exports_the_rendezvous_and_token_variables():
    command = LAUNCHERS.create("mpirun").command(REQUEST)
    assert command[:3] == ["mpirun", "-np", "2"]
    exported = {command[i + 1] for i, token in enumerate(command) if token == "-x"}
    assert {"MASTER_ADDR", "MASTER_PORT", "DLSCALE_RUN_TOKEN"} <= exported
    assert ("--allow-run-as-root" in command) == (os.geteuid() == 0)
    assert command[-4:] == ["/venv/bin/python", "-m", "harness.rank.worker", "/tmp/spec.json"]


def test_torchrun_runs_the_worker_module_with_a_static_rendezvous():
    command = LAUNCHERS.create("torchrun").command(REQUEST)
    assert command[:3] == ["/venv/bin/python", "-m", "torch.distributed.run"]
    assert "--nproc-per-node=2" in command and "--master-port=29555" in command and "--max-restarts=0" in command
    assert command[-3:] == ["-m", "harness.rank.worker", "/tmp/spec.json"]


def test_unknown_launcher_lists_the_valid_names():
    with pytest.raises(ValueError, match="unknown launcher 'aprun'; valid names: srun, mpirun, torchrun, horovodrun"):
        LAUNCHERS.create("aprun")


def test_horovodrun_uses_its_gloo_controller_on_one_host():
    command = LAUNCHERS.create("horovodrun").command(REQUEST)
    assert command[0].endswith("horovodrun") and command[1:6] == ["--gloo", "-np", "2", "-H", "localhost:2"]
    assert command[-4:] == ["/venv/bin/python", "-m", "harness.rank.worker", "/tmp/spec.json"]


def test_deepspeed_launcher_runs_the_module_without_a_local_rank_argument():
    command = LAUNCHERS.create("deepspeed").command(REQUEST)
    assert "--num_gpus=2" in command and "--no_local_rank" in command and "--master_port=29555" in command
    assert command[-3:] == ["--module", "harness.rank.worker", "/tmp/spec.json"]


def test_the_other_nodes_are_swept_only_from_an_allocation_that_reaches_beyond_this_node(monkeypatch):
    import dataclasses
    import socket

    from harness.launch import launchers

    def ran(*args, **kwargs):
        raise AssertionError(f"no sweep step expected, got {args}")

    monkeypatch.setattr(launchers.subprocess, "run", ran)
    request = dataclasses.replace(REQUEST, token="t0k3n")
    for name in ("SLURM_JOB_ID", "SLURM_JOBID"):
        monkeypatch.delenv(name, raising=False)
    assert launchers.sweep_allocation_nodes(request, launchers.allocation.from_env(os.environ)) == {}  # outside
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "1")
    monkeypatch.setenv("SLURM_JOB_NODELIST", socket.gethostname())
    alone = launchers.allocation.from_env(os.environ)
    assert alone is not None and launchers.sweep_allocation_nodes(request, alone) == {}  # this node alone
