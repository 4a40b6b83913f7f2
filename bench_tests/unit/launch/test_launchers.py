import dataclasses
import os
import socket

import pytest

from bench_tests.components import needs
from harness.launch.launchers import LAUNCHERS, LaunchRequest, SrunLauncher, open_mpi_refusal, stopped_munge

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
    command = LAUNCHERS.create("torchrun", slurm_env={}).command(REQUEST)  # outside an allocation
    assert command[:3] == ["/venv/bin/python", "-m", "torch.distributed.run"]
    assert "--nproc-per-node=2" in command and "--master-port=29555" in command and "--max-restarts=0" in command
    assert command[-3:] == ["-m", "harness.rank.worker", "/tmp/spec.json"]


@pytest.mark.parametrize("name", ["srun", "mpirun", "torchrun"])
def test_a_variable_a_reference_unsets_is_taken_from_every_launchers_environment(name):
    """The launcher runs under ``env -u NAME``, and what it lacks its ranks lack: srun passes its
    environment on (--export=ALL), mpirun's local ranks and torchrun's agent inherit it; mpirun's
    ``-x`` never names it, even where the launch environment would."""
    launcher = LAUNCHERS.create(name, environment={"GLOO_SOCKET_IFNAME": "lo"}, unset=("ATEN_CPU_CAPABILITY",),
                                slurm_env={})
    command = launcher.command(REQUEST)
    assert command[:4] == ["env", "-u", "ATEN_CPU_CAPABILITY", "GLOO_SOCKET_IFNAME=lo"]
    assert "ATEN_CPU_CAPABILITY" not in command[4:]
    unset_and_exported = LAUNCHERS.create(name, unset=("MASTER_ADDR",), slurm_env={}).command(REQUEST)
    assert unset_and_exported[:3] == ["env", "-u", "MASTER_ADDR"] and "MASTER_ADDR" not in unset_and_exported[3:]
    assert LAUNCHERS.create(name, environment={"A": "1"}, unset=("A",), slurm_env={}).unset == ()  # set wins


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


@pytest.mark.parametrize("version, refused", [
    ("mpirun (Open MPI) 4.1.6\n\nReport bugs to https://www.open-mpi.org/community/help/", None),
    ("HYDRA build details:\n    Version:                                 4.1.2", "MPICH/Hydra"),
    ("Intel(R) MPI Library for Linux* OS, Version 2021.10 Build 20230619", "Intel MPI"),
])
def test_mpirun_other_than_open_mpi_is_refused_with_the_reason(version, refused):
    reason = open_mpi_refusal(version)
    assert (reason is None) if refused is None else (refused in reason and "--launcher srun" in reason)


def test_the_mpirun_here_is_open_mpi():
    launcher = LAUNCHERS.create("mpirun")
    if launcher.unavailable_reason() and "not found" in launcher.unavailable_reason():
        needs("mpirun", launcher.unavailable_reason())
    assert launcher.unavailable_reason() is None


def test_srun_starts_a_cell_in_the_partition_asked_for_unless_inside_an_allocation():
    outside = SrunLauncher(partition="booster", slurm_env={}, version=(23, 2))
    assert "--partition=booster" in outside.command(REQUEST)
    inside = SrunLauncher(partition="booster", slurm_env={"SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "1",
                                                           "SLURM_NTASKS": "2", "SLURM_JOB_NODELIST": "n1"},
                          version=(23, 2))
    assert not any(part.startswith("--partition") for part in inside.command(REQUEST))


@pytest.mark.parametrize("name", ["srun", "mpirun", "torchrun"])
def test_ranks_of_another_runtime_start_in_its_interpreter(name):
    """TensorFlow's and MXNet's ranks run in their own environment's Python; torchrun itself, which
    needs torch, stays in the harness's and starts them as a program (--no-python)."""
    request = dataclasses.replace(REQUEST, rank_python="/venv-tensorflow/bin/python")
    command = LAUNCHERS.create(name, slurm_env={}).command(request)
    assert command[-4:] == ["/venv-tensorflow/bin/python", "-m", "harness.rank.worker", "/tmp/spec.json"]
    if name == "torchrun":
        assert command[:3] == ["/venv/bin/python", "-m", "torch.distributed.run"]
        assert command[-5] == "--no-python"


def test_parameter_servers_beside_their_workers_may_share_the_cores():
    """A parameter-server cell's servers are processes beyond its training ranks: unbound, they
    share the cores, which srun and mpirun refuse unless told."""
    sharing = dataclasses.replace(REQUEST, ranks=3, share_cores=True)
    assert "--overcommit" in LAUNCHERS.create("srun").command(sharing)
    assert "--oversubscribe" in LAUNCHERS.create("mpirun").command(sharing)
    assert "--overcommit" not in LAUNCHERS.create("srun").command(REQUEST)
    bound = dataclasses.replace(sharing, cores_per_rank=1)  # each process its own core: nothing shared
    assert "--overcommit" not in LAUNCHERS.create("srun").command(bound)


def test_a_munge_socket_no_daemon_answers_is_named_as_every_mpirun_launchs_delay(tmp_path):
    """Open MPI's PMIx tries munge first and backs off where its socket is left behind without a
    daemon: the summary says so, and how to remove it, unless PMIX_MCA_psec already chose."""
    answering, stopped, absent = tmp_path / "answering", tmp_path / "stopped", tmp_path / "absent"
    with socket.socket(socket.AF_UNIX) as daemon, socket.socket(socket.AF_UNIX) as gone:
        daemon.bind(str(answering))
        daemon.listen()
        gone.bind(str(stopped))  # bound, never listening: the file a stopped munged leaves
        delay = stopped_munge({}, [absent, stopped])
        assert delay.startswith(f"munge is installed but no daemon answers at {stopped}: each mpirun launch waits")
        assert "export PMIX_MCA_psec=native" in delay
        assert stopped_munge({"PMIX_MCA_psec": "native"}, [stopped]) is None
        assert stopped_munge({}, [answering, stopped]) is None  # the first socket found is munge's
        assert stopped_munge({}, [absent]) is None
    assert LAUNCHERS.create("mpirun", environment={"PMIX_MCA_psec": "native"}).start_up_delay() is None
    assert LAUNCHERS.create("srun").start_up_delay() is None
