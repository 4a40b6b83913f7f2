"""The thresholds a system sets for itself, declared once: their defaults were tuned on this
project's shared 2-core VMs, and a system whose nodes behave otherwise gives its own in its baseline
file (``"tunables"``, ``baselines/README.md``). Command-line options, where one exists, override both."""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from harness.common.jsonio import finite_number


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Tunables:
    default_band: float = 0.15
    """Relative band (+-) of a baseline metric whose entry gives none (a hand-written entry)."""
    same_machine_drift: float = 0.30
    """How far a machine's speed by the yardstick may drift from its baseline's and still be taken for
    the same machine. Measured on the shared 2-core CI node: up to ~25% within a session (22% within
    one half-minute launch; docs/verdicts.md, "Machine yardstick"), while fresh VMs of the same "AMD
    EPYC" type ran the yardstick 2.5x-4.3x faster. Normalising carries a drift, not a change of
    machine: how far torch's speed follows the yardstick's is known only within that range."""
    yardstick_noise: float = 0.10
    """How far one launch's yardstick strays from a baseline's on the same quiet machine when the
    baseline does not say (it was recorded from one launch): on the 2-core CI machine, 8
    back-to-back launches of the self-test's cell gave a yardstick cv of 2.8%, a 99% prediction
    half-width of 10.4%, while their throughput's cv was 3.0%."""
    notable_wait: float = 0.05
    """A share of the ranks' cores' time taken by outside work (or, where that is not measured, a
    wait for a CPU this much above the baseline's) that makes a launch contended and a fail
    untrustworthy. No larger than the narrowest band (5%): summed over a rank's threads, the wait
    is at least the time its compute thread lost, so a neighbour that alone pushed a cell past its
    band shows here."""
    min_effect: float = 0.03
    """Smallest relative change in throughput an A/B calls ``regressed`` or ``improved``: on the
    2-core VMs, ten A/A comparisons of the A/B cell at 16 pairs gave median ratios of 0.977-1.033
    and called no change (docs/measurements.md, "A/A")."""

    @classmethod
    def from_json(cls, data: Any) -> Tunables:
        """A baseline file's ``"tunables"`` over the defaults; ``ValueError`` naming the first key that
        is not a tunable or whose value is not a fraction between 0 and 1."""
        if data is None:
            return cls()
        if not isinstance(data, Mapping):
            raise ValueError(f'"tunables" must be an object, found {type(data).__name__}')
        names = [field.name for field in dataclasses.fields(cls)]
        for name, value in data.items():
            if name not in names:
                raise ValueError(f'"tunables": unknown tunable {name!r}; known: {", ".join(names)}')
            if not finite_number(value) or not 0 < value < 1:
                raise ValueError(f'"tunables": {name} must be a fraction between 0 and 1, found {value!r}')
        return cls(**{name: float(value) for name, value in data.items()})

    def differences(self) -> dict[str, float]:
        """The tunables that differ from the defaults: what a summary names."""
        default = Tunables()
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)
                if getattr(self, field.name) != getattr(default, field.name)}


DEFAULT_TUNABLES = Tunables()
