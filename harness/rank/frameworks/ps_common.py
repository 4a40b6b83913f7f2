"""What the parameter-server adapters share, whatever serves (torch RPC, ps-lite): their modes, the
checks of their settings, and what a server records of the timed window. No framework is imported
here, so that every runtime's environment can use it."""
from __future__ import annotations

import dataclasses
import statistics

from harness.rank.frameworks.base import Role

MODES = ("sync", "async")


def check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"unknown parameter-server mode {mode!r}; valid modes: {', '.join(MODES)}")


def check_settings(mode: str, servers: int) -> None:
    check_mode(mode)
    if servers < 1:
        raise ValueError(f"a parameter-server cell needs at least one server, got --ps-servers {servers}")


def workers_beside(servers: int, world_size: int) -> int:
    """The ranks that train, the last ``servers`` of ``world_size`` serving."""
    workers = world_size - servers
    if workers < 1:
        raise ValueError(f"{world_size} rank(s) leave no worker beside {servers} parameter server(s): "
                         f"a parameter-server cell needs more ranks than --ps-servers")
    return workers


class ServerRoles:
    """What every parameter-server adapter derives from its roles: of a launch's ranks the last
    ``servers`` serve, the ``workers`` before them train. A mixin placed before the adapter's base;
    the adapter sets ``mode``, ``servers``, ``rank`` and ``workers``."""

    mode: str
    servers: int
    workers: int
    worker_role = Role.TRAINS
    """What the ranks that do not serve do: train, or follow a coordinator that steps them."""

    def serves(self) -> bool:
        """Whether this rank is one of the servers."""
        return self.rank.rank >= self.workers

    def role(self) -> Role:
        return Role.SERVES if self.serves() else self.worker_role

    def training_ranks(self, world_size: int) -> int:
        return world_size - self.servers

    def timed_updates_expected(self, steps: int) -> int:
        """A server's updates in the timed window: one per step, or one per worker's step async."""
        return steps * (self.workers if self.mode == "async" else 1)

    def learning_rate_rule(self) -> str:
        return ("linearly scaled over the workers" if self.mode == "sync"
                else "one worker's batch per update (the scaled rate over the workers)")


@dataclasses.dataclass
class ServerStats:
    """What a server saw of the timed window's gradients."""

    updates: int = 0
    """Updates applied for timed gradients."""
    first_arrival: float | None = None
    last_update: float | None = None
    staleness: list[int] = dataclasses.field(default_factory=list)
    """Per timed gradient, where the server can tell (empty where it cannot)."""

    def to_json(self) -> dict:
        span = (self.last_update - self.first_arrival) if self.updates and self.first_arrival is not None else None
        return {"timed_updates": self.updates, "timed_span_s": span,
                "updates_per_s": self.updates / span if span else None,
                "staleness_mean": statistics.fmean(self.staleness) if self.staleness else None,
                "staleness_max": max(self.staleness) if self.staleness else None,
                "staleness_count": len(self.staleness)}
