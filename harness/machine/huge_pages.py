"""Huge pages for CPU ranks: the setting of glibc's ``glibc.malloc.hugetlb`` tunable a session's
ranks get through their launch environment (``GLIBC_TUNABLES``), decided once from the node.

glibc reads the tunable when a process starts (from 2.35 on; older ones ignore it) and then serves
malloc's memory in huge pages: ``1`` asks the kernel for transparent huge pages (``madvise``), ``2``
takes them from the node's reserved pool of huge pages (``HugePages_Free`` in ``/proc/meminfo``;
reserving one needs root), falling back to ordinary pages where the pool runs out.
``--huge-pages auto`` gives CPU ranks the pool where it has room for a cell's ranks, else
transparent huge pages where the kernel offers them, else nothing, and GPU ranks nothing; ``thp``
and ``pool`` ask for one, ``off`` for none. A ``GLIBC_TUNABLES`` of the user's own that sets the
tunable wins over every one of them. :func:`decide` is the decision, a pure function of what
:func:`read_node` reads.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Mapping

VARIABLE = "GLIBC_TUNABLES"
TUNABLE = "glibc.malloc.hugetlb"
MODES = ("auto", "thp", "pool", "off")
"""``--huge-pages``: decided from the node, transparent huge pages, the reserved pool, none."""
VALUES = {"thp": "1", "pool": "2"}
"""The tunable's value for each kind of huge pages."""
POOL_PAGES_PER_RANK = 700
"""2 MiB pages of the reserved pool a CPU rank's heap is counted to take (1.4 GiB): ``auto`` takes
the pool only where this many are free for each rank a cell puts on the node. A ResNet-50 rank of
the default workload took up to 684 (one rank) and 711 with its launcher for two ranks
(docs/measurements.md, "Huge pages for CPU ranks"); where the pool runs out, glibc serves the rest
in ordinary pages."""
PAGE_KIB = 2048
FIRST_GLIBC = (2, 35)
"""The first glibc that reads ``glibc.malloc.hugetlb``."""
MEMINFO = Path("/proc/meminfo")
THP_ENABLED = Path("/sys/kernel/mm/transparent_hugepage/enabled")


class HugePagesError(ValueError):
    """Huge pages the node cannot give: the pool asked for where none is reserved."""


@dataclasses.dataclass(frozen=True, slots=True)
class HugePages:
    """The huge pages a session's ranks run with, and why, in one line."""

    entry: str | None
    """The ``glibc.malloc.hugetlb=N`` the ranks run with; None: glibc's defaults, no huge pages."""
    reason: str
    tunables: str | None = None
    """The ``GLIBC_TUNABLES`` the session's launch environment gets; None: it is left as it is."""

    @property
    def mode(self) -> str:
        """``thp``, ``pool`` or ``off``, as the fingerprint names them (:func:`mode_of`)."""
        return mode_of(self.entry) or "off"

    def words(self) -> str:
        """The setting and its reason, as the session's summary says them."""
        return f"{self.entry or 'off'} ({self.reason})"

    def over(self, launch_environment: Mapping[str, str]) -> dict[str, str]:
        """``launch_environment`` with this setting's ``GLIBC_TUNABLES`` where it sets one."""
        return {**launch_environment, VARIABLE: self.tunables} if self.tunables else dict(launch_environment)

    def to_json(self) -> dict:
        return {"mode": self.mode, "entry": self.entry, "reason": self.reason, "glibc_tunables": self.tunables}


def hugetlb_value(tunables: str | None) -> str | None:
    """The value a ``GLIBC_TUNABLES`` string gives ``glibc.malloc.hugetlb`` (the last, as glibc
    applies them in order); None where it gives none."""
    values = [value.strip() for name, _, value in (item.partition("=") for item in (tunables or "").split(":"))
              if name.strip() == TUNABLE]
    return values[-1] if values else None


def mode_of(tunables: str | None) -> str | None:
    """``thp`` or ``pool`` where a ``GLIBC_TUNABLES`` string sets the tunable to 1 or 2, the entry
    itself where it sets another value; None where it sets none, or 0."""
    value = hugetlb_value(tunables)
    if value in (None, "0"):
        return None
    return next((mode for mode, number in VALUES.items() if number == value), f"{TUNABLE}={value}")


def pool_pages_free(meminfo: str | None) -> int | None:
    """The free pages of the node's reserved pool of huge pages, counted in 2 MiB pages, from
    ``/proc/meminfo``'s text; None where no pool is reserved or the text does not say."""
    fields = {name.strip(): value.split() for name, _, value in
              (line.partition(":") for line in (meminfo or "").splitlines())}
    try:
        total, free, size_kib = (int(fields[name][0]) for name in ("HugePages_Total", "HugePages_Free",
                                                                    "Hugepagesize"))
    except (KeyError, IndexError, ValueError):
        return None
    return free * size_kib // PAGE_KIB if total > 0 else None


def thp_mode(enabled: str | None) -> str | None:
    """The kernel's transparent huge pages mode (``always``, ``madvise``, ``never``) from the text of
    ``/sys/kernel/mm/transparent_hugepage/enabled``; None where the kernel has none."""
    if not enabled or "[" not in enabled:
        return None
    return enabled.split("[", 1)[1].split("]", 1)[0]


def glibc_release(text: str | None) -> tuple[int, ...] | None:
    """glibc's version from ``os.confstr('CS_GNU_LIBC_VERSION')``'s text (``glibc 2.36``); None
    where the text names none (another C library)."""
    name, _, version = (text or "").partition(" ")
    try:
        return tuple(int(part) for part in version.split(".")) if name == "glibc" else None
    except ValueError:
        return None


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _libc_version() -> str | None:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION")
    except (ValueError, OSError):
        return None


def read_node() -> dict[str, str | None]:
    """This node's ``/proc/meminfo``, transparent huge pages mode and C library, as :func:`decide`
    takes them."""
    return {"meminfo": _read(MEMINFO), "thp": thp_mode(_read(THP_ENABLED)), "glibc": _libc_version()}


def decide(option: str, *, gpus: bool, ranks: int, meminfo: str | None, thp: str | None, glibc: str | None,
           tunables: str | None) -> HugePages:
    """The huge pages a session's ranks run with: ``option`` (``--huge-pages``), for GPU ranks or not,
    the most ranks a cell puts on a node, the node's ``/proc/meminfo`` text, its transparent huge
    pages mode, its C library (``glibc 2.36``) and the ``GLIBC_TUNABLES`` the ranks would get
    without it (the user's: the launch environment's, else the shell's). Raises
    :class:`HugePagesError` where ``pool`` is asked of a node that reserves none."""
    if (own := hugetlb_value(tunables)) is not None:
        return HugePages(entry=f"{TUNABLE}={own}", reason=f"your GLIBC_TUNABLES sets it, over --huge-pages {option}")
    if option == "off":
        return HugePages(entry=None, reason="--huge-pages off")
    if option == "auto" and gpus:
        return HugePages(entry=None, reason="GPU ranks: --huge-pages auto sets none")
    free, need = pool_pages_free(meminfo), ranks * POOL_PAGES_PER_RANK
    if option == "pool":
        if free is None:
            raise HugePagesError("--huge-pages pool: this node reserves no pool of huge pages (HugePages_Total in "
                                 "/proc/meminfo is 0; root reserves one with sysctl vm.nr_hugepages=N): use "
                                 "--huge-pages thp or auto")
        return _chosen("pool", f"--huge-pages pool; {_pool_words(free, need, ranks)}", tunables, glibc)
    if option == "thp":
        return _chosen("thp", f"--huge-pages thp; {_thp_words(thp)}", tunables, glibc)
    release = glibc_release(glibc)
    if release is None or release < FIRST_GLIBC:
        return HugePages(entry=None, reason=_ignored(glibc))
    if free is not None and free >= need:
        return _chosen("pool", _pool_words(free, need, ranks), tunables, glibc)
    if thp in ("always", "madvise"):
        return _chosen("thp", f"{_thp_words(thp)}; {_no_pool_words(free, need, ranks)}", tunables, glibc)
    return HugePages(entry=None, reason=f"transparent huge pages are {thp or 'not offered'} on this node and "
                                        f"{_no_pool_words(free, need, ranks)}")


def _chosen(mode: str, reason: str, tunables: str | None, glibc: str | None) -> HugePages:
    entry = f"{TUNABLE}={VALUES[mode]}"
    release = glibc_release(glibc)
    if release is None or release < FIRST_GLIBC:
        reason = f"{reason}; but {_ignored(glibc)}"
    return HugePages(entry=entry, reason=reason, tunables=f"{tunables}:{entry}" if tunables else entry)


def _ignored(glibc: str | None) -> str:
    if glibc_release(glibc) is None:
        return f"the C library ({glibc or 'unnamed'}) is not glibc, which alone reads {TUNABLE}"
    return f"{glibc} ignores {TUNABLE}, which glibc reads from {'.'.join(map(str, FIRST_GLIBC))} on"


def _thp_words(thp: str | None) -> str:
    if thp in ("always", "madvise"):
        return "transparent, madvise"
    return f"transparent, madvise, but the kernel's are {thp or 'not offered'} on this node: the ranks get none"


def _pool_words(free: int, need: int, ranks: int) -> str:
    if free >= need:
        return f"reserved pool, {free} 2 MiB pages free, {need} for {ranks} rank(s)"
    return (f"reserved pool, {free} 2 MiB pages free of the {need} {ranks} rank(s) are counted to take: what it "
            "cannot hold gets ordinary pages")


def _no_pool_words(free: int | None, need: int, ranks: int) -> str:
    if free is None:
        return "no reserved pool"
    return f"the reserved pool has {free} 2 MiB pages free of the {need} {ranks} rank(s) are counted to take"
