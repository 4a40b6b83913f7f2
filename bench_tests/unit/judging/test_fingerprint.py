"""Unit tests of harness.judging.fingerprint: what is collected, and which differences make a baseline stale."""
from __future__ import annotations

import copy
import dataclasses

import pytest

from harness.config.cells import config_hash, scaling_cell
from harness.judging import fingerprint as fp_module
from harness.judging.fingerprint import fingerprint, fingerprint_hash, stack_changes, stale_differences, stale_words
from harness.rank.cell import Cell
from harness.rank.workload import Workload

WORKLOAD = dataclasses.asdict(Workload(image_size=64, batch_size=16, data_dir="/data/a"))
REAL_MPI_LIBRARY = fp_module.mpi_library_version
VERSIONS = {"python": "3.11.7", "torch": "2.14.1", "torchvision": "0.29.1", "numpy": "2.1.0",
            "deepspeed": "0.19.8", "horovod": "0.28.1", "nvidia-dali-cuda130": "2.4.0", "mpi4py": "4.1.2"}


def records(hosts=("node1", "node1"), device="cpu", source="torchrun", **versions) -> list[dict]:
    return [{"rank": i, "host": host, "device": device, "threads": 4, "source": source,
             "versions": {**VERSIONS, **versions}} for i, host in enumerate(hosts)]


@pytest.fixture(autouse=True)
def fixed_local_facts(monkeypatch):
    """The launching node's facts, fixed: the tests must not depend on this machine."""
    cpu = {"cpu": "Xeon 8480", "cpu_id": "GenuineIntel family 6 model 143 stepping 8",
           "isa": "avx2 avx512f avx512_bf16 amx_tile amx_bf16", "memory_gib": 1024, "cores": 112}
    facts = {False: cpu,
             True: {**cpu, "cuda": "13.0", "nccl": "2.27.3", "driver": "580.65", "gpu": "NVIDIA H100 80GB HBM3",
                    "gpus_per_node": 8}}
    monkeypatch.setattr(fp_module, "node_facts", lambda gpu: facts[gpu])
    monkeypatch.setattr(fp_module, "mpi_library_version", lambda: "Open MPI 4.1.6")


def test_stack_hardware_and_config_of_a_cpu_ddp_cell():
    fp = fingerprint(records(), WORKLOAD, "ddp-synthetic-resnet50-g2")
    assert fp["stack"] == {"python": "3.11.7", "torch": "2.14.1", "torchvision": "0.29.1"}
    assert fp["hardware"] == {"cpu": "Xeon 8480", "cpu_id": "GenuineIntel family 6 model 143 stepping 8",
                              "isa": "avx2 avx512f avx512_bf16 amx_tile amx_bf16", "memory_gib": 1024,
                              "cores": 112, "nodes": 1, "hosts": "node1", "ranks": 2, "device": "cpu",
                              "threads_per_rank": 4}
    cell = Cell(framework="ddp", loader="synthetic", model="resnet50", ranks=2)
    assert fp["config_hash"] == config_hash(dataclasses.asdict(Workload(**WORKLOAD)), cell)
    assert "data_dir" not in fp["config"] and fp["config"]["image_size"] == 64


def test_only_what_the_cell_uses_is_in_its_stack():
    fp = fingerprint(records(source="openmpi"), WORKLOAD, "deepspeed_zero1-dali-cpu-tfrecord-resnet50-g2")
    assert fp["stack"]["deepspeed"] == "0.19.8"
    assert fp["stack"]["dali"] == "2.4.0 (nvidia-dali-cuda130)"
    assert fp["stack"]["mpi"] == "Open MPI 4.1.6" and fp["stack"]["mpi4py"] == "4.1.2"
    assert "horovod" not in fp["stack"]
    horovod = fingerprint(records(), WORKLOAD, "horovod-native-resnet50-g2")
    assert horovod["stack"]["horovod"] == "0.28.1" and horovod["stack"]["mpi"] == "Open MPI 4.1.6"


def test_a_backend_names_its_own_stack_in_its_registry_entry(monkeypatch):
    """A new framework says which distributions it runs on in its registry entry; the fingerprint
    and the provenance follow without a line changed in either."""
    from harness.rank.frameworks import FRAMEWORKS
    from harness.rank.packages import tracked_packages
    from harness.common.registry import Entry

    variant = Entry("harness.rank.frameworks.ddp:DDPAdapter", stack={"apex": "apex"}, uses_mpi=True)
    monkeypatch.setitem(FRAMEWORKS._entries, "ddpapex", variant)
    fp = fingerprint(records(apex="0.9"), WORKLOAD, "ddpapex-synthetic-resnet50-g2")
    assert fp["stack"]["apex"] == "0.9" and fp["stack"]["mpi"] == "Open MPI 4.1.6"
    assert "apex" in tracked_packages()


def test_gpu_cells_carry_cuda_nccl_driver_and_gpu_model():
    fp = fingerprint(records(device="cuda:0"), WORKLOAD, "ddp-synthetic-resnet50-g2")
    assert {k: fp["stack"][k] for k in ("cuda", "nccl", "driver")} == {"cuda": "13.0", "nccl": "2.27.3",
                                                                        "driver": "580.65"}
    assert fp["hardware"]["gpu"] == "NVIDIA H100 80GB HBM3" and fp["hardware"]["gpus_per_node"] == 8
    assert fp["hardware"]["device"] == "cuda"


def test_another_torch_version_is_a_change_to_judge_not_a_stale_baseline():
    baseline = fingerprint(records(torch="2.13.0"), WORKLOAD, "ddp-synthetic-resnet50-g2")
    current = fingerprint(records(), WORKLOAD, "ddp-synthetic-resnet50-g2")
    assert stale_differences(baseline, current) == []
    assert stack_changes(baseline, current) == ["torch 2.13.0 -> 2.14.1"]
    assert fingerprint_hash(baseline) != fingerprint_hash(current)


def test_host_names_alone_do_not_make_a_baseline_stale():
    baseline = fingerprint(records(hosts=("old-a", "old-a")), WORKLOAD, "ddp-synthetic-resnet50-g2")
    current = fingerprint(records(hosts=("new-b", "new-b")), WORKLOAD, "ddp-synthetic-resnet50-g2")
    assert baseline["hardware"]["hosts"] != current["hardware"]["hosts"]
    assert stale_differences(baseline, current) == [] and stack_changes(baseline, current) == []
    assert fingerprint_hash(baseline) == fingerprint_hash(current)


def test_node_count_and_hardware_differences_are_stale_the_workload_is_judged_elsewhere():
    base = fingerprint(records(), WORKLOAD, "ddp-synthetic-resnet50-g2")
    two_nodes = fingerprint(records(hosts=("a", "b")), WORKLOAD, "ddp-synthetic-resnet50-g2")
    assert stale_differences(base, two_nodes) == ["hardware.nodes: 1 -> 2"]
    other_cpu = copy.deepcopy(base)
    other_cpu["hardware"]["cpu"] = "EPYC 9654"
    assert stale_differences(base, other_cpu) == ["hardware.cpu: Xeon 8480 -> EPYC 9654"]
    bigger = fingerprint(records(), {**WORKLOAD, "image_size": 224}, "ddp-synthetic-resnet50-g2")
    assert bigger["config"]["image_size"] == 224 and stale_differences(base, bigger) == []  # verdicts.config_change


def test_data_location_is_not_a_difference():
    base = fingerprint(records(), WORKLOAD, "ddp-native-resnet50-g2")
    moved = fingerprint(records(), {**WORKLOAD, "data_dir": "/scratch/b"}, "ddp-native-resnet50-g2")
    assert stale_differences(base, moved) == []


def test_missing_field_and_disagreeing_ranks():
    base = fingerprint(records(device="cuda:0"), WORKLOAD, "ddp-synthetic-resnet50-g2")
    current = copy.deepcopy(base)
    del current["stack"]["driver"]
    assert stack_changes(base, current) == ["driver 580.65 -> (none)"] and stale_differences(base, current) == []
    mixed = records()
    mixed[1]["versions"] = {**VERSIONS, "torch": "2.13.0"}
    assert fingerprint(mixed, WORKLOAD, "ddp-synthetic-resnet50-g2")["stack"]["torch"] == "2.13.0 / 2.14.1"


def test_baseline_without_fingerprint_has_no_differences():
    assert stale_differences(None, fingerprint(records(), WORKLOAD, "ddp-synthetic-resnet50-g2")) == []


def test_cell_ids_parse_and_other_ids_need_a_config_hash():
    assert scaling_cell("ddp-dali-cpu-tfrecord-resnet50-g4") == Cell(framework="ddp", loader="dali-cpu-tfrecord",
                                                                         model="resnet50", ranks=4)
    assert scaling_cell("accuracy-ddp-step-b32-g1") is None
    with pytest.raises(ValueError, match="pass config_hash"):
        fingerprint(records(), WORKLOAD, "accuracy-ddp-step-b32-g1")
    assert fingerprint(records(), WORKLOAD, "accuracy-ddp-step-b32-g1", config_hash="abc")["config_hash"] == "abc"


def test_the_mpi_library_is_read_once_from_the_launching_node():
    mpi = REAL_MPI_LIBRARY()
    assert mpi is None or isinstance(mpi, str)
    assert REAL_MPI_LIBRARY() is mpi


def test_the_hardware_is_the_nodes_the_ranks_reported_not_the_launching_nodes():
    """After salloc on a login node the pytest process runs there; the ranks say where they ran."""
    login_node_facts = fingerprint(records(), WORKLOAD, "ddp-synthetic-resnet50-g2")["hardware"]
    node = {"cpu": "AMD EPYC 7742", "cpu_id": "AuthenticAMD family 23 model 49 stepping 0", "isa": "avx2",
            "memory_gib": 512, "cores": 128}
    ranks = [dict(r, node=dict(node, memory_gib=memory)) for r, memory in zip(records(("n1", "n2")), (512, 256))]
    hardware = fingerprint(ranks, WORKLOAD, "ddp-synthetic-resnet50-g2")["hardware"]
    assert login_node_facts["cpu"] == "Xeon 8480" and hardware["cpu"] == "AMD EPYC 7742"
    assert (hardware["cores"], hardware["isa"], hardware["nodes"]) == (128, "avx2", 2)
    assert hardware["memory_gib"] == "256 / 512"  # nodes that differ show both, itself a difference
    gpu_ranks = [dict(r, node=dict(node, gpu="NVIDIA A100-SXM4-40GB", gpus_per_node=4, cuda="12.1", nccl="2.18.1",
                                   driver="535.104"))
                 for r in records(("n1",), device="cuda:0")]
    gpu = fingerprint(gpu_ranks, WORKLOAD, "ddp-synthetic-resnet50-g1")
    assert (gpu["hardware"]["gpu"], gpu["hardware"]["gpus_per_node"]) == ("NVIDIA A100-SXM4-40GB", 4)
    assert (gpu["stack"]["cuda"], gpu["stack"]["driver"]) == ("12.1", "535.104")


def test_same_cpu_name_other_silicon_is_stale_and_says_which_fact():
    """Two VMs both called "AMD EPYC" run different kernels when their family, model or ISA differ."""
    base = fingerprint(records(), WORKLOAD, "ddp-synthetic-resnet50-g1")
    other = copy.deepcopy(base)
    other["hardware"].update(cpu_id="GenuineIntel family 6 model 106 stepping 6", isa="avx2 avx512f")
    assert stale_differences(base, other) == [
        "hardware.cpu_id: GenuineIntel family 6 model 143 stepping 8 -> GenuineIntel family 6 model 106 stepping 6",
        "hardware.isa: avx2 avx512f avx512_bf16 amx_tile amx_bf16 -> avx2 avx512f"]


def test_a_hardware_fact_the_baseline_predates_is_unknown_not_a_difference():
    current = fingerprint(records(), WORKLOAD, "ddp-synthetic-resnet50-g1")
    older = copy.deepcopy(current)
    for fact in ("cpu_id", "isa", "memory_gib"):
        del older["hardware"][fact]
    assert stale_differences(older, current) == []




def test_more_processes_than_cores_on_a_node_is_said_in_the_fingerprint():
    node = {"cpu": "x", "cores": 2}
    records = [{"host": "a", "device": "cpu", "threads": 1, "versions": {}, "rank": rank, "local_world_size": 3,
                "node": node} for rank in range(2)]
    workload = dataclasses.asdict(Workload())
    hardware = fingerprint(records, workload, "torch_ps_sync-synthetic-resnet50-g3")["hardware"]
    assert hardware["processes_per_node"] == 3 and "share them" in hardware["oversubscribed"]
    for record in records:
        record["local_world_size"] = 2
    assert "oversubscribed" not in fingerprint(records, workload, "ddp-synthetic-resnet50-g2")["hardware"]


def with_tunables(ranks: list[dict], *values: str | None, where: str = "launch_facts") -> list[dict]:
    """The ranks' records with the ``GLIBC_TUNABLES`` each saw: in its launch facts' variables (as
    rank/launch_facts.py records it), or in its launch environment (a record without launch facts)."""
    def seen(value):
        return {"variables": {"GLIBC_TUNABLES": value} if value else {}} if where == "launch_facts" else {
            "GLIBC_TUNABLES": value}
    return [{**record, where: seen(value)} for record, value in zip(ranks, values)]


def test_the_huge_pages_the_ranks_ran_with_are_a_stack_fact_read_from_their_records():
    thp = "glibc.malloc.hugetlb=1"
    cell = "ddp-synthetic-resnet50-g2"
    assert fingerprint(with_tunables(records(), thp, thp), WORKLOAD, cell)["stack"]["huge_pages"] == "thp"
    pool = with_tunables(records(), "glibc.malloc.hugetlb=2", "glibc.malloc.hugetlb=2", where="launch_environment")
    assert fingerprint(pool, WORKLOAD, cell)["stack"]["huge_pages"] == "pool"
    assert fingerprint(with_tunables(records(), None, thp), WORKLOAD, cell)["stack"]["huge_pages"] == "off / thp"
    for off in (records(), with_tunables(records(), "glibc.malloc.hugetlb=0", "glibc.malloc.tcache_count=0")):
        assert "huge_pages" not in fingerprint(off, WORKLOAD, cell)["stack"]  # none: as every fingerprint before


def test_a_baseline_recorded_without_huge_pages_is_stale_against_a_run_with_them_and_names_them():
    """A field the baseline lacks is ``off`` there, not a fact it predates: a baseline recorded before
    dlscale set huge pages reads stale against a run with them, and is judged against one without."""
    cell = "ddp-synthetic-resnet50-g2"
    before = fingerprint(records(), WORKLOAD, cell)
    thp = fingerprint(with_tunables(records(), "glibc.malloc.hugetlb=1", "glibc.malloc.hugetlb=1"), WORKLOAD, cell)
    pool = fingerprint(with_tunables(records(), *["glibc.malloc.hugetlb=2"] * 2), WORKLOAD, cell)
    assert stale_differences(before, thp) == ["stack.huge_pages: off -> thp"]
    assert stale_differences(thp, before) == ["stack.huge_pages: thp -> off"]
    assert stale_differences(thp, pool) == ["stack.huge_pages: thp -> pool"]
    assert stack_changes(before, thp) == []  # another launch condition, not software to judge
    assert stale_differences(before, fingerprint(records(), WORKLOAD, cell)) == []
    assert stale_words(stale_differences(before, thp)) == "with other huge pages"
    two_nodes = fingerprint(with_tunables(records(hosts=("a", "b")), *["glibc.malloc.hugetlb=1"] * 2), WORKLOAD, cell)
    assert stale_words(stale_differences(before, two_nodes)) == "on other hardware and with other huge pages"
    assert fingerprint_hash(before) != fingerprint_hash(thp)
