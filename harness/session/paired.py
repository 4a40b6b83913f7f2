"""One cell measured as an A/B against a reference environment (``--against``, ``--confirm``):
pairs of launches, the reference's and the current one's, on the same nodes, measured through the
A/B core (:mod:`harness.session.rounds`: looks, failures, outside work) and judged by
:func:`harness.judging.paired.judge` at pre-declared looks whose error is spent
(:mod:`harness.judging.sequential`).

A pair is two launches back to back in balanced random order, or, in a duet (``--duet``), the two
at once on the two halves of the node, which side gets which half balanced and random. A step in
the node's speed within the session that could have made the verdict holds it ``inconclusive``.

Before any speed verdict the first pair's counted work is compared (:mod:`harness.judging.work`):
what moved between the sides' steps (operators, FLOPs, collectives, memory, data), or that they did
the same work; each later launch's work is checked against its side's first."""
from __future__ import annotations

import dataclasses
import random
import statistics
import time
from typing import Callable, Mapping

from harness.judging.confirmation import Conclusion, Rebuild, Split, conclude, figure_now, judged_now
from harness.judging.kinds import ERROR, PairedKind
from harness.judging.metrics import parallel_efficiency
from harness.judging.paired import (DUET_ORDERS, ORDERS, Look, Pair, PairedVerdict, hold, judge, next_orders,
                                    repeated_p_value, sequential_look)
from harness.judging.stats import Estimate
from harness.judging.verdicts import Reference
from harness.judging.work import WorkChange, cell_work, compare_work, work_reading
from harness.launch.runner import CellRun
from harness.machine.references import Environment
from harness.rank.cell import Cell
from harness.session.results import CellResult, to_json
from harness.session.rounds import (LaunchedFn, PairSettings, RoundFn, back_to_back, busy_holds, judge_as_they_stand,
                                    new_look, run_rounds, timed_launches)

SIDES = ("reference", "current")
LaunchFn = Callable[[str], CellRun]
"""Launches the cell once in the named side's environment."""
TogetherFn = Callable[[Mapping[str, int]], dict[str, CellRun]]
"""A duet: launches both sides at once, each on the half of the node it is given (0 or 1)."""
HALVES = {DUET_ORDERS[0]: {"reference": 0, "current": 1}, DUET_ORDERS[1]: {"reference": 1, "current": 0}}
"""Which half each side takes in a duet pair of each arrangement."""


@dataclasses.dataclass(kw_only=True)
class PairedResult:
    """An A/B's pairs and what they were judged: a :class:`harness.session.rounds.Comparison` of two
    sides, the reference environment and the current one."""
    cell: Cell
    reference: Environment
    pairs: list[Pair] = dataclasses.field(default_factory=list)
    looks: list[int] = dataclasses.field(default_factory=list)
    """The pair counts the verdict was judged at, in order."""
    duet: bool = False
    """The pairs' two launches ran at once, on the two halves of the node."""
    failures: list[dict] = dataclasses.field(default_factory=list)
    """Each failed launch: its side, the pair's order, its status and the error's first line."""
    left_out: list[dict] = dataclasses.field(default_factory=list)
    """Each pair left out: both sides' figures and outside-work shares, and why."""
    launch_log: list[dict] = dataclasses.field(default_factory=list)
    """Every launch: its side, pair, status, wall time, measured window and figure."""
    verdict: PairedVerdict | None = None
    efficiency: dict[str, float] | None = None
    """Each side's E_G from its own pairs' throughputs, where the session measured the reference cell."""
    error: str | None = None
    """Why the A/B has no verdict to stand on: a launch failed (named by side), or none could be judged."""
    stored_baseline: dict | None = None
    """What the cell's stored baseline says of the current side's launches, pooled (where it has
    one): a figure from another day judging the very launches the pairs judged."""
    change_p: float = 1.0
    """The repeated p-value of the change the pairs called (harness.judging.paired.repeated_p_value);
    1.0 where they called none."""
    false_discovery: dict | None = None
    """Where the session compared several cells: whether a change called here stands under the
    Benjamini-Hochberg control across them (set at the session's end)."""
    launches: int = 0
    wall_s: float = 0.0
    seed: int = 0
    work: dict[str, dict | None] | None = None
    """Each side's counted work in the first pair both sides completed (harness.judging.work.cell_work)."""
    work_change: WorkChange | None = None
    """What moved from the reference's work to the current side's in that pair."""
    instructions: dict | None = None
    """Each side's host instructions per step, counted under callgrind before the pairs, and what
    moved (``--count-instructions``, harness.session.instructions)."""
    interrupted: bool = False
    """The session was interrupted (Ctrl-C, the batch system's SIGTERM) before the pairs' rounds were
    over: the verdict judges the pairs measured until then, the launch in flight left out."""

    sides = SIDES
    unit = "pair"

    @property
    def kept(self) -> list[Pair]:
        return self.pairs

    def orders(self, count: int, rng: random.Random) -> list[str]:
        return next_orders(count, [pair.order for pair in self.pairs], rng, DUET_ORDERS if self.duet else ORDERS)

    def launched(self, runs: Mapping[str, CellRun]) -> None:
        """The first pair both sides completed: their counted work compared before any speed verdict."""
        if self.work_change is None and len(runs) == len(SIDES) and all(run.ok for run in runs.values()):
            self.work = {side: cell_work(run.records, run.server_records) for side, run in runs.items()}
            self.work_change = compare_work(self.work["reference"], self.work["current"])

    def keep(self, order: str, figures: Mapping[str, float]) -> None:
        self.pairs.append(Pair(order=order, **figures))

    def judge(self, settings: PairSettings) -> bool:
        """The pairs judged at a new look (:func:`harness.judging.paired.judge`: the error the look
        spends, then what holds its verdict back), the node too busy among those reasons; True where
        the verdict is decided."""
        if not new_look(self):
            return False
        look = sequential_look(self.looks, settings.most, settings.alpha, settings.rule)
        self.verdict = judge(self.pairs, min_effect=settings.min_effect, look=look, holds=busy_holds(self))
        return self.verdict.kind != PairedKind.INCONCLUSIVE

    @property
    def ok(self) -> bool:
        return self.verdict is not None and self.error is None

    @property
    def verdict_kind(self) -> str:
        if not self.ok:
            return ERROR
        if self.false_discovery and not self.false_discovery["stands"]:
            return PairedKind.INCONCLUSIVE  # a change the control across the session's cells does not let stand
        return self.verdict.kind

    def median(self, side: str) -> float:
        return statistics.median(getattr(pair, side) for pair in self.pairs)

    @property
    def work_line(self) -> str | None:
        """The work beside the speed: what moved, or the same work with where a speed change lies
        then; with the pairs the speed would need where it is undecided."""
        if self.work_change is None:
            return None
        line = work_reading(self.work_change, self.verdict_kind if self.ok else None)
        needed = self.verdict.pairs_needed if self.verdict and self.work_change.changed else None
        return f"{line} ({needed})" if needed else line

    def work_differs(self) -> list[str]:
        """The sides some of whose launches counted other work than their first: counts are exact, so
        those launches did not run the same steps."""
        return [side for side in SIDES
                if len({entry["work_digest"] for entry in self.launch_log
                        if entry["side"] == side and entry.get("work_digest")}) > 1]

    def failed_launches(self, side: str) -> int:
        return sum(failure["side"] == side for failure in self.failures)

    def side_times(self, side: str) -> tuple[float, float] | None:
        """The side's median launch wall time and median measured window (seconds) over its
        launches that completed; None where none did."""
        done = [entry for entry in timed_launches(self.launch_log) if entry["side"] == side]
        if not done:
            return None
        return (statistics.median(entry["wall_s"] for entry in done),
                statistics.median(entry["window_s"] for entry in done))

    @classmethod
    def from_json(cls, data: Mapping, cell: Cell, reference: Environment) -> PairedResult:
        """A result as its :meth:`to_json` kept it, to go on from (``measure_pairs(resume=...)``): its
        pairs, looks, failures, pairs left out, launch log, launches, time and seed. Its verdict comes
        back only where it was judged at the pairs kept (its last look is their count);
        ``interrupted`` does not (the run that goes on from it is not)."""
        pairs = [Pair(**pair) for pair in data["pairs"]]
        looks = [int(look) for look in data.get("looks") or []]
        verdict, ratio, look = None, Estimate.from_json(data.get("ratio")), data.get("look")
        if data.get("pairs_verdict") and ratio and look and looks[-1:] == [len(pairs)]:
            verdict = PairedVerdict(
                kind=PairedKind(data["pairs_verdict"]), ratio=ratio, p_value=float(data["p_value"]), pairs=len(pairs),
                min_effect=float(data["min_effect"]),
                look=Look(looks=tuple(look["looks"]), most=int(look["most"]), level=float(look["level"]),
                          spent=float(look["spent"]), rule=look["rule"], alpha=float(look["alpha"])),
                order_effect=Estimate.from_json(data.get("order_effect")), flags=tuple(data.get("flags") or ()),
                pairs_to_decide=data.get("pairs_to_decide"))
        return cls(cell=cell, reference=reference, pairs=pairs, looks=looks, duet=bool(data.get("duet")),
                   failures=list(data.get("failures") or []), left_out=list(data.get("left_out") or []),
                   launch_log=list(data.get("launch_log") or []), verdict=verdict, error=data.get("error"),
                   launches=int(data.get("launches") or 0), wall_s=float(data.get("wall_s") or 0.0),
                   seed=int(data["seed"]), change_p=float(data.get("change_p", 1.0)),
                   work=(data.get("work") or {}).get("sides"),
                   work_change=WorkChange.from_json(data["work"]["change"]) if data.get("work") else None,
                   instructions=data.get("instructions"))

    def to_json(self) -> dict:
        verdict = self.verdict
        return {
            "cell": self.cell.id, "reference": self.reference.label, "verdict": self.verdict_kind,
            "pairs_verdict": verdict.kind if verdict else None,
            "ratio": to_json(verdict.ratio) if verdict else None,
            "p_value": verdict.p_value if verdict else None, "min_effect": verdict.min_effect if verdict else None,
            "look": verdict.look.to_json() if verdict else None, "looks": self.looks,
            "order_effect": to_json(verdict.order_effect) if verdict and verdict.order_effect else None,
            "pairs_to_decide": verdict.pairs_to_decide if verdict else None, "duet": self.duet,
            "flags": list(verdict.flags) if verdict else [], "efficiency": self.efficiency,
            "pairs": [dataclasses.asdict(pair) for pair in self.pairs],
            "failures": self.failures, "failed_launches": {side: self.failed_launches(side) for side in SIDES},
            "left_out": self.left_out, "launch_log": self.launch_log,
            "side_times": {side: self.side_times(side) for side in SIDES},
            "error": self.error, "launches": self.launches, "wall_s": round(self.wall_s, 3), "seed": self.seed,
            "stored_baseline": self.stored_baseline, "change_p": self.change_p,
            "false_discovery": self.false_discovery,
            "work": {"sides": self.work, "change": self.work_change.to_json(), "reading": self.work_line,
                     "launches_differ": self.work_differs()} if self.work_change else None,
            "instructions": self.instructions, "interrupted": self.interrupted,
        }


class PairsInterrupted(KeyboardInterrupt):
    """The session's interrupt, raised by :func:`measure_pairs` once the pairs measured are judged:
    a caller that keeps results keeps ``result`` (marked ``interrupted``) and raises it again; any
    other caller lets the interrupt go on as it came."""

    def __init__(self, result: PairedResult):
        super().__init__()
        self.result = result


def duet_pairs(together: TogetherFn) -> RoundFn:
    """Pairs of launches at once, each side on the half of the node the arrangement gives it."""
    def pair(arrangement: str, launched: LaunchedFn) -> dict[str, CellRun]:
        runs = together(HALVES[arrangement])
        for side, run in runs.items():
            launched(side, run)
        return runs
    return pair


def _sequence(order: str) -> tuple[str, ...]:
    return SIDES if order == ORDERS[0] else SIDES[::-1]


def measure_pairs(cell: Cell, reference: Environment, launch: LaunchFn | None, settings: PairSettings,
                  seed: int | None = None, on_progress: Callable[[str], None] | None = None, *,
                  together: TogetherFn | None = None, on_pair: Callable[[PairedResult], None] | None = None,
                  resume: PairedResult | None = None) -> PairedResult:
    """Launch pairs through the A/B core (:func:`harness.session.rounds.run_rounds`) until a look
    decides, ``settings.most`` pairs are in or the budget would be passed; stop at the first failed
    launch. ``together``: a duet instead of ``launch``'s back-to-back pairs. ``on_pair`` is called
    after every pair (kept, left out or failed); ``resume`` goes on from a result kept earlier (its
    pairs, looks and launches count). An interrupt (``KeyboardInterrupt``) ends the pairs:
    :class:`PairsInterrupted` carries the result, the pairs measured until then judged."""
    seed = random.SystemRandom().randrange(2 ** 32) if seed is None else seed
    result = resume or PairedResult(cell=cell, reference=reference, seed=seed, duet=together is not None)
    pair_of = duet_pairs(together) if together is not None else back_to_back(launch, _sequence)
    started = time.monotonic() - result.wall_s
    compared = [result.work_change is not None]

    def after_pair() -> None:
        if on_progress and not compared[0] and result.work_change is not None:  # before any speed verdict
            on_progress(f"{result.cell.id}: {result.work_change.text()} (the first pair's counted work)")
        compared[0] = result.work_change is not None
        (on_pair or (lambda _: None))(result)

    def after_look() -> None:
        if on_progress:
            on_progress(f"{result.cell.id}: {result.verdict.kind} after {len(result.pairs)} pairs "
                        f"({result.verdict.ratio.value:.3f})")

    try:
        run_rounds(result, pair_of, settings, random.Random(seed + len(result.pairs)), started=started,
                   on_round=after_pair, on_look=after_look)
    except KeyboardInterrupt as interrupt:
        result.interrupted = True
        judge_as_they_stand(result, settings)
        raise PairsInterrupted(result) from interrupt
    finally:
        result.wall_s = time.monotonic() - started
        if result.verdict is not None:  # what the false-discovery control across the session's A/Bs reads
            result.change_p = repeated_p_value([pair.log_ratio for pair in result.pairs], result.looks,
                                               settings.most, result.verdict.kind, settings.min_effect, settings.rule)
    return result


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
    """A stored-baseline verdict confirmed by an A/B against the baseline's environment, rebuilt
    (:mod:`harness.judging.confirmation`)."""
    cause: str
    """``software`` (the current environment is slower than the baseline's on this node now),
    ``system`` (the baseline's environment, rebuilt exactly, runs as the current one does and its own
    figure on this node now reproduces the stored move) or ``unknown`` (the message says why)."""
    message: str
    paired: PairedResult | None = None
    split: Split | None = None
    """The stored move in numbers: the software's part (the A/B's ratio) and the system's."""
    not_rebuilt: tuple[str, ...] = ()
    """Each part of the baseline's environment that could not be rebuilt."""

    @classmethod
    def of(cls, conclusion: Conclusion, rebuild: Rebuild | None = None,
           paired: PairedResult | None = None) -> Confirmation:
        return cls(cause=conclusion.cause, message=conclusion.message, paired=paired, split=conclusion.split,
                   not_rebuilt=rebuild.missing if rebuild else ())

    def to_json(self) -> dict:
        return {"cause": self.cause, "message": self.message, "split": self.split.to_json() if self.split else None,
                "not_rebuilt": list(self.not_rebuilt), "paired": self.paired.to_json() if self.paired else None}


def confirmed_by(paired: PairedResult, rebuild: Rebuild, *, stored: Estimate, band: Reference,
                 difference: str = "") -> Confirmation:
    """What an A/B of the current environment against the baseline's, rebuilt as ``rebuild`` says,
    makes of a cell's stored move (``stored``: its figure over the baseline's, whose band is
    ``band``): the reference side's launches are the baseline environment's figure on this node now,
    each computed as a stored figure is (its warm-up trimmed), not as the pairs' ratio takes it. A
    launch that failed leaves the cause ``unknown``, naming the failure, whatever the pairs before it
    said: their verdict comes from a look the plan did not make, and the failure may be the change's.
    A duet's launches ran on half the node: they are not the baseline environment's figure as it was
    stored, so they leave the cause ``software`` or ``unknown``, never ``system``."""
    verdict = paired.verdict
    not_now = ("the duet's launches ran on half the node, and half-node launches cannot reproduce a stored figure "
               "measured on the whole node; run --confirm without --duet to tell the system from the software"
               if paired.duet else None)
    as_stored = [] if not_now else [entry["throughput_as_stored"] for entry in timed_launches(paired.launch_log)
                                    if entry["side"] == "reference"]
    now = figure_now(as_stored, band.value) if as_stored else None
    split = Split.of(stored, verdict.ratio if verdict else None, now,
                     judged_now(now, band, len(as_stored)) if now else None, not_now)
    error = paired.error or (None if verdict else "interrupted" if paired.interrupted else "no pair was judged")
    return Confirmation.of(conclude(rebuild, split, verdict=verdict, error=error, difference=difference), rebuild,
                           paired)


@dataclasses.dataclass(frozen=True)
class ConfirmingAB:
    """An A/B that ``--confirm`` ran for a cell's stored-baseline verdict, kept for the session's
    false-discovery control: the confirmation stands on the A/B's call, so a call the control holds
    back is concluded again (:meth:`held`)."""
    result: CellResult
    paired: PairedResult
    conclude: Callable[[PairedResult], Confirmation]
    """The confirmation an A/B's pairs give, as :func:`harness.session.paired.confirmed_by` makes it."""

    def held(self) -> Confirmation:
        """The confirmation concluded again from the A/B's call held ``inconclusive`` by the control
        (its cause then ``unknown``, saying why); the A/B kept as it was, its ``false_discovery`` set."""
        control = self.paired.false_discovery
        reason = (f"the call does not stand among the {control['cells']} A/Bs of the session (Benjamini-Hochberg at "
                  f"{control['rate']:.0%}, repeated p {control['repeated_p']:.2g})")
        again = dataclasses.replace(self.paired, verdict=hold(self.paired.verdict, [reason]))
        return dataclasses.replace(self.conclude(again), paired=self.paired)
