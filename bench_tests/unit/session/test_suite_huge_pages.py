"""Huge pages in a session (issue 58): decided once in ``Suite.prepare`` from the node, given to every
launch through the launch environment (so both sides of an A/B get them alike), recorded in the
results, and A/B-able like any launch variable (``--against env:GLIBC_TUNABLES``). The node is
described, not read; nothing is launched."""
from types import SimpleNamespace

import pytest

from harness.config.options import SuiteError, SuiteOptions
from harness.machine import huge_pages
from harness.session import preflight
from harness.session.suite import Suite

THP = "glibc.malloc.hugetlb=1"


def meminfo(total: int, free: int) -> str:
    return f"HugePages_Total:   {total}\nHugePages_Free:    {free}\nHugepagesize:       2048 kB\n"


@pytest.fixture
def node(monkeypatch):
    """A node outside Slurm with transparent huge pages on ``madvise``, glibc 2.36 and the pool
    given (none by default); the shell sets no GLIBC_TUNABLES."""
    for name in ("GLIBC_TUNABLES", "DLSCALE_ENV_FILE", "SLURM_JOB_ID", "SLURM_JOBID"):
        monkeypatch.delenv(name, raising=False)

    def with_pool(total: int = 0, free: int = 0) -> None:
        monkeypatch.setattr(huge_pages, "read_node", lambda: {"meminfo": meminfo(total, free), "thp": "madvise",
                                                             "glibc": "glibc 2.36"})
    with_pool()
    return with_pool


def session(tmp_path, **options) -> Suite:
    return Suite(SuiteOptions(**{"launcher": "torchrun", "device": "cpu", "frameworks": "ddp", "loaders": "synthetic",
                                 "gpus": "1", "workdir": tmp_path / "cells", "baselines_dir": tmp_path,
                                 "history_dir": None, **options}))


def test_every_launch_of_a_cpu_session_gets_the_huge_pages_in_its_launch_environment(node, tmp_path):
    suite = session(tmp_path, launch_env=("A=1",))
    assert suite.launch_environment == {"A": "1"}  # until prepare decides
    ready = suite.prepare()
    given = {"A": "1", "GLIBC_TUNABLES": THP}
    assert suite.launch_environment == given and ready.launcher.environment == given
    assert ready.current_environment.launch_environment == given
    assert ready.huge_pages.words() == f"{THP} (transparent, madvise; no reserved pool)"
    assert suite.results_document()["huge_pages"] == ready.huge_pages.to_json()


def test_the_pool_is_taken_where_it_holds_the_largest_cells_ranks(node, tmp_path):
    per_rank = huge_pages.POOL_PAGES_PER_RANK
    node(total=2 * per_rank, free=2 * per_rank - 1)
    assert session(tmp_path, gpus="1").prepare().huge_pages.mode == "pool"
    assert session(tmp_path, gpus="1,2").prepare().huge_pages.mode == "thp"  # two ranks on the node need more


def test_the_pool_asked_of_a_node_without_one_stops_the_session_before_anything(node, tmp_path):
    suite = session(tmp_path, huge_pages="pool")
    with pytest.raises(SuiteError, match="^--huge-pages pool: this node reserves no pool of huge pages"):
        suite.prepare()
    assert suite.prepared is None and not (tmp_path / "cells").exists() and suite.launch_environment == {}


def test_off_sets_nothing(node, tmp_path):
    suite = session(tmp_path, huge_pages="off")
    ready = suite.prepare()
    assert suite.launch_environment == {} and ready.launcher.environment == {}
    assert ready.huge_pages.words() == "off (--huge-pages off)"


def test_an_a_b_of_auto_against_glibcs_defaults(node, tmp_path):
    ready = session(tmp_path, against=("env:GLIBC_TUNABLES",)).prepare()
    assert ready.launcher.environment == {"GLIBC_TUNABLES": THP}
    assert ready.reference.launcher.environment == {} and ready.reference.launcher.unset == ("GLIBC_TUNABLES",)
    assert ready.reference.difference["launch_environment"] == {"GLIBC_TUNABLES": [None, THP]}


def test_an_a_b_of_the_setting_spelled_out_with_huge_pages_off(node, tmp_path):
    suite = session(tmp_path, huge_pages="off", launch_env=(f"GLIBC_TUNABLES={THP}",), against=("env:GLIBC_TUNABLES",))
    ready = suite.prepare()
    assert ready.huge_pages.words() == f"{THP} (your GLIBC_TUNABLES sets it, over --huge-pages off)"
    assert ready.launcher.environment == {"GLIBC_TUNABLES": THP}
    assert ready.reference.launcher.unset == ("GLIBC_TUNABLES",)
    assert ready.reference.difference["launch_environment"] == {"GLIBC_TUNABLES": [None, THP]}


def test_the_users_tunables_the_launch_environments_over_the_shells(node, monkeypatch):
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.tcache_count=0")
    options = SuiteOptions(device="cpu")
    from_the_shell = preflight.decide_huge_pages(options, [1, 2], False, {})
    assert from_the_shell.tunables == f"glibc.malloc.tcache_count=0:{THP}"
    from_the_table = preflight.decide_huge_pages(options, [1, 2], False, {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=2"})
    assert (from_the_table.tunables, from_the_table.entry) == (None, "glibc.malloc.hugetlb=2")
    assert preflight.decide_huge_pages(options, [1], True, {}).tunables is None  # GPU ranks: auto sets none


def test_an_unknown_huge_pages_mode_is_refused():
    with pytest.raises(SuiteError, match="^--huge-pages: 'always' is not one of auto, thp, pool, off$"):
        Suite(SuiteOptions(huge_pages="always"))


def test_the_summary_says_the_setting_and_why_in_one_line(node, tmp_path):
    from harness.plugin import _write_huge_pages

    suite = session(tmp_path)
    lines = []
    _write_huge_pages(SimpleNamespace(write_line=lines.append), suite)
    assert lines == []  # nothing decided before the session is prepared
    suite.prepare()
    _write_huge_pages(SimpleNamespace(write_line=lines.append), suite)
    assert lines == [f"huge pages: {THP} (transparent, madvise; no reserved pool)"]
