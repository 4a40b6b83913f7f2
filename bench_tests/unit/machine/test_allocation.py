"""Allocation awareness from fake SLURM_* environments: rank capacity, skip reasons, srun job steps,
and the launch environment."""
import dataclasses
import re

import pytest

from harness.launch.launchers import LAUNCHERS, LaunchRequest
from harness.machine import allocation
from harness.machine.system import rank_capacity

# What sbatch -N 2 --ntasks-per-node 4 --gpus-per-node 4 leaves in the batch script's environment.
TWO_GPU_NODES = {"SLURM_JOB_ID": "4711", "SLURM_JOB_NUM_NODES": "2", "SLURM_NTASKS": "8", "SLURM_NTASKS_PER_NODE": "4",
                 "SLURM_TASKS_PER_NODE": "4(x2)", "SLURM_JOB_CPUS_PER_NODE": "48(x2)", "SLURM_GPUS_ON_NODE": "4",
                 "SLURM_GPUS_PER_NODE": "4", "SLURM_JOB_NODELIST": "jwb[0001-0002]"}
# What salloc -n 2 on this machine's local cluster gives (seen for real).
LOCAL_CPU_ONLY = {"SLURM_JOB_ID": "118", "SLURM_JOB_NUM_NODES": "1", "SLURM_NTASKS": "2", "SLURM_NPROCS": "2",
                  "SLURM_TASKS_PER_NODE": "2", "SLURM_JOB_CPUS_PER_NODE": "2", "SLURM_JOB_NODELIST": "vm"}
REQUEST = LaunchRequest(ranks=2, module="harness.rank.worker", args=("/tmp/spec.json",), job_name="dlscale-x",
                        master_port=29555, python="/venv/bin/python")


@pytest.mark.parametrize("text, counts", [("2(x3),1", [2, 2, 2, 1]), ("48", [48]), ("72(x2),36", [72, 72, 36])])
def test_slurm_per_node_counts_are_expanded(text, counts):
    assert allocation.expand_counts(text) == counts


@pytest.mark.parametrize("text, gpus", [("4", 4), ("a100:4", 4), ("a100:2,v100:1", 3)])
def test_gpu_count_lists_are_summed(text, gpus):
    assert allocation.count_gres(text) == gpus


@pytest.mark.parametrize("text, version", [("slurm-wlm 22.05.8\n", (22, 5, 8)), ("slurm 23.11.4", (23, 11, 4)),
                                           ("slurm 20.02", (20, 2))])
def test_slurm_version_is_parsed(text, version):
    assert allocation.slurm_version(text) == version


def test_outside_an_allocation_there_is_none():
    assert allocation.from_env({"PATH": "/bin"}) is None
    assert LAUNCHERS.create("srun", slurm_env={}).command(REQUEST)[:3] == ["srun", "--ntasks=2", "--kill-on-bad-exit=1"]


def test_nodes_tasks_and_gpus_are_read_from_the_batch_environment():
    job = allocation.from_env(TWO_GPU_NODES)
    assert (job.job_id, job.nodes, job.tasks, job.tasks_per_node) == ("4711", 2, 8, 4)
    assert (job.gpus_per_node, job.gpus, job.cpus_per_node) == (4, 8, (48, 48))
    assert job.nodelist == "jwb[0001-0002]"


@pytest.mark.parametrize("variables, per_node", [
    ({"SLURM_JOB_GPUS": "0,1,2,3"}, 4),        # salloc/sbatch: this node's global GPU ids
    ({"SLURM_STEP_GPUS": "2,3"}, 2),           # inside a step
    ({"SLURM_GPUS_PER_NODE": "a100:4"}, 4),    # only what was asked for
    ({"SLURM_GPUS": "8"}, 4),                  # the job's total over its 2 nodes
    ({"SLURM_GPUS_PER_TASK": "1"}, 4),         # times 4 tasks per node
    ({"CUDA_VISIBLE_DEVICES": "0,1"}, 2),
    ({"CUDA_VISIBLE_DEVICES": "NoDevFiles"}, 0),
    ({}, 0),
    ({"SLURM_GPUS_ON_NODE": "0", "DLSCALE_GPUS_PER_NODE": "4"}, 4),  # the site override wins
])
def test_gpus_per_node_come_from_whichever_variable_is_set(variables, per_node):
    env = {"SLURM_JOB_ID": "1", "SLURM_JOB_NUM_NODES": "2", "SLURM_NTASKS": "8", "SLURM_TASKS_PER_NODE": "4(x2)",
           **variables}
    assert allocation.from_env(env).gpus_per_node == per_node


def test_gpu_cells_get_one_rank_per_gpu_of_the_allocation():
    assert rank_capacity(True, TWO_GPU_NODES) == (8, "the Slurm allocation 4711 (2 node(s), 4 GPU(s) per node from "
                                                    "SLURM_GPUS_ON_NODE=4) offers 8 rank(s), one per GPU")


def test_fewer_tasks_than_gpus_bound_the_ranks_and_say_so():
    env = {**TWO_GPU_NODES, "SLURM_NTASKS": "2", "SLURM_NTASKS_PER_NODE": "1", "SLURM_TASKS_PER_NODE": "1(x2)"}
    capacity, where = rank_capacity(True, env)
    assert capacity == 2 and "1 task(s) per node" in where


def test_a_gpu_cell_in_an_allocation_without_gpus_is_skipped_with_the_reason():
    capacity, where = rank_capacity(True, LOCAL_CPU_ONLY)
    assert capacity == 0
    assert where.startswith("the Slurm allocation 118 (1 node(s)) holds no GPU (none of SLURM_GPUS_ON_NODE")
    assert "--gpus-per-node" in where and "DLSCALE_GPUS_PER_NODE" in where


def test_cpu_cells_get_the_tasks_else_the_cpus_of_the_allocation():
    assert rank_capacity(False, LOCAL_CPU_ONLY) == (2, "the Slurm allocation 118 (1 node(s)) holds 2 task(s)")
    no_tasks = {"SLURM_JOB_ID": "5", "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_CPUS_PER_NODE": "8(x2)",
                "SLURM_TASKS_PER_NODE": "1(x2)"}
    assert rank_capacity(False, no_tasks) == (16, "the Slurm allocation 5 (2 node(s)) holds 16 CPU(s) and no task "
                                                  "count")


def test_the_suite_skips_a_cell_that_does_not_fit_with_the_capacity_reason():
    # Suite.skip_reason words it "<cell> needs <n> ranks but <where>".
    capacity, where = rank_capacity(True, TWO_GPU_NODES)
    assert 16 > capacity and f"needs 16 ranks but {where}".endswith("offers 8 rank(s), one per GPU")


@pytest.mark.parametrize("ranks, layout", [
    (1, ["--nodes=1", "--ntasks-per-node=1"]),
    (3, ["--nodes=1", "--ntasks-per-node=3"]),
    (4, ["--nodes=1", "--ntasks-per-node=4"]),
    (6, ["--nodes=2", "--ntasks-per-node=4"]),   # 4 + 2: never more ranks on a node than GPUs
    (8, ["--nodes=2", "--ntasks-per-node=4"]),
])
def test_srun_steps_put_one_rank_per_gpu_on_as_few_nodes_as_hold_them(ranks, layout):
    launcher = LAUNCHERS.create("srun", slurm_env=TWO_GPU_NODES, version=(22, 5, 8))
    command = launcher.command(dataclasses.replace(REQUEST, ranks=ranks))
    assert command[:2] == ["srun", f"--ntasks={ranks}"]
    assert command[2:5] == layout + ["--gpu-bind=none"]
    assert "--exclusive" not in command and "--exact" not in command and "--gpus-per-task=1" not in command


def test_old_slurm_gets_exclusive_steps_new_slurm_needs_none():
    assert allocation.srun_step_options(allocation.from_env(LOCAL_CPU_ONLY), 2, (20, 2, 6)) == ["--exclusive"]
    assert allocation.srun_step_options(allocation.from_env(LOCAL_CPU_ONLY), 2, (20, 11, 9)) == []
    assert allocation.srun_step_options(allocation.from_env(LOCAL_CPU_ONLY), 2, (23, 11, 4)) == []
    assert allocation.srun_step_options(None, 2, (20, 2, 6)) == []  # outside: srun makes a job, not a step


def test_a_cpu_cell_larger_than_the_gpu_layout_gets_no_layout():
    assert allocation.srun_step_options(allocation.from_env(TWO_GPU_NODES), 12, (22, 5)) == []


# What salloc -N 2 --ntasks-per-node 1 gives on the two-node namespace cluster (bench_tests/launch).
TWO_CPU_NODES = {"SLURM_JOB_ID": "12", "SLURM_JOB_NUM_NODES": "2", "SLURM_NTASKS": "2", "SLURM_NTASKS_PER_NODE": "1",
                 "SLURM_TASKS_PER_NODE": "1(x2)", "SLURM_JOB_CPUS_PER_NODE": "1(x2)", "SLURM_JOB_NODELIST": "h[0-1]"}


@pytest.mark.parametrize("environment, ranks, layout", [
    (TWO_GPU_NODES, 2, (1, 2)), (TWO_GPU_NODES, 4, (1, 4)), (TWO_GPU_NODES, 6, (2, 3)), (TWO_GPU_NODES, 8, (2, 4)),
    (TWO_CPU_NODES, 1, (1, 1)), (TWO_CPU_NODES, 2, (2, 1)), (LOCAL_CPU_ONLY, 2, (1, 2)),
])
def test_agents_take_the_same_number_of_ranks_on_as_few_nodes_as_hold_them(environment, ranks, layout):
    assert allocation.agents_layout(allocation.from_env(environment), ranks) == layout


@pytest.mark.parametrize("environment, ranks, message", [
    (TWO_GPU_NODES, 5, "5 rank(s) do not split evenly over the 2 node(s)"),
    (TWO_GPU_NODES, 12, "12 rank(s) need 3 node(s) and the Slurm allocation 4711 holds 2"),
    (TWO_CPU_NODES, 3, "3 rank(s) need 3 node(s)"),
])
def test_ranks_agents_cannot_lay_out_are_skipped_with_the_reason(environment, ranks, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        allocation.agents_layout(allocation.from_env(environment), ranks)
    assert message in LAUNCHERS.create("torchrun", slurm_env=environment).cannot_lay_out(ranks)
    assert LAUNCHERS.create("torchrun", slurm_env={}).cannot_lay_out(ranks) is None  # one node, any count


def test_torchrun_in_an_allocation_starts_one_agent_per_node_as_a_job_step():
    gpus = LAUNCHERS.create("torchrun", slurm_env=TWO_GPU_NODES).command(dataclasses.replace(REQUEST, ranks=8))
    assert gpus[:gpus.index("/venv/bin/python")] == [
        "srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--cpus-per-task=48", "--gpu-bind=none",
        "--kill-on-bad-exit=1", "--job-name=dlscale-x"]
    assert gpus[gpus.index("/venv/bin/python"):] == [
        "/venv/bin/python", "-m", "harness.launch.agent", "--nnodes=2", "--nproc-per-node=4", "--rdzv-id=dlscale-x",
        "--max-restarts=0", "-m", "harness.rank.worker", "/tmp/spec.json"]
    cpus = LAUNCHERS.create("torchrun", slurm_env=TWO_CPU_NODES).command(
        dataclasses.replace(REQUEST, ranks=2, cores_per_rank=1))
    assert "--cpus-per-task=1" in cpus and "--gpu-bind=none" not in cpus and "--nproc-per-node=1" in cpus
    assert LAUNCHERS.create("torchrun", slurm_env=TWO_CPU_NODES).rendezvous_host() is None  # the agents choose it


def test_each_agent_meets_the_others_on_the_steps_first_node():
    from harness.launch.agent import agent_command

    command = agent_command(["--nnodes=2", "-m", "w"], {"SLURM_STEP_NODELIST": "jwb[0007-0008]", "MASTER_PORT": "29555"})
    assert command[1:] == ["-m", "torch.distributed.run", "--rdzv-backend=c10d", "--rdzv-endpoint=jwb0007:29555",
                           "--nnodes=2", "-m", "w"]
    with pytest.raises(SystemExit, match="runs as a task of a Slurm job step"):
        agent_command([], {"MASTER_PORT": "1"})


def test_launch_environment_reaches_every_launcher_command():
    environment = {"NCCL_SOCKET_IFNAME": "ib0,ib1", "GLOO_SOCKET_IFNAME": "ib0"}
    for name in ("srun", "mpirun", "torchrun"):
        command = LAUNCHERS.create(name, environment=environment).command(REQUEST)
        assert command[:3] == ["env", "NCCL_SOCKET_IFNAME=ib0,ib1", "GLOO_SOCKET_IFNAME=ib0"]
    mpirun = LAUNCHERS.create("mpirun", environment=environment).command(REQUEST)
    exported = {mpirun[i + 1] for i, token in enumerate(mpirun) if token == "-x"}
    assert {"NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "MASTER_ADDR"} <= exported


def test_master_addr_from_the_launch_environment_is_the_rendezvous_host():
    assert LAUNCHERS.create("mpirun", environment={"MASTER_ADDR": "node1-ib"}).rendezvous_host() == "node1-ib"
    assert LAUNCHERS.create("srun", environment={"MASTER_ADDR": "node1-ib"}).rendezvous_host() is None  # env wins


def test_launch_environment_file_then_options(tmp_path):
    env_file = tmp_path / "site.env"
    env_file.write_text("# JUWELS Booster\nexport NCCL_SOCKET_IFNAME=ib0\nGLOO_SOCKET_IFNAME='ib0'\n\n"
                        "NCCL_IB_HCA=\"mlx5_0,mlx5_1\"\n")
    table = allocation.launch_environment(["GLOO_SOCKET_IFNAME=eth0", "NCCL_DEBUG=INFO"],
                                          env={"DLSCALE_ENV_FILE": str(env_file)})
    assert table == {"NCCL_SOCKET_IFNAME": "ib0", "GLOO_SOCKET_IFNAME": "eth0", "NCCL_IB_HCA": "mlx5_0,mlx5_1",
                     "NCCL_DEBUG": "INFO"}
    assert allocation.launch_environment([], env={}) == {}


@pytest.mark.parametrize("text, message", [
    ("NCCL_SOCKET_IFNAME", "--launch-env: expected NAME=VALUE, got 'NCCL_SOCKET_IFNAME'"),
    ("1X=2", "expected NAME=VALUE"),
    ("MASTER_PORT=1234", "MASTER_PORT is set by the harness for each cell"),
])
def test_bad_launch_environment_entries_are_named(text, message):
    with pytest.raises(ValueError, match=message):
        allocation.launch_environment([text], env={})


def test_bad_env_file_line_is_named_with_its_line_number(tmp_path):
    env_file = tmp_path / "site.env"
    env_file.write_text("A=1\nnot an assignment\n")
    with pytest.raises(ValueError, match=r"site.env:2: expected NAME=VALUE"):
        allocation.launch_environment(env_file=env_file)
    with pytest.raises(ValueError, match="launch environment file .*missing.env: No such file"):
        allocation.launch_environment(env_file=tmp_path / "missing.env")
