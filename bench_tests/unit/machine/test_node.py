"""The facts a rank reports of its node (harness.machine.node)."""
from harness.machine.node import cpu_identity, node_facts


def test_cpu_identity_from_cpuinfo():
    cpuinfo = ("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n"
               "model name\t: AMD EPYC\nstepping\t: 1\nflags\t\t: fpu sse avx avx2 avx512f avx512_bf16 vaes\n\n"
               "processor\t: 1\nvendor_id\t: AuthenticAMD\n")
    assert cpu_identity(cpuinfo) == {"cpu_id": "AuthenticAMD family 25 model 17 stepping 1",
                                     "isa": "avx2 avx512f avx512_bf16"}
    assert cpu_identity("vendor_id : ARM\nflags : fp asimd\n")["isa"].startswith("none of avx2")
    assert cpu_identity("") == {}


def test_this_nodes_facts_are_read_once_and_carry_no_gpu_fact_for_a_cpu_rank():
    facts = node_facts(False)
    assert facts["cores"] >= 1 and facts["cpu"] and facts["memory_gib"] >= 1
    assert facts["cpu_id"] == cpu_identity()["cpu_id"]
    assert not {"gpu", "cuda", "nccl", "driver"} & set(facts)
    assert node_facts(False) is facts
