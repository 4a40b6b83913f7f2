"""One cell measured as an A/B against a reference environment (``--against``): pairs of launches,
the reference's and the current one's, back to back on the same nodes, in balanced random order,
judged by :mod:`harness.judging.paired`. A pair with a failed launch is dropped and the next
rounds' orders rebalance the rest."""
from __future__ import annotations

import dataclasses
import random
import statistics
import time
from typing import Callable

from harness.judging.kinds import ERROR, PairedKind
from harness.judging.metrics import parallel_efficiency, summarize, trim_warmup
from harness.judging.paired import ORDERS, Pair, PairedVerdict, cause_of, judge_pairs, next_orders, pairs_wanted
from harness.launch.runner import CellRun
from harness.machine.references import Environment
from harness.rank.cell import Cell
from harness.session.results import to_json

SIDES = ("reference", "current")
LaunchFn = Callable[[str], CellRun]
"""Launches the cell once in the named side's environment."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PairSettings:
    """The A/B settings of a session (their defaults: harness.config.options.SuiteOptions)."""
    first: int
    most: int
    min_effect: float
    budget_s: float
    """Seconds a cell's pairs may take; no further round starts that would not fit."""


@dataclasses.dataclass(kw_only=True)
class PairedResult:
    cell: Cell
    reference: Environment
    pairs: list[Pair] = dataclasses.field(default_factory=list)
    dropped: list[str] = dataclasses.field(default_factory=list)
    """Each dropped pair: its order and which side's launch failed, with the error's first line."""
    verdict: PairedVerdict | None = None
    efficiency: dict[str, float] | None = None
    """Each side's E_G from its own pairs' throughputs, where the session measured the reference cell."""
    error: str | None = None
    """Why no verdict could be reached: every launch of a side failed."""
    stored_baseline: dict | None = None
    """What the cell's stored baseline says of the current side's launches, pooled (where it has
    one): a figure from another day judging the very launches the pairs judged."""
    launches: int = 0
    wall_s: float = 0.0
    seed: int = 0
    interrupted: bool = False
    """The session was interrupted (Ctrl-C, the batch system's SIGTERM) before the pairs' rounds were
    over: the verdict judges the pairs measured until then, the launch in flight left out."""

    @property
    def ok(self) -> bool:
        return self.verdict is not None

    @property
    def verdict_kind(self) -> str:
        return self.verdict.kind if self.verdict else ERROR

    def median(self, side: str) -> float:
        return statistics.median(getattr(pair, side) for pair in self.pairs)

    def to_json(self) -> dict:
        verdict = self.verdict
        return {
            "cell": self.cell.id, "reference": self.reference.label, "verdict": self.verdict_kind,
            "ratio": to_json(verdict.ratio) if verdict else None,
            "p_value": verdict.p_value if verdict else None, "min_effect": verdict.min_effect if verdict else None,
            "pairs_to_decide": verdict.pairs_to_decide if verdict else None,
            "flags": list(verdict.flags) if verdict else [], "efficiency": self.efficiency,
            "pairs": [dataclasses.asdict(pair) for pair in self.pairs], "dropped": self.dropped,
            "error": self.error, "launches": self.launches, "wall_s": round(self.wall_s, 3), "seed": self.seed,
            "stored_baseline": self.stored_baseline, "interrupted": self.interrupted,
        }


def launch_figure(run: CellRun) -> float:
    """One launch's throughput: all ranks, warm-up dropped."""
    return summarize(trim_warmup(run.records)[0]).throughput


class PairsInterrupted(KeyboardInterrupt):
    """The session's interrupt, raised by :func:`measure_pairs` once the pairs measured are judged:
    a caller that keeps results keeps ``result`` (marked ``interrupted``) and raises it again; any
    other caller lets the interrupt go on as it came."""

    def __init__(self, result: PairedResult):
        super().__init__()
        self.result = result


def measure_pairs(cell: Cell, reference: Environment, launch: LaunchFn, settings: PairSettings,
                  seed: int | None = None, on_progress: Callable[[str], None] | None = None) -> PairedResult:
    """Launch pairs until the verdict is clear, ``settings.most`` pairs are in or the budget would
    be passed. An interrupt (``KeyboardInterrupt``) ends the pairs: :class:`PairsInterrupted`
    carries the result, the pairs measured until then judged."""
    seed = random.SystemRandom().randrange(2 ** 32) if seed is None else seed
    result = PairedResult(cell=cell, reference=reference, seed=seed)
    started = time.monotonic()
    try:
        _measure_rounds(result, launch, settings, random.Random(seed), started, on_progress)
    except KeyboardInterrupt as interrupt:
        result.interrupted = True
        if len(result.pairs) >= 2:
            result.verdict = judge_pairs(result.pairs, min_effect=settings.min_effect)
        raise PairsInterrupted(result) from interrupt
    finally:
        result.wall_s = time.monotonic() - started
    return result


def _measure_rounds(result: PairedResult, launch: LaunchFn, settings: PairSettings, rng: random.Random,
                    started: float, on_progress: Callable[[str], None] | None) -> None:
    while (target := pairs_wanted(len(result.pairs), settings.first, settings.most)) is not None:
        per_pair = (time.monotonic() - started) / max(1, len(result.pairs) + len(result.dropped))
        if result.pairs and per_pair * (target - len(result.pairs)) > settings.budget_s - (time.monotonic() - started):
            break
        while len(result.pairs) < target:  # a dropped pair is made up for, the orders rebalanced
            for order in next_orders(target - len(result.pairs), [pair.order for pair in result.pairs], rng):
                _one_pair(result, order, launch)
                if len(result.dropped) >= 2 and len(result.dropped) > len(result.pairs):
                    result.error = (f"{len(result.dropped)} of {len(result.dropped) + len(result.pairs)} pairs "
                                    f"failed; last: {result.dropped[-1]}")
                    return
        if len(result.pairs) >= 2:
            result.verdict = judge_pairs(result.pairs, min_effect=settings.min_effect)
            if on_progress:
                on_progress(f"{result.cell.id}: {result.verdict.kind} after {len(result.pairs)} pairs "
                            f"({result.verdict.ratio.value:.3f})")
            if result.verdict.kind != PairedKind.INCONCLUSIVE:
                return


def _one_pair(result: PairedResult, order: str, launch: LaunchFn) -> None:
    sides = SIDES if order == ORDERS[0] else SIDES[::-1]
    figures = {}
    for side in sides:
        run = launch(side)
        result.launches += 1
        if not run.ok:
            first_line = (run.error or run.status).strip().splitlines()[0]
            result.dropped.append(f"{order}: the {side} launch {run.status}: {first_line}")
            return
        figures[side] = launch_figure(run)
    result.pairs.append(Pair(order=order, **figures))


def side_efficiency(result: PairedResult, reference_result: PairedResult, ranks: int,
                    reference_ranks: int) -> dict[str, float] | None:
    """Each side's E_G, from the median throughput of its own launches of the cell and of the
    reference cell (the study's eq. (3)-(4) with throughputs)."""
    if not (result.pairs and reference_result.pairs):
        return None
    return {side: parallel_efficiency(result.median(side), ranks, reference_result.median(side), reference_ranks)
            for side in SIDES}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Confirmation:
    """A stored-baseline verdict confirmed by an A/B against the baseline's environment."""
    cause: str
    """``software`` (the current environment is slower than the baseline's, here and now),
    ``system`` (both run the same: the node changed) or ``unknown``."""
    message: str
    paired: PairedResult | None = None

    def to_json(self) -> dict:
        return {"cause": self.cause, "message": self.message,
                "paired": self.paired.to_json() if self.paired else None}


def confirmed_by(paired: PairedResult, difference: str) -> Confirmation:
    """What an A/B of the current environment against the baseline's says about a cell's verdict."""
    if paired.verdict is None:
        return Confirmation(cause="unknown", message=f"the A/B against the baseline's environment failed: {paired.error}",
                            paired=paired)
    cause = cause_of(paired.verdict)
    reading = {"software": "software: the current environment is slower than the baseline's on this node, now",
               "system": "system: both environments run the same on this node now, so the node is slower or "
                         "faster than when the baseline was recorded",
               "unknown": "unknown: the A/B against the baseline's environment is inconclusive"}[cause]
    return Confirmation(cause=cause, message=f"{reading} ({paired.verdict.message}); changed since the baseline: "
                                             f"{difference}", paired=paired)

