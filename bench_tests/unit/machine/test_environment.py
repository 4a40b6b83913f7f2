"""Environment capture for the report, from fake environments and fake tool outputs."""
import json
import sys

from bench_tests.components import needs
from harness.machine import environment

SLURM_STEP = {"SLURM_CLUSTER_NAME": "booster", "SLURM_JOB_ID": "4711", "SLURM_JOB_NAME": "dlscale-nightly",
              "SLURM_JOB_PARTITION": "booster", "SLURM_STEP_ID": "3", "SLURM_JOB_NUM_NODES": "2",
              "SLURM_JOB_NODELIST": "jwb[0001-0002]", "SLURM_STEP_NODELIST": "jwb0001", "SLURM_NTASKS": "8",
              "SLURM_GPUS_ON_NODE": "4"}
TOPOLOGY = "\tGPU0\tGPU1\tmlx5_0\nGPU0\t X \tNV4\tSYS\nGPU1\tNV4\t X \tSYS\n"


def fake_tools(outputs):
    """A ``run`` that answers from a table: command name -> stdout (missing names: not installed)."""
    calls = []

    def run(command):
        calls.append(list(command))
        key = " ".join(command[:2]) if command[0] == "nvidia-smi" else command[0]
        return outputs.get(key)

    run.calls = calls
    return run


def test_slurm_job_step_and_nodes():
    info = environment.slurm(SLURM_STEP)
    assert (info["cluster"], info["job_id"], info["step_id"], info["nodes"]) == ("booster", "4711", "3", "2")
    assert (info["nodelist"], info["step_nodelist"]) == ("jwb[0001-0002]", "jwb0001")
    assert info["gpus"] == {"SLURM_GPUS_ON_NODE": "4"}
    assert environment.slurm({"PATH": "/bin"}) is None


def test_loaded_modules_are_listed_in_order():
    env = {"LOADEDMODULES": "Stages/2024:GCC/12.3.0:OpenMPI/4.1.5:NCCL/default-CUDA-12"}
    assert environment.modules(env) == ["Stages/2024", "GCC/12.3.0", "OpenMPI/4.1.5", "NCCL/default-CUDA-12"]
    assert environment.modules({}) == []


def test_conda_venv_or_system_python():
    conda = environment.python_environment({"CONDA_PREFIX": "/opt/conda/envs/dl", "CONDA_DEFAULT_ENV": "dl"},
                                           prefix="/opt/conda/envs/dl", base_prefix="/opt/conda/envs/dl")
    assert (conda["kind"], conda["name"], conda["path"]) == ("conda", "dl", "/opt/conda/envs/dl")
    venv = environment.python_environment({}, prefix="/work/.venv", base_prefix="/usr")
    assert (venv["kind"], venv["path"]) == ("venv", "/work/.venv")
    assert environment.python_environment({}, prefix="/usr", base_prefix="/usr")["kind"] == "system"


def test_communication_variables_in_effect_without_per_rank_bookkeeping_or_secrets():
    env = {"NCCL_SOCKET_IFNAME": "ib0", "NCCL_IB_HCA": "mlx5_0", "GLOO_SOCKET_IFNAME": "ib0",
           "OMPI_MCA_btl": "^openib", "OMPI_COMM_WORLD_RANK": "3", "UCX_TLS": "rc,sm", "TORCH_NCCL_BLOCKING_WAIT": "1",
           "CUDA_VISIBLE_DEVICES": "0,1", "HOME": "/root", "NCCL_NET_SECRET_KEY": "x", "PATH": "/bin"}
    assert environment.communication_variables(env) == {
        "CUDA_VISIBLE_DEVICES": "0,1", "GLOO_SOCKET_IFNAME": "ib0", "NCCL_IB_HCA": "mlx5_0",
        "NCCL_NET_SECRET_KEY": "***", "NCCL_SOCKET_IFNAME": "ib0", "OMPI_MCA_btl": "^openib",
        "TORCH_NCCL_BLOCKING_WAIT": "1", "UCX_TLS": "rc,sm"}


def test_gpu_topology_where_nvidia_smi_answers():
    run = fake_tools({"nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,memory.total":
                      "0, NVIDIA A100-SXM4-40GB, 00000000:03:00.0, 550.54, 40960 MiB\n"
                      "1, NVIDIA A100-SXM4-40GB, 00000000:44:00.0, 550.54, 40960 MiB\n",
                      "nvidia-smi topo": TOPOLOGY})
    topology = environment.gpu_topology(run)
    assert len(topology["gpus"]) == 2 and topology["gpus"][0].startswith("0, NVIDIA A100")
    assert topology["topology"] == TOPOLOGY
    assert ["nvidia-smi", "topo", "-m"] in run.calls
    assert environment.gpu_topology(fake_tools({})) is None


def test_capture_is_json_ready_and_survives_missing_tools():
    run = fake_tools({"srun": "slurm-wlm 22.05.8\n", "mpirun": "mpirun (Open MPI) 4.1.4\n\nReport bugs to ...\n"})
    captured = environment.capture({**SLURM_STEP, "LOADEDMODULES": "CUDA/12", "NCCL_DEBUG": "WARN"}, run=run)
    assert captured["slurm"]["job_id"] == "4711"
    assert (captured["slurm_version"], captured["mpi_version"]) == ("slurm-wlm 22.05.8", "mpirun (Open MPI) 4.1.4")
    assert captured["modules"] == ["CUDA/12"] and captured["communication_variables"] == {"NCCL_DEBUG": "WARN"}
    assert captured["gpu_topology"] is None
    assert json.loads(json.dumps(captured)) == captured
    bare = environment.capture({}, run=fake_tools({}))
    assert (bare["slurm"], bare["slurm_version"], bare["mpi_version"], bare["gpu_topology"]) == (None, None, None, None)


def test_capture_with_the_real_tools_of_this_machine():
    captured = environment.capture({"PATH": "/usr/bin:/bin"})
    assert captured["python_environment"]["python"] == sys.version.split()[0]
    if captured["mpi_version"] is None:  # no mpirun here: a failure where CI installed it
        needs("mpirun", "mpirun not found: no MPI version to capture")
    assert "MPI" in captured["mpi_version"]


def test_local_address_is_the_source_address_toward_a_peer():
    assert environment.local_address("127.0.0.1") == "127.0.0.1"
    assert environment.local_address("no-such-host.invalid") is None


def test_the_ranks_settings_are_the_shells_that_steer_them_with_the_launch_table_over_them():
    shell = {"PATH": "/bin", "HOME": "/root", "OMP_PROC_BIND": "close", "NCCL_ALGO": "Ring", "ATEN_CPU_CAPABILITY":
             "avx2", "CUDA_VISIBLE_DEVICES": "0,1", "MASTER_ADDR": "node1", "MASTER_PORT": "29500",
             "PMIX_RANK": "0", "OMPI_COMM_WORLD_RANK": "0", "SLURM_JOB_ID": "4711", "NCCL_IB_KEY": "s3cret",
             "LD_PRELOAD": "/usr/lib/libtcmalloc.so"}
    settings = environment.rank_settings(shell, {"NCCL_ALGO": "Tree", "UCX_TLS": "rc"})
    assert settings == {"ATEN_CPU_CAPABILITY": "avx2", "LD_PRELOAD": "/usr/lib/libtcmalloc.so", "NCCL_ALGO": "Tree",
                        "NCCL_IB_KEY": "***", "OMP_PROC_BIND": "close", "UCX_TLS": "rc"}
    assert list(settings) == sorted(settings)


def test_the_ranks_settings_record_glibcs_tunables_the_huge_pages_among_them():
    shell = {"GLIBC_TUNABLES": "glibc.malloc.tcache_count=0", "PATH": "/bin"}
    assert environment.rank_settings(shell, {}) == {"GLIBC_TUNABLES": "glibc.malloc.tcache_count=0"}
    assert environment.rank_settings(shell, {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}) == {
        "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
