"""What could set a launch's speed, read by each rank over its timed window.

Launches of unchanged code on a VM run at different speeds while the steps within a launch are
steady, so whatever sets the speed is fixed when the process starts or is the node's over the
window. Each rank records the candidates, for ``dlscale-launches`` to hold against the launches'
figures (:mod:`harness.report.launches`):

- its page faults, minor and major, and context switches, voluntary and involuntary, over the
  window (``getrusage``): a process on the wrong side of glibc's dynamic mmap threshold pays
  millions of minor faults;
- its memory in huge pages at the window's end (``smaps_rollup``): anonymous memory in transparent
  huge pages, and memory from the reserved pool of huge pages (hugetlb);
- the CPUs it ran on during the window (each step's last CPU, ``/proc/self/stat``) and its affinity;
- the node's steal time over the window (``/proc/stat``): the hypervisor running another guest;
- the CPU frequency where the node exposes one (``cpufreq``; a VM usually does not);
- how its memory and process were laid out: the allocator preloaded, glibc's malloc settings and
  tunables (``GLIBC_TUNABLES``: its huge pages), THP's mode and torch's ``THP_MEM_ALLOC_ENABLE``,
  ``PYTHONHASHSEED``, address-space randomisation (the system's and this process's personality),
  the environment's size.

Only the standard library: every rank runtime reads them.
"""
from __future__ import annotations

import os
import resource
import time
from pathlib import Path

LAYOUT_VARIABLES = ("LD_PRELOAD", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_",
                    "MALLOC_ARENA_MAX", "GLIBC_TUNABLES", "THP_MEM_ALLOC_ENABLE", "PYTHONHASHSEED",
                    "DNNL_DEFAULT_FPMATH_MODE", "ATEN_CPU_CAPABILITY", "OMP_NUM_THREADS", "DLSCALE_NO_ASLR",
                    "DLSCALE_ENV_BYTES", "DLSCALE_FLUSH_DENORMAL")
"""Variables that change how a rank's memory, hashing or kernels are laid out."""
ADDR_NO_RANDOMIZE = 0x0040000
"""The personality flag ``setarch -R`` sets."""


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def node_steal_ticks() -> int | None:
    """Clock ticks every CPU of the node has lost to steal so far (``/proc/stat``'s cpu line)."""
    text = _read("/proc/stat")
    if not text:
        return None
    fields = text.split("\n", 1)[0].split()
    return int(fields[8]) if len(fields) > 8 and fields[0] == "cpu" else None


def current_cpu() -> int | None:
    """The CPU this process last ran on (``/proc/self/stat``'s 39th field)."""
    text = _read("/proc/self/stat")
    try:
        return int(text.rsplit(")", 1)[1].split()[36]) if text else None
    except (IndexError, ValueError):
        return None


def rollup_kib(names: tuple[str, ...], rollup: str | None) -> int | None:
    """The sum of the fields ``names`` of ``smaps_rollup``'s text, KiB; None where it has none of them."""
    values = [int(value.split()[0]) for name, _, value in (line.partition(":") for line in (rollup or "").splitlines())
              if name in names and value.split()]
    return sum(values) if values else None


def anon_huge_kib() -> int | None:
    """Anonymous memory of this process in transparent huge pages, KiB."""
    return rollup_kib(("AnonHugePages",), _read("/proc/self/smaps_rollup"))


def hugetlb_kib() -> int | None:
    """Memory of this process from the node's reserved pool of huge pages (hugetlb), KiB."""
    return rollup_kib(("Private_Hugetlb", "Shared_Hugetlb"), _read("/proc/self/smaps_rollup"))


def cpu_mhz(cpus) -> dict[int, float] | None:
    """Each CPU's current frequency where cpufreq exposes it; None where it does not (most VMs)."""
    found = {}
    for cpu in cpus:
        text = _read(f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_cur_freq")
        if text:
            found[cpu] = int(text) / 1000
    return found or None


def layout() -> dict:
    """How this process's memory and hashing were laid out at its start."""
    personality = _read("/proc/self/personality")
    thp = _read("/sys/kernel/mm/transparent_hugepage/enabled")
    return {
        "variables": {name: os.environ.get(name) for name in LAYOUT_VARIABLES if os.environ.get(name) is not None},
        "environment_bytes": sum(len(key) + len(value) + 2 for key, value in os.environ.items()),
        "thp": thp.split("[", 1)[1].split("]", 1)[0] if thp and "[" in thp else None,
        "aslr": (_read("/proc/sys/kernel/randomize_va_space") or "").strip() or None,
        "aslr_off_here": bool(int(personality, 16) & ADDR_NO_RANDOMIZE) if personality else None,
    }


class LaunchFacts:
    """Started at the timed window's start, read at each step's end and finished at the window's end."""

    def __init__(self):
        self.usage = resource.getrusage(resource.RUSAGE_SELF)
        self.steal = node_steal_ticks()
        self.started = time.perf_counter()
        self.cpus: dict[int, int] = {}

    def step(self) -> None:
        cpu = current_cpu()
        if cpu is not None:
            self.cpus[cpu] = self.cpus.get(cpu, 0) + 1

    def finish(self) -> dict:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        steal = node_steal_ticks()
        window = time.perf_counter() - self.started
        ticks = os.sysconf("SC_CLK_TCK")
        cpus = sorted(os.sched_getaffinity(0))
        return {
            "minor_faults": usage.ru_minflt - self.usage.ru_minflt,
            "major_faults": usage.ru_majflt - self.usage.ru_majflt,
            "voluntary_switches": usage.ru_nvcsw - self.usage.ru_nvcsw,
            "involuntary_switches": usage.ru_nivcsw - self.usage.ru_nivcsw,
            "steal_share": ((steal - self.steal) / ticks / window / os.cpu_count()
                            if steal is not None and self.steal is not None and window > 0 else None),
            "anon_huge_kib": anon_huge_kib(),
            "hugetlb_kib": hugetlb_kib(),
            "max_rss_kib": usage.ru_maxrss,
            "ran_on": {str(cpu): count for cpu, count in sorted(self.cpus.items())},
            "affinity": cpus,
            "cpu_mhz": cpu_mhz(cpus),
            **layout(),
        }
