"""One cell measured as an A/B against a reference environment (``--against``): pairs of launches,
the reference's and the current one's, on the same nodes, judged by :mod:`harness.judging.paired`
at pre-declared looks whose error is spent (:mod:`harness.judging.sequential`).

A pair is two launches back to back in balanced random order, or, in a duet (``--duet``), the two
at once on the two halves of the node, which side gets which half balanced and random. What each
launch cost is kept: its wall time and measured window. A failed launch is evidence, not a dropped
pair: it ends the A/B with an ``error`` that names the side (in a duet, the one that failed first).
A pair whose two launches saw outside work on their cores (another job, the hypervisor's steal)
that differs by more than the minimum effect, or either of which was contended, is left out,
counted and made up for; a step in the node's speed within the session that could have made the
verdict holds it ``inconclusive``.

Before any speed verdict the first pair's counted work is compared (:mod:`harness.judging.work`):
what moved between the sides' steps (operators, FLOPs, collectives, memory, data), or that they did
the same work; each later launch's work is checked against its side's first."""
from __future__ import annotations

import dataclasses
import math
import random
import statistics
import time
from typing import Callable, Mapping

from harness.judging.confirmation import Conclusion, Rebuild, Split, conclude, figure_now, judged_now
from harness.judging.contention import contended
from harness.judging.kinds import ERROR, PairedKind
from harness.judging.metrics import parallel_efficiency, step_samples, summarize, trim_warmup
from harness.judging.paired import (ALPHA, DUET_ORDERS, ORDERS, SPENDING_RULE, Look, Pair, PairedVerdict,
                                    hold, judge_pairs, next_orders, pairs_wanted, sequential_look, speed_steps)
from harness.judging.sequential import planned_looks
from harness.judging.stats import Estimate, throughput_point
from harness.judging.tunables import DEFAULT_TUNABLES
from harness.judging.verdicts import Reference
from harness.judging.work import WorkChange, cell_work, compare_work, work_digest, work_reading
from harness.launch.runner import CellRun
from harness.machine.references import Environment
from harness.rank.cell import Cell
from harness.rank.contention import outside_share
from harness.rank.gate import timed_out_at_gate
from harness.session.results import to_json

SIDES = ("reference", "current")
LaunchFn = Callable[[str], CellRun]
"""Launches the cell once in the named side's environment."""
TogetherFn = Callable[[Mapping[str, int]], dict[str, CellRun]]
"""A duet: launches both sides at once, each on the half of the node it is given (0 or 1)."""
HALVES = {DUET_ORDERS[0]: {"reference": 0, "current": 1}, DUET_ORDERS[1]: {"reference": 1, "current": 0}}
"""Which half each side takes in a duet pair of each arrangement."""
LEFT_OUT_AT_MOST = 0.5
"""The A/B stops, its verdict held ``inconclusive``, once more pairs than this share of those
measured were left out for outside work (and more than two): the node is too busy to compare on."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PairSettings:
    """The A/B settings of a session (their defaults: harness.config.options.SuiteOptions)."""
    first: int
    most: int
    min_effect: float
    budget_s: float
    """Seconds a cell's pairs may take; no further round starts that would not fit."""
    alpha: float = ALPHA
    rule: str = SPENDING_RULE
    """How the looks spend ``alpha`` (harness.judging.sequential.RULES)."""
    notable: float = DEFAULT_TUNABLES.notable_wait
    """Outside work on a launch's cores beyond which it is contended (the system's tunable)."""


@dataclasses.dataclass(kw_only=True)
class PairedResult:
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
        done = [entry for entry in self.launch_log if entry["side"] == side and entry["status"] == "ok"]
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


def launch_figure(run: CellRun) -> float:
    """One launch's throughput: all ranks, over every timed step. The workload's warm-up steps are
    untimed on both sides alike; no launch is trimmed further on its own (a trim decided per launch
    could cut a slower start from one side only)."""
    return summarize(run.records).throughput


WINDOWS = 3
"""The parts of a launch's timed steps whose figures are kept beside the launch's: whether windows
of one launch agree more with each other than launches do (harness.report.launches)."""


def window_figures(run: CellRun, windows: int = WINDOWS) -> list[float]:
    """The launch's throughput over each of ``windows`` consecutive parts of its timed steps."""
    rank_steps, batches = step_samples(run.records)
    steps = min(len(times) for times in rank_steps)
    bounds = [round(steps * part / windows) for part in range(windows + 1)]
    return [throughput_point([times[start:end] for times in rank_steps], batches)
            for start, end in zip(bounds, bounds[1:]) if end > start]


TIMELINE = (("start-up", "worker_start"), ("set-up", "set_up"), ("warm-up", "window_start"),
            ("window", "window_end"), ("teardown", "done"))
"""A launch's parts, each ending at the first rank's mark of that name (harness.rank.worker); what
follows the last is the launcher's exit and the runner noticing it."""


def where_time_went(run: CellRun) -> dict[str, float] | None:
    """Seconds of the launch's wall time in each of :data:`TIMELINE`'s parts, and ``exit``, as rank
    0 marked them; None where it did not (an older worker)."""
    timeline = next((record.get("timeline") for record in run.records if record.get("rank") == 0), None)
    if not timeline or run.started_epoch is None or any(timeline.get(mark) is None for _, mark in TIMELINE):
        return None
    marks = [run.started_epoch] + [timeline[mark] for _, mark in TIMELINE]
    spent = {name: round(end - start, 3) for (name, _), start, end in zip(TIMELINE, marks, marks[1:])}
    return {**spent, "exit": round(run.started_epoch + run.wall_s - marks[-1], 3)}


def window_s(run: CellRun) -> float:
    """The launch's measured window: its slowest rank's timed steps."""
    return max(sum(record["step_times"]) for record in run.records)


class PairsInterrupted(KeyboardInterrupt):
    """The session's interrupt, raised by :func:`measure_pairs` once the pairs measured are judged:
    a caller that keeps results keeps ``result`` (marked ``interrupted``) and raises it again; any
    other caller lets the interrupt go on as it came."""

    def __init__(self, result: PairedResult):
        super().__init__()
        self.result = result


LaunchedFn = Callable[[str, CellRun], None]
"""Told of each launch of a pair as it ends: its side and its run."""
PairFn = Callable[[str, LaunchedFn], dict[str, CellRun]]
"""Launches one pair in the arrangement named (an order, or a duet's halves), telling each launch
as it ends: each side's run, in the order they were launched; a side whose launch was not made is
absent."""


def sequential_pairs(launch: LaunchFn) -> PairFn:
    """Pairs of launches back to back, the first side as the order says; a failed first launch
    ends the pair."""
    def pair(order: str, launched: LaunchedFn) -> dict[str, CellRun]:
        runs = {}
        for side in (SIDES if order == ORDERS[0] else SIDES[::-1]):
            runs[side] = launch(side)
            launched(side, runs[side])
            if not runs[side].ok:
                break
        return runs
    return pair


def duet_pairs(together: TogetherFn) -> PairFn:
    """Pairs of launches at once, each side on the half of the node the arrangement gives it."""
    def pair(arrangement: str, launched: LaunchedFn) -> dict[str, CellRun]:
        runs = together(HALVES[arrangement])
        for side, run in runs.items():
            launched(side, run)
        return runs
    return pair


def measure_pairs(cell: Cell, reference: Environment, launch: LaunchFn | None, settings: PairSettings,
                  seed: int | None = None, on_progress: Callable[[str], None] | None = None, *,
                  together: TogetherFn | None = None, on_pair: Callable[[PairedResult], None] | None = None,
                  resume: PairedResult | None = None) -> PairedResult:
    """Launch pairs until a look decides, ``settings.most`` pairs are in or the budget would be
    passed; stop at the first failed launch. ``together``: a duet instead of ``launch``'s
    back-to-back pairs. ``on_pair`` is called after every pair (kept, left out or failed);
    ``resume`` goes on from a result kept earlier (its pairs, looks and launches count). An
    interrupt (``KeyboardInterrupt``) ends the pairs: :class:`PairsInterrupted` carries the result,
    the pairs measured until then judged."""
    seed = random.SystemRandom().randrange(2 ** 32) if seed is None else seed
    result = resume or PairedResult(cell=cell, reference=reference, seed=seed, duet=together is not None)
    pair_of = duet_pairs(together) if together is not None else sequential_pairs(launch)
    started = time.monotonic() - result.wall_s
    try:
        _measure_rounds(result, pair_of, settings, random.Random(seed + len(result.pairs)), started,
                        on_progress, on_pair or (lambda _: None))
    except KeyboardInterrupt as interrupt:
        result.interrupted = True
        if len(result.pairs) > (result.looks[-1] if result.looks else 1):
            _judge(result, settings)
        raise PairsInterrupted(result) from interrupt
    finally:
        result.wall_s = time.monotonic() - started
    return result


def _measure_rounds(result: PairedResult, pair_of: PairFn, settings: PairSettings, rng: random.Random,
                    started: float, on_progress: Callable[[str], None] | None,
                    on_pair: Callable[[PairedResult], None]) -> None:
    arrangements = DUET_ORDERS if result.duet else ORDERS
    if result.pairs and len(result.pairs) in planned_looks(settings.first, settings.most) \
            and result.looks[-1:] != [len(result.pairs)]:
        _judge(result, settings)  # a result kept between its look's last pair and its judgement
        if result.verdict is not None and result.verdict.kind != PairedKind.INCONCLUSIVE:
            return
    while (target := pairs_wanted(len(result.pairs), settings.first, settings.most)) is not None:
        per_pair = (time.monotonic() - started) / max(1, len(result.pairs) + len(result.left_out))
        if result.pairs and per_pair * (target - len(result.pairs)) > settings.budget_s - (time.monotonic() - started):
            break
        while len(result.pairs) < target:  # a pair left out is made up for, the orders rebalanced
            kept = [pair.order for pair in result.pairs]
            for order in next_orders(target - len(result.pairs), kept, rng, arrangements):
                compared = result.work_change is not None
                _one_pair(result, order, pair_of, settings)
                if on_progress and not compared and result.work_change is not None:  # before any speed verdict
                    on_progress(f"{result.cell.id}: {result.work_change.text()} (the first pair's counted work)")
                result.wall_s = time.monotonic() - started
                on_pair(result)
                if result.error:
                    if len(result.pairs) > (result.looks[-1] if result.looks else 1):
                        _judge(result, settings)
                    return
                if _too_busy(result):
                    _judge(result, settings)
                    if result.verdict is None:
                        result.error = _busy_words(result)
                    return
        _judge(result, settings)
        if on_progress:
            on_progress(f"{result.cell.id}: {result.verdict.kind} after {len(result.pairs)} pairs "
                        f"({result.verdict.ratio.value:.3f})")
        if result.verdict.kind != PairedKind.INCONCLUSIVE:
            return


def _too_busy(result: PairedResult) -> bool:
    left_out = len(result.left_out)
    return left_out > 2 and left_out > LEFT_OUT_AT_MOST * (left_out + len(result.pairs))


def _judge(result: PairedResult, settings: PairSettings) -> None:
    """Judge the pairs at a new look: the error it spends, then what holds its verdict back."""
    if len(result.pairs) < 2:
        return
    if not result.looks or result.looks[-1] < len(result.pairs):
        result.looks.append(len(result.pairs))
    look = sequential_look(result.looks, settings.most, settings.alpha, settings.rule)
    verdict = judge_pairs(result.pairs, min_effect=settings.min_effect, look=look)
    reasons = speed_steps(result.pairs, verdict, min_effect=settings.min_effect)
    if _too_busy(result):
        reasons.append(_busy_words(result))
    result.verdict = hold(verdict, reasons)


def _busy_words(result: PairedResult) -> str:
    return (f"{len(result.left_out)} of {len(result.left_out) + len(result.pairs)} pairs were left out for outside "
            "work on their cores: the node is too busy to compare on")


def _one_pair(result: PairedResult, order: str, pair_of: PairFn, settings: PairSettings) -> None:
    index = len(result.pairs) + len(result.left_out) + len(result.failures)

    def launched(side: str, run: CellRun) -> None:
        result.launches += 1
        entry = {"pair": index, "side": side, "order": order, "status": run.status, "wall_s": round(run.wall_s, 3)}
        if run.ok:
            entry.update(window_s=round(window_s(run), 4), throughput=launch_figure(run),
                         throughput_as_stored=summarize(trim_warmup(run.records)[0]).throughput,
                         window_throughputs=window_figures(run), outside_share=outside_share(run.records),
                         spent=where_time_went(run),
                         launch_facts=[record.get("launch_facts") for record in run.records],
                         work_digest=work_digest(cell_work(run.records)))
        result.launch_log.append(entry)

    runs = pair_of(order, launched)
    if result.work_change is None and all(run.ok for run in runs.values()):
        result.work = {side: cell_work(run.records) for side, run in runs.items()}
        result.work_change = compare_work(result.work["reference"], result.work["current"])
    if side := first_to_fail(runs):
        run = runs[side]
        first_line = (run.error or run.status).strip().splitlines()[0]
        result.failures.append({"side": side, "order": order, "pair": index, "status": run.status, "error": first_line})
        result.error = (f"the {side} side's launch {_status_words(run.status)} in pair {index + 1} ({order})"
                        + _other_side_words(runs, side)
                        + f": {first_line}; {result.failed_launches('reference')} of the reference's and "
                          f"{result.failed_launches('current')} of the current side's launches failed")
        return
    figures = {side: launch_figure(run) for side, run in runs.items()}
    shares = {side: outside_share(run.records) for side, run in runs.items()}
    if why := _outside_work(shares, settings):
        result.left_out.append({"pair": index, "order": order, **figures, "outside_share": shares, "why": why})
        return
    result.pairs.append(Pair(order=order, **figures))


def first_to_fail(runs: Mapping[str, CellRun]) -> str | None:
    """The side whose launch failed first, where any did. Back to back, a pair ends at its first
    failure. In a duet, a side whose other side died before its window fails too, later: silent at
    the gate until the runner ends it, or timed out there. So the side the runner saw end first is
    named, and never one whose ranks timed out at the gate while the other's did not (that one may
    have hung with more silence allowed than the gate's wait)."""
    failed = [side for side, run in runs.items() if not run.ok]
    return min(failed, default=None, key=lambda side: (timed_out_at_gate(runs[side].error),
                                                       runs[side].ended_epoch or math.inf))


def _other_side_words(runs: Mapping[str, CellRun], side: str) -> str:
    other = next((name for name in runs if name != side), None)
    if other is None:
        return ""
    if runs[other].ok:
        return f" where the {other}'s completed"
    return f" before the {other}'s, which then {_status_words(runs[other].status)}"


def _outside_work(shares: Mapping[str, float | None], settings: PairSettings) -> str | None:
    """Why outside work on its launches' cores leaves a pair out, if it does: either launch was
    contended (outside work took more than ``settings.notable`` of its cores' time, as the stored
    verdict's contention guard leaves such a launch out), or the two launches' shares differ by more
    than the minimum effect (as much as that can take from one side's speed)."""
    if None in shares.values():
        return None
    said = (f"outside work took {shares['reference']:.1%} of the reference's cores and {shares['current']:.1%} of "
            "the current side's")
    if any(contended(None, None, share, notable=settings.notable) for share in shares.values()):
        return f"{said}: contended (more than {settings.notable:.0%})"
    if abs(shares["reference"] - shares["current"]) > settings.min_effect:
        return f"{said}: a difference beyond the minimum effect ({settings.min_effect:.1%})"
    return None


def _status_words(status: str) -> str:
    return {"timeout": "timed out", "hung": "hung", "failed": "failed"}.get(status, status)


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
    said: their verdict comes from a look the plan did not make, and the failure may be the change's."""
    verdict = paired.verdict
    as_stored = [entry["throughput_as_stored"] for entry in paired.launch_log
                 if entry["side"] == "reference" and entry["status"] == "ok"]
    now = figure_now(as_stored, band.value) if as_stored else None
    split = Split.of(stored, verdict.ratio if verdict else None, now,
                     judged_now(now, band, len(as_stored)) if now else None)
    error = paired.error or (None if verdict else "interrupted" if paired.interrupted else "no pair was judged")
    return Confirmation.of(conclude(rebuild, split, verdict=verdict, error=error, difference=difference), rebuild,
                           paired)

