"""A CPU quota for the benchmarks that slow the node down on purpose: a cgroup's CFS bandwidth, as a
hypervisor's or a container platform's cap holds a VM back."""
from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Sequence

import pytest

PERIOD_US = 100_000


class CpuQuota:
    """A cgroup (v2 ``cpu.max`` or v1 CFS quota) holding ``members`` (default: this process) and every
    process they start from then on, without a quota until :meth:`limit`; on leaving, the members
    return to the cgroup above and the cgroup is removed (once its last process ended)."""

    def __init__(self, members: Sequence[int] = (), root: Path = Path("/sys/fs/cgroup")):
        v2 = root / "cgroup.controllers"
        if v2.is_file() and "cpu" in v2.read_text().split():
            self.parent, self.write_quota = root, lambda us: (self.group / "cpu.max").write_text(f"{us} {PERIOD_US}")
        elif (root / "cpu" / "cpu.cfs_quota_us").is_file():
            self.parent = root / "cpu"
            self.write_quota = lambda us: (self.group / "cpu.cfs_quota_us").write_text(str(us))
        else:
            pytest.skip("no cgroup CPU controller to set a quota in")
        if not os.access(self.parent, os.W_OK):
            pytest.skip(f"a CPU quota needs write access to {self.parent} (root)")
        self.members = list(members) or [os.getpid()]
        self.group = self.parent / f"dlscale-quota-{os.getpid()}"

    def __enter__(self) -> CpuQuota:
        self.group.mkdir()
        for pid in self.members:
            (self.group / "cgroup.procs").write_text(str(pid))
        return self

    def limit(self, cores: float) -> None:
        """Holds the cgroup's processes to ``cores`` of CPU time together."""
        self.write_quota(int(cores * PERIOD_US))

    def __exit__(self, *exc) -> None:
        for pid in self.members:
            with contextlib.suppress(ProcessLookupError):
                (self.parent / "cgroup.procs").write_text(str(pid))
        for _ in range(100):
            with contextlib.suppress(OSError):
                self.group.rmdir()
                return
            time.sleep(0.1)
