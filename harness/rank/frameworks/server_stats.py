"""What a parameter server records of the timed window, whatever serves it (torch RPC, ps-lite):
no framework imported here, so that every runtime's environment can use it."""
from __future__ import annotations

import dataclasses
import statistics


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
