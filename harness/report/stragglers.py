"""The wait for the slowest rank: what a synchronous step costs beyond one rank's own step, because
every step ends when the last of G ranks is done.

A rank's step is its typical step plus two kinds of hold-up, each drawn anew per rank per step:

- a **spread** every step has (caches, the scheduler, a collective's own jitter): normal, standard
  deviation ``spread_s``; the slowest of G draws is ``spread_s x z(G)`` beyond the mean, z(G) the
  expected largest of G standard normal draws, which grows like sqrt(2 ln G): the Gumbel domain
  of extreme values;
- a **delay** of fixed duration ``d`` that holds a rank up in a step with probability ``p`` (an OS
  daemon, a file-system stall, a retransmitted packet): the noise model of Tsafrir et al., "System
  noise, OS clock ticks, and fine-grained parallel applications" (ICS 2005), and the fan-out tail
  of Dean and Barroso, "The tail at scale" (CACM 2013). The slowest of G ranks is delayed with
  probability 1 - (1 - p)^G, so the step waits ``d x (1 - (1 - p)^G)``: linear in G while
  G p << 1, saturating at ``d`` once G p >> 1.

Both cost fixed seconds, not a share of the step: a longer step (ResNet152's) loses a smaller
share to them than a short one (ResNet50's). Where only ``p d`` is known (the mean a rank loses
per step), ``duration_s = inf`` is the rare-delay limit p -> 0 at fixed p d: at most one rank is
delayed in a step, and the wait is ``p d x (G - 1)``.

    expected_wait(delay, G)        seconds beyond one rank's mean step
    estimate_rank_delay(steps)     the spread and the delay from each rank's measured step times
    delays_with_wait(w, G, G_ref)  the shortest and the rarest delay that cost w between G_ref and G
    busy_collision(burst, step)    the delay other work's bursts on a rank's GPU cause its collectives
"""
from __future__ import annotations

import dataclasses
import functools
import math
import statistics
from typing import Sequence

MAD_TO_SD = 1.4826
"""A normal distribution's standard deviation over its median absolute deviation."""
TAIL_SPREADS = 3.0
"""An excess over the rank's median step beyond this many spreads counts as a delay, not spread."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RankDelay:
    """What holds one rank up in a step, beyond its typical step."""

    spread_s: float = 0.0
    """Standard deviation of a rank's ordinary step-to-step variation."""
    mean_s: float = 0.0
    """What the fixed-duration delays cost a rank per step on average: probability x duration."""
    duration_s: float = math.inf
    """How long one delay lasts; inf: the rare-delay limit (only ``mean_s`` is known)."""

    def __post_init__(self) -> None:
        if self.spread_s < 0 or self.mean_s < 0 or not self.duration_s > 0:
            raise ValueError(f"a rank delay needs spread >= 0, mean >= 0, duration > 0: {self}")
        if self.mean_s > self.duration_s:
            raise ValueError(f"a delay of {self.duration_s} s cannot cost {self.mean_s} s a step on average")

    @property
    def probability(self) -> float:
        """The chance a rank's step is delayed (0 in the rare-delay limit)."""
        return self.mean_s / self.duration_s

    def describe(self) -> str:
        delay = ("none" if self.mean_s == 0 else
                 f"{self.mean_s * 1e3:.3g} ms a step on average, each delay long (the rare-delay limit)"
                 if math.isinf(self.duration_s) else
                 f"{self.duration_s * 1e3:.3g} ms in {self.probability:.2%} of a rank's steps")
        return f"spread {self.spread_s * 1e3:.3g} ms; fixed-duration delay: {delay}"


@functools.lru_cache(maxsize=None)
def expected_max_standard_normal(draws: int) -> float:
    """The expected largest of ``draws`` standard normal draws, n x integral of x phi(x) Phi(x)^(n-1)
    (trapezoid rule over [-9, 9]; 0 for one draw)."""
    if draws <= 1:
        return 0.0
    normal, step = statistics.NormalDist(), 18 / 3600
    points = [-9 + i * step for i in range(3601)]
    values = [x * normal.pdf(x) * normal.cdf(x) ** (draws - 1) for x in points]
    return draws * step * (sum(values) - (values[0] + values[-1]) / 2)


def expected_wait(delay: RankDelay, ranks: int) -> float:
    """Seconds the slowest of ``ranks`` ranks takes beyond one rank's mean step: 0 for one rank."""
    if ranks <= 1:
        return 0.0
    spread = delay.spread_s * expected_max_standard_normal(ranks)
    if delay.mean_s == 0:
        return spread
    if math.isinf(delay.duration_s):
        return spread + delay.mean_s * (ranks - 1)
    p = delay.probability
    return spread + delay.duration_s * ((1 - (1 - p) ** ranks) - p)


def estimate_rank_delay(step_times_by_rank: Sequence[Sequence[float]], *,
                        tail_spreads: float = TAIL_SPREADS) -> RankDelay:
    """The spread and the fixed-duration delay of a cell's ranks, from each rank's timed steps.

    Each step's excess over its rank's median: the spread is the body's (1.4826 x the median
    absolute deviation, pooled over ranks as a root mean square), a delay any excess beyond
    ``tail_spreads`` spreads; its probability the share of steps delayed, its duration their mean
    excess. Ranks with fewer than 3 steps say nothing and are skipped."""
    spreads, excesses = [], []
    for steps in step_times_by_rank:
        if len(steps) < 3:
            continue
        median = statistics.median(steps)
        rank_excess = [step - median for step in steps]
        spreads.append(MAD_TO_SD * statistics.median(abs(e) for e in rank_excess))
        excesses.append(rank_excess)
    if not spreads:
        return RankDelay()
    spread = math.sqrt(statistics.fmean(s * s for s in spreads))
    delayed = [e for rank_spread, rank_excess in zip(spreads, excesses) for e in rank_excess
               if e > tail_spreads * rank_spread and e > 0]
    steps = sum(len(rank_excess) for rank_excess in excesses)
    if not delayed:
        return RankDelay(spread_s=spread)
    duration = statistics.fmean(delayed)
    return RankDelay(spread_s=spread, mean_s=duration * len(delayed) / steps, duration_s=duration)


def delays_with_wait(wait_s: float, *, ranks: int, reference_ranks: int) -> tuple[RankDelay, RankDelay]:
    """(shortest, rarest): the two fixed-duration delays (no spread) that make the slowest of
    ``ranks`` ranks wait ``wait_s`` longer than the slowest of ``reference_ranks``. Every delay
    between them does too; they bound what a single such figure says at other rank counts. The
    shortest is the probability p* that maximises (1-p)^ref - (1-p)^G, the rarest the p -> 0 limit."""
    if not ranks > reference_ranks >= 1:
        raise ValueError(f"need ranks > reference ranks >= 1, got {ranks} and {reference_ranks}")
    if wait_s <= 0:
        return RankDelay(), RankDelay()
    p = 1 - (reference_ranks / ranks) ** (1 / (ranks - reference_ranks))
    duration = wait_s / ((1 - p) ** reference_ranks - (1 - p) ** ranks)
    shortest = RankDelay(mean_s=p * duration, duration_s=duration)
    rarest = RankDelay(mean_s=wait_s / (ranks - reference_ranks))
    return shortest, rarest


def busy_collision(burst_s: float, step_s: float) -> RankDelay:
    """The delay a rank's GPU causes the others when it runs a burst of other work each step (a
    loader decoding the next batch on it): a collective due while the burst runs waits for it,
    since kernels are not preempted. A delay of the burst's length, in the share of steps the
    burst fills: burst / step. (Fixed-duration: a collective that arrives mid-burst waits only the
    rest of it, so the wait among few ranks is overstated; among many, one arrives near the start.)"""
    if burst_s <= 0:
        return RankDelay()
    if not step_s >= burst_s:
        raise ValueError(f"a burst of {burst_s} s does not fit in a step of {step_s} s")
    return RankDelay(mean_s=burst_s * burst_s / step_s, duration_s=burst_s)
