"""What a rank records of its huge pages (harness.rank.launch_facts): the ``GLIBC_TUNABLES`` it saw
among its layout's variables, and its memory in transparent huge pages and from the reserved pool
at the window's end."""
import json
import os
import subprocess
import sys

import pytest

from harness.machine.huge_pages import FIRST_GLIBC, glibc_release, read_node
from harness.rank.launch_facts import LAYOUT_VARIABLES, LaunchFacts, layout, rollup_kib

ROLLUP = """55d80cf47000-7ffd57032000 ---p 00000000 00:00 0                          [rollup]
Rss:             1300000 kB
AnonHugePages:      4096 kB
Shared_Hugetlb:     2048 kB
Private_Hugetlb: 1228800 kB
Swap:                  0 kB
"""


def test_the_huge_pages_are_read_from_smaps_rollup():
    assert rollup_kib(("AnonHugePages",), ROLLUP) == 4096
    assert rollup_kib(("Private_Hugetlb", "Shared_Hugetlb"), ROLLUP) == 1228800 + 2048
    assert rollup_kib(("Private_Hugetlb", "Shared_Hugetlb"), "Rss: 1 kB\n") is None  # a kernel without the fields
    assert rollup_kib(("AnonHugePages",), None) is None


def test_a_launch_records_its_hugetlb_memory_beside_its_transparent_huge_pages(monkeypatch):
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1")
    read = LaunchFacts().finish()
    assert read["anon_huge_kib"] >= 0 and read["hugetlb_kib"] == 0  # no pool taken by this process
    assert "GLIBC_TUNABLES" in LAYOUT_VARIABLES and read["variables"]["GLIBC_TUNABLES"] == "glibc.malloc.hugetlb=1"
    monkeypatch.delenv("GLIBC_TUNABLES")
    assert "GLIBC_TUNABLES" not in layout()["variables"]


TOUCH = """
import json
from harness.rank.launch_facts import anon_huge_kib
heap = b"\\x01" * (64 << 20)  # malloc'd and written: faulted in
print(json.dumps(anon_huge_kib()))
"""


def test_the_tunable_puts_a_processs_heap_in_transparent_huge_pages():
    """What the setting is for, in a real process: glibc madvises its heap, and the kernel backs it
    with transparent huge pages."""
    node = read_node()
    if node["thp"] in (None, "never") or (glibc_release(node["glibc"]) or (0,)) < FIRST_GLIBC:
        pytest.skip(f"this node gives no transparent huge pages through glibc ({node['glibc']}, THP {node['thp']})")

    def huge_kib(tunables: dict) -> int:
        env = {name: value for name, value in os.environ.items() if name != "GLIBC_TUNABLES"}
        done = subprocess.run([sys.executable, "-c", TOUCH], capture_output=True, text=True, check=True,
                              env={**env, **tunables})
        return json.loads(done.stdout)

    assert huge_kib({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}) >= 32 << 10
    if node["thp"] == "madvise":
        assert huge_kib({}) < 32 << 10
