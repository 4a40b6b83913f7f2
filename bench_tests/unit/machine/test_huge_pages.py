"""The huge pages a session's ranks get (harness.machine.huge_pages): the decision of
``--huge-pages`` from the node's meminfo, transparent huge pages mode, glibc and the user's own
``GLIBC_TUNABLES``, and the texts it reads them from. Nothing is read of this machine."""
import pytest

from harness.machine import huge_pages
from harness.machine.huge_pages import HugePages, HugePagesError, decide


def meminfo(total: int, free: int, size_kib: int = 2048) -> str:
    return (f"MemTotal:       32000000 kB\nAnonHugePages:   1071104 kB\nHugePages_Total:   {total}\n"
            f"HugePages_Free:    {free}\nHugePages_Rsvd:        0\nHugepagesize:       {size_kib} kB\n")


NO_POOL = meminfo(0, 0)
NODE = {"meminfo": NO_POOL, "thp": "madvise", "glibc": "glibc 2.36", "tunables": None}


def chosen(option: str = "auto", *, gpus: bool = False, ranks: int = 2, **node) -> HugePages:
    return decide(option, gpus=gpus, ranks=ranks, **{**NODE, **node})


def test_auto_on_cpu_ranks_without_a_pool_asks_for_transparent_huge_pages():
    setting = chosen()
    assert setting.words() == "glibc.malloc.hugetlb=1 (transparent, madvise; no reserved pool)"
    assert (setting.tunables, setting.mode) == ("glibc.malloc.hugetlb=1", "thp")
    assert chosen(thp="always").entry == "glibc.malloc.hugetlb=1"


def test_auto_takes_a_reserved_pool_with_room_for_the_cells_ranks():
    need = 2 * huge_pages.POOL_PAGES_PER_RANK
    setting = chosen(meminfo=meminfo(need + 100, need))
    assert (setting.tunables, setting.mode) == ("glibc.malloc.hugetlb=2", "pool")
    assert setting.reason == f"reserved pool, {need} 2 MiB pages free, {need} for 2 rank(s)"
    short = chosen(meminfo=meminfo(need, need - 1))
    assert short.mode == "thp" and short.reason == (
        f"transparent, madvise; the reserved pool has {need - 1} 2 MiB pages free of the {need} 2 rank(s) are "
        "counted to take")


def test_auto_sets_nothing_where_the_node_gives_no_huge_pages_or_the_ranks_are_on_gpus():
    never = chosen(thp="never")
    assert (never.entry, never.tunables, never.mode) == (None, None, "off")
    assert never.words() == "off (transparent huge pages are never on this node and no reserved pool)"
    assert chosen(thp=None).reason.startswith("transparent huge pages are not offered on this node")
    gpu = chosen(gpus=True, meminfo=meminfo(5000, 5000))
    assert (gpu.tunables, gpu.words()) == (None, "off (GPU ranks: --huge-pages auto sets none)")


def test_a_glibc_that_ignores_the_tunable_gets_nothing_under_auto_and_is_told_so_when_asked():
    old = chosen(glibc="glibc 2.31")
    assert old.tunables is None
    assert old.reason == "glibc 2.31 ignores glibc.malloc.hugetlb, which glibc reads from 2.35 on"
    asked = chosen("thp", glibc="glibc 2.31")
    assert asked.tunables == "glibc.malloc.hugetlb=1"
    assert asked.reason.endswith("; but glibc 2.31 ignores glibc.malloc.hugetlb, which glibc reads from 2.35 on")
    assert chosen(glibc=None).reason == "the C library (unnamed) is not glibc, which alone reads glibc.malloc.hugetlb"


def test_thp_and_pool_are_asked_for_and_off_sets_nothing():
    assert chosen("thp", gpus=True).tunables == "glibc.malloc.hugetlb=1"
    assert chosen("thp", thp="never").reason == (
        "--huge-pages thp; transparent, madvise, but the kernel's are never on this node: the ranks get none")
    need = 2 * huge_pages.POOL_PAGES_PER_RANK
    pool = chosen("pool", meminfo=meminfo(need, need - 1))
    assert pool.tunables == "glibc.malloc.hugetlb=2" and pool.reason == (
        f"--huge-pages pool; reserved pool, {need - 1} 2 MiB pages free of the {need} 2 rank(s) are counted to take: "
        "what it cannot hold gets ordinary pages")
    off = chosen("off", meminfo=meminfo(5000, 5000))
    assert (off.tunables, off.words()) == (None, "off (--huge-pages off)")


def test_the_pool_asked_of_a_node_without_one_is_a_one_line_error():
    with pytest.raises(HugePagesError) as error:
        chosen("pool")
    assert str(error.value) == (
        "--huge-pages pool: this node reserves no pool of huge pages (HugePages_Total in /proc/meminfo is 0; root "
        "reserves one with sysctl vm.nr_hugepages=N): use --huge-pages thp or auto")
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("option", huge_pages.MODES)
def test_the_users_own_hugetlb_entry_wins_whatever_the_option(option):
    setting = chosen(option, tunables="glibc.malloc.tcache_count=0:glibc.malloc.hugetlb=1")
    assert setting.tunables is None  # the launch environment is left as it is
    assert setting.words() == f"glibc.malloc.hugetlb=1 (your GLIBC_TUNABLES sets it, over --huge-pages {option})"
    assert chosen(option, tunables="glibc.malloc.hugetlb=0").mode == "off"


def test_the_users_other_tunables_are_kept_and_the_setting_appended():
    setting = chosen(tunables="glibc.malloc.tcache_count=0")
    assert setting.tunables == "glibc.malloc.tcache_count=0:glibc.malloc.hugetlb=1"
    assert setting.over({"A": "1", "GLIBC_TUNABLES": "glibc.malloc.tcache_count=0"}) == {
        "A": "1", "GLIBC_TUNABLES": "glibc.malloc.tcache_count=0:glibc.malloc.hugetlb=1"}
    assert chosen("off", tunables="glibc.malloc.tcache_count=0").over({"A": "1"}) == {"A": "1"}


def test_the_texts_it_reads():
    assert huge_pages.hugetlb_value("glibc.malloc.hugetlb=1:glibc.malloc.hugetlb=2") == "2"  # glibc's last wins
    assert huge_pages.hugetlb_value("glibc.malloc.tcache_count=0") is None and huge_pages.hugetlb_value(None) is None
    assert [huge_pages.mode_of(text) for text in (None, "glibc.malloc.hugetlb=0", "glibc.malloc.hugetlb=1",
                                                  "glibc.malloc.hugetlb=2", "glibc.malloc.hugetlb=7")] == [
        None, None, "thp", "pool", "glibc.malloc.hugetlb=7"]
    assert huge_pages.pool_pages_free(meminfo(1200, 800)) == 800
    assert huge_pages.pool_pages_free(meminfo(8, 3, size_kib=1024 * 1024)) == 3 * 512  # 1 GiB pages, counted in 2 MiB
    assert huge_pages.pool_pages_free(NO_POOL) is None and huge_pages.pool_pages_free(None) is None
    assert huge_pages.thp_mode("always [madvise] never\n") == "madvise" and huge_pages.thp_mode(None) is None
    assert huge_pages.glibc_release("glibc 2.36") == (2, 36) and huge_pages.glibc_release("musl") is None
    assert set(huge_pages.read_node()) == {"meminfo", "thp", "glibc"}
    assert chosen().to_json() == {"mode": "thp", "entry": "glibc.malloc.hugetlb=1",
                                  "reason": "transparent, madvise; no reserved pool",
                                  "glibc_tunables": "glibc.malloc.hugetlb=1"}
