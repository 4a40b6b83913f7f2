"""The A/B core: rounds of launches of a comparison's sides on the same nodes, each side once a
round in an order the comparison balances, judged at pre-declared looks whose error is spent
(:mod:`harness.judging.sequential`).

Every comparison the suite makes by launching runs its rounds through :func:`run_rounds`:
``--against``'s and ``--confirm``'s pairs (two sides, the reference environment and the current
one: :func:`harness.session.paired.measure_pairs`), a bisect step's rounds (three points: its
range's good end, its midpoint and its bad end) and the bisect's verification of a culprit (a pair
again). The core owns what must hold for all of them:

- rounds up to each look (the first's, then doubling to the most), none started that the budget
  would not fit;
- every launch logged: side, round, status, wall time, measured window, figure, outside work,
  where its time went and the digest of the work it counted;
- a failed launch is evidence, not a dropped round: it ends the rounds with an ``error`` that names
  its side and round (where several fail at once, as a duet's may, the side that failed first);
- a round whose launches saw outside work on their cores (another job, the hypervisor's steal)
  differing by more than the minimum effect, or any of which was contended, is left out, counted
  and made up for; more than :data:`LEFT_OUT_AT_MOST` of the rounds left out ends them: the node is
  too busy to compare on, the verdict held ``inconclusive`` where at least two rounds were kept to
  judge, an ``error`` where fewer were (:func:`too_busy` tells a caller which ended them);
- each look judged once the round that completes it is in, and the rounds stopped where it decides.

What a round's figures become and how a look decides is the comparison's own (its pairs judged by
:func:`harness.judging.paired.judge`, a midpoint placed by :func:`harness.judging.bisection.place`):
the :class:`Comparison` it passes says so."""
from __future__ import annotations

import dataclasses
import math
import random
import time
from typing import Callable, Mapping, Protocol, Sequence

from harness.judging.contention import contended
from harness.judging.metrics import step_samples, summarize, trim_warmup
from harness.judging.paired import ALPHA, SPENDING_RULE, pairs_wanted
from harness.judging.sequential import planned_looks
from harness.judging.stats import throughput_point
from harness.judging.tunables import DEFAULT_TUNABLES
from harness.judging.work import cell_work, work_digest
from harness.launch.runner import CellRun
from harness.rank.contention import outside_share
from harness.rank.gate import timed_out_at_gate

LEFT_OUT_AT_MOST = 0.5
"""The rounds stop, a verdict held ``inconclusive``, once more rounds than this share of those
measured were left out for outside work (and more than two): the node is too busy to compare on."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PairSettings:
    """How a comparison's rounds are measured and judged (a session's defaults:
    harness.config.options.SuiteOptions)."""
    first: int
    """Rounds at the first look; each later look doubles them."""
    most: int
    min_effect: float
    budget_s: float
    """Seconds the rounds may take; no further round starts that would not fit."""
    alpha: float = ALPHA
    rule: str = SPENDING_RULE
    """How the looks spend ``alpha`` (harness.judging.sequential.RULES)."""
    notable: float = DEFAULT_TUNABLES.notable_wait
    """Outside work on a launch's cores beyond which it is contended (the system's tunable)."""


class Comparison(Protocol):
    """What :func:`run_rounds` needs of a comparison: its sides, its rounds kept, left out and
    failed, its looks, its launch log, and how it orders, keeps and judges its rounds."""
    sides: tuple[str, ...]
    unit: str
    """What a round is called in what the comparison says: ``pair``, ``round``."""
    looks: list[int]
    failures: list[dict]
    left_out: list[dict]
    launch_log: list[dict]
    launches: int
    error: str | None
    wall_s: float

    @property
    def kept(self) -> Sequence:
        """The rounds kept, each with its ``order``."""

    def orders(self, count: int, rng: random.Random) -> list[str]:
        """Orders (or a duet's arrangements) for ``count`` more rounds, balanced with those kept."""

    def launched(self, runs: Mapping[str, CellRun]) -> None:
        """Told of each round's launches once they ended, before the round is judged kept."""

    def keep(self, order: str, figures: Mapping[str, float]) -> None:
        """Keeps a round: each side's figure."""

    def judge(self, settings: PairSettings) -> bool:
        """Judges the rounds kept at a new look (appending it to ``looks``); True where that decides."""


LaunchedFn = Callable[[str, CellRun], None]
"""Told of each launch of a round as it ends: its side and its run."""
RoundFn = Callable[[str, LaunchedFn], dict[str, CellRun]]
"""Launches one round in the order (or arrangement) named, telling each launch as it ends: each
side's run, in the order they were launched; a side whose launch was not made is absent."""


def back_to_back(launch: Callable[[str], CellRun], sequence: Callable[[str], Sequence[str]]) -> RoundFn:
    """Rounds of launches one after another, the sides in the ``sequence`` each order names; a failed
    launch ends the round."""
    def round_of(order: str, launched: LaunchedFn) -> dict[str, CellRun]:
        runs = {}
        for side in sequence(order):
            runs[side] = launch(side)
            launched(side, runs[side])
            if not runs[side].ok:
                break
        return runs
    return round_of


def run_rounds(comparison: Comparison, round_of: RoundFn, settings: PairSettings, rng: random.Random, *,
               started: float, on_round: Callable[[], None] = lambda: None,
               on_look: Callable[[], None] = lambda: None) -> None:
    """Launch rounds until a look decides, ``settings.most`` rounds are kept or the budget would be
    passed; stop at the first failed launch, or where the node is too busy. ``started``: the
    monotonic time the comparison began (a resumed one's earlier time included). ``on_round`` is
    called after every round (kept, left out or failed), ``on_look`` after every look."""
    kept = comparison.kept
    if kept and len(kept) in planned_looks(settings.first, settings.most) and comparison.looks[-1:] != [len(kept)]:
        if comparison.judge(settings):  # a comparison kept between its look's last round and its judgement
            return
    def would_overrun(rounds: int) -> bool:
        """Whether ``rounds`` more rounds, each as long as those done took on average, would pass
        the budget (unknown before the first round is done)."""
        done = len(comparison.kept) + len(comparison.left_out)
        spent = time.monotonic() - started
        return done > 0 and spent / done * rounds > settings.budget_s - spent

    while (target := pairs_wanted(len(comparison.kept), settings.first, settings.most)) is not None:
        if comparison.kept and would_overrun(target - len(comparison.kept)):
            break
        while len(comparison.kept) < target:  # a round left out is made up for, the orders rebalanced
            for order in comparison.orders(target - len(comparison.kept), rng):
                if would_overrun(1):  # the look's rounds took longer than they promised: judged as they stand
                    if judge_as_they_stand(comparison, settings):
                        on_look()
                    return
                one_round(comparison, order, round_of, settings)
                comparison.wall_s = time.monotonic() - started
                on_round()
                if comparison.error:
                    judge_as_they_stand(comparison, settings)
                    return
                if too_busy(comparison):  # judged with the busy node among what holds the verdict back
                    comparison.judge(settings)
                    if len(comparison.kept) < 2:
                        comparison.error = comparison.error or busy_words(comparison)
                    return
        decided = comparison.judge(settings)
        on_look()
        if decided:
            return


def judge_as_they_stand(comparison: Comparison, settings: PairSettings) -> bool:
    """Judges the rounds kept at a look of their own where more are kept than at the last look (the
    rounds cut short by a failure, the budget or an interrupt); True where it judged them."""
    if len(comparison.kept) <= (comparison.looks[-1] if comparison.looks else 1):
        return False
    comparison.judge(settings)
    return True


def new_look(comparison: Comparison) -> bool:
    """Adds a look at the rounds kept to the comparison's looks, where they are more than at its
    last; False where fewer than two are kept, too few to judge."""
    kept = len(comparison.kept)
    if kept < 2:
        return False
    if not comparison.looks or comparison.looks[-1] < kept:
        comparison.looks.append(kept)
    return True


def busy_holds(comparison: Comparison) -> list[str]:
    """What holds a look's verdict for the node, beside its pairs: too busy to compare on."""
    return [busy_words(comparison)] if too_busy(comparison) else []


def too_busy(comparison: Comparison) -> bool:
    left_out = len(comparison.left_out)
    return left_out > 2 and left_out > LEFT_OUT_AT_MOST * (left_out + len(comparison.kept))


def busy_words(comparison: Comparison) -> str:
    return (f"{len(comparison.left_out)} of {len(comparison.left_out) + len(comparison.kept)} {comparison.unit}s were "
            "left out for outside work on their cores: the node is too busy to compare on")


def one_round(comparison: Comparison, order: str, round_of: RoundFn, settings: PairSettings) -> None:
    """One round: its launches logged, then a failure taken as evidence, the round left out for
    outside work, or its figures kept."""
    index = len(comparison.kept) + len(comparison.left_out) + len(comparison.failures)

    def launched(side: str, run: CellRun) -> None:
        comparison.launches += 1
        comparison.launch_log.append(log_entry(run, side=side, index=index, order=order))

    runs = round_of(order, launched)
    comparison.launched(runs)
    if side := first_to_fail(runs):
        run = runs[side]
        first_line = (run.error or run.status).strip().splitlines()[0]
        comparison.failures.append({"side": side, "order": order, "pair": index, "status": run.status,
                                    "error": first_line})
        failed = {name: sum(failure["side"] == name for failure in comparison.failures) for name in comparison.sides}
        comparison.error = (f"the {side} side's launch {status_words(run.status)} in {comparison.unit} {index + 1} "
                            f"({order}){_other_sides_words(runs, side)}: {first_line}; failed launches: "
                            + ", ".join(f"{name} {count}" for name, count in failed.items()))
        return
    figures = {side: launch_figure(run) for side, run in runs.items()}
    shares = {side: outside_share(run.records) for side, run in runs.items()}
    if why := outside_work(shares, settings):
        comparison.left_out.append({"pair": index, "order": order, **figures, "outside_share": shares, "why": why})
        return
    comparison.keep(order, figures)


def log_entry(run: CellRun, *, side: str, index: int, order: str) -> dict:
    """What the launch log keeps of one launch."""
    entry = {"pair": index, "side": side, "order": order, "status": run.status, "wall_s": round(run.wall_s, 3)}
    if run.ok:
        entry.update(window_s=round(window_s(run), 4), throughput=launch_figure(run),
                     throughput_as_stored=summarize(trim_warmup(run.records)[0]).throughput,
                     window_throughputs=window_figures(run), outside_share=outside_share(run.records),
                     spent=where_time_went(run), launch_facts=[record.get("launch_facts") for record in run.records],
                     work_digest=work_digest(cell_work(run.records, run.server_records)))
    return entry


def timed_launches(launch_log: Sequence[Mapping]) -> list[Mapping]:
    """The launches of a log that completed with timed figures: not those that failed, nor those
    whose ranks ran under callgrind (harness.session.instructions.log_entry)."""
    return [entry for entry in launch_log if entry["status"] == "ok" and not entry.get("under")]


def first_to_fail(runs: Mapping[str, CellRun]) -> str | None:
    """The side whose launch failed first, where any did. Back to back, a round ends at its first
    failure. In a duet, a side whose other side died before its window fails too, later: silent at
    the gate until the runner ends it, or timed out there. So the side the runner saw end first is
    named, and never one whose ranks timed out at the gate while another's did not (that one may
    have hung with more silence allowed than the gate's wait)."""
    failed = [side for side, run in runs.items() if not run.ok]
    return min(failed, default=None, key=lambda side: (timed_out_at_gate(runs[side].error),
                                                       runs[side].ended_epoch or math.inf))


def _other_sides_words(runs: Mapping[str, CellRun], side: str) -> str:
    others = [name for name in runs if name != side]
    if not others:
        return ""
    completed = [name for name in others if runs[name].ok]
    failed = [name for name in others if not runs[name].ok]
    words = []
    if completed:
        words.append(f" where the {' and the '.join(completed)}'s completed")
    if failed:
        words.append(f" before the {' and the '.join(failed)}'s, which then "
                     + " and ".join(status_words(runs[name].status) for name in failed))
    return ";".join(words)


def outside_work(shares: Mapping[str, float | None], settings: PairSettings) -> str | None:
    """Why outside work on its launches' cores leaves a round out, if it does: any launch was
    contended (outside work took more than ``settings.notable`` of its cores' time, as the stored
    verdict's contention guard leaves such a launch out), or two launches' shares differ by more
    than the minimum effect (as much as that can take from one side's speed)."""
    if None in shares.values():
        return None
    said = "outside work took " + " and ".join(f"{share:.1%} of the {side}'s cores" for side, share in shares.items())
    if any(contended(None, None, share, notable=settings.notable) for share in shares.values()):
        return f"{said}: contended (more than {settings.notable:.0%})"
    if max(shares.values()) - min(shares.values()) > settings.min_effect:
        return f"{said}: a difference beyond the minimum effect ({settings.min_effect:.1%})"
    return None


def status_words(status: str) -> str:
    return {"timeout": "timed out", "hung": "hung", "failed": "failed"}.get(status, status)


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
