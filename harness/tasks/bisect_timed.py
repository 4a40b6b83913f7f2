"""A bisect step timed: the range's good end, its midpoint and its bad end launched in rounds
through the A/B core (:func:`harness.session.rounds.run_rounds`) until the midpoint's place is clear
(:func:`harness.judging.bisection.place`) or the most rounds are in, kept in the step's state as
they come."""
from __future__ import annotations

import math
import random
import time
from typing import Mapping

from harness.judging import bisection
from harness.judging.kinds import PairedKind
from harness.launch.runner import CellRun
from harness.session.rounds import (LaunchedFn, PairSettings, back_to_back, busy_holds, busy_words, new_look,
                                    run_rounds, too_busy)
from harness.tasks.bisect_launches import BisectRun
from harness.tasks.bisect_points import BisectError
from harness.tasks.bisect_settings import NodeTooBusy


class StepRounds:
    """A bisect step's rounds as the A/B core measures them (a
    :class:`harness.session.rounds.Comparison` of three sides: the range's good end, its midpoint
    and its bad end), kept in the step's state as they come."""
    sides = bisection.POINTS
    unit = "round"

    def __init__(self, step: dict, *, first_step: bool):
        self.step, self.first_step = step, first_step
        self.placement: bisection.Placement | None = None
        self.decided = False
        self.wall_s = 0.0

    @staticmethod
    def empty() -> dict:
        """A step's rounds before any: those kept, its looks, its failed launches, the rounds left out
        for outside work, every launch's log entry, the error that ended them."""
        return {"rounds": [], "looks": [], "failed": [], "left_out": [], "launch_log": [], "launches": 0,
                "error": None}

    looks = property(lambda self: self.step["looks"])
    failures = property(lambda self: self.step["failed"])
    left_out = property(lambda self: self.step["left_out"])
    launch_log = property(lambda self: self.step["launch_log"])
    launches = property(lambda self: self.step["launches"],
                        lambda self, value: self.step.__setitem__("launches", value))
    error = property(lambda self: self.step["error"], lambda self, value: self.step.__setitem__("error", value))

    @property
    def kept(self) -> list[bisection.Round]:
        return [bisection.Round(**kept) for kept in self.step["rounds"]]

    def orders(self, count: int, rng: random.Random) -> list[str]:
        return bisection.round_orders(count, rng, kept=[kept["order"] for kept in self.step["rounds"]])

    def launched(self, runs: Mapping[str, CellRun]) -> None:
        pass

    def keep(self, order: str, figures: Mapping[str, float]) -> None:
        self.step["rounds"].append(bisection.Round(order=order, **figures).to_json())

    def judge(self, settings: PairSettings) -> bool:
        """The midpoint placed at a new look (:func:`harness.judging.bisection.place`, its three
        comparisons judged as an A/B's pairs are); decided where it is placed, and on a range's first
        step only where its ends differ with confidence."""
        if not new_look(self):
            return False
        self.placement = bisection.place(self.kept, min_effect=settings.min_effect, looks=self.looks,
                                         most=settings.most, alpha=settings.alpha, rule=settings.rule,
                                         holds=busy_holds(self))
        ends_clear = not self.first_step or self.placement.ends.kind == PairedKind.REGRESSED
        self.decided = self.placement.kind != bisection.UNCLEAR and ends_clear
        return self.decided


def pair_settings(run: BisectRun, first: int | None = None) -> PairSettings:
    """How the bisect's rounds and pairs are measured and judged by the A/B core: its own budget
    holds (:meth:`BisectRun.charge`), not a time per comparison."""
    settings = run.settings
    return PairSettings(first=first or settings.rounds, most=settings.max_rounds, min_effect=settings.min_effect,
                        alpha=settings.alpha, rule=settings.rule, notable=settings.notable, budget_s=math.inf)


def step_rounds(run: BisectRun, step: dict, low: int, mid: int, high: int, *,
                first_step: bool) -> bisection.Placement | None:
    """Rounds of the three points until the midpoint's place is clear or the most rounds are in,
    judged at each look with the error spent across the step's looks; None where a launch of the
    midpoint failed (the failure named in the step's ``failed``). A launch of an end that fails
    ends the bisect, and a node too busy to compare on stops it, its rounds kept. ``first_step``:
    the range's own slowdown is not yet shown, so its ends must differ for the step to decide."""
    points = {"good": low, "mid": mid, "bad": high}
    step["error"] = None  # what stopped an earlier start (an end's failure, a busy node) is in its records
    rounds = StepRounds(step, first_step=first_step)

    def launch(point: str) -> CellRun:
        return run.launch(points[point], charge=False)

    def round_of(order: str, launched: LaunchedFn) -> dict[str, CellRun]:
        run.charge(len(points))  # a round cut in two would be launched again whole
        return back_to_back(launch, bisection.sequence)(order, launched)

    def after_look() -> None:
        placement = rounds.placement
        if rounds.decided or len(rounds.kept) >= run.settings.max_rounds:
            return
        unclear = placement.kind if placement.kind == bisection.UNCLEAR else \
            f"{placement.kind}, but the regression itself (bad/good) is {placement.ends.kind} so far"
        run.say(f"  {run.label(mid)}: {unclear} after {len(rounds.kept)} rounds, more rounds")

    settings = pair_settings(run)
    run_rounds(rounds, round_of, settings, run.rng, started=time.monotonic(), on_round=run.save, on_look=after_look)
    if rounds.placement is None and not rounds.error:  # resumed with its last look judged before
        rounds.judge(settings)
    run.save()
    if rounds.error and step["failed"]:
        failure = step["failed"][-1]
        if failure["side"] == "mid":
            return None
        raise BisectError(f"the range's {failure['side']} end {run.label(points[failure['side']])} cannot be "
                          f"launched: {rounds.error}")
    if rounds.error or too_busy(rounds):  # a busy node holds an A/B's verdict; a step ends 3, to resume
        raise NodeTooBusy(f"{run.label(mid)}: {rounds.error or busy_words(rounds)}")
    return rounds.placement


def ends_words(placement: bisection.Placement, min_effect: float) -> str:
    """The range's ends as a step measured them, with what held their verdict back where anything did."""
    ends = placement.ends
    held = "".join(f"; {flag}" for flag in ends.flags)
    return f"bad/good {ends.ratio.text(3)} over {ends.pairs} rounds ({ends.kind}, minimum effect {min_effect:.0%}){held}"
