"""One bisect's search over its points (good first, bad last): ranges taken off the pending ones,
each step's midpoint placed by what one launch of it counts (:mod:`harness.tasks.bisect_counted`)
or by rounds of launches (:mod:`harness.tasks.bisect_timed`), the halves the placement leaves
searched in turn, and each change at adjacent points put to an A/B against the point before it
(:mod:`harness.tasks.bisect_verification`).

By ``auto`` where the range's ends count different work, the work's changes are found first, one
launch a point, and the range's ends are put to an A/B of their own: its slowdown. A change of work
is a candidate until its pairs measure its speed: a culprit where they say slower, a fix where
faster, else listed as a work change at the same speed. Where the culprits found do not account for
the range's slowdown, the ranges whose ends count the same work are searched by time, each first
step confirming that its range holds a slowdown at all (:meth:`Bisect._next_phase`)."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Mapping

from harness.judging import bisection
from harness.judging.kinds import PairedKind
from harness.machine import references
from harness.rank.cell import Cell
from harness.session.paired import PairedResult
from harness.tasks import bisect_verification
from harness.tasks.bisect_changes import account, change_record, mark_undone, said_line
from harness.tasks.bisect_counted import CountedPlacement
from harness.tasks.bisect_launches import BisectRun, Launching
from harness.tasks.bisect_points import BisectError, Point
from harness.tasks.bisect_settings import Settings, binding
from harness.tasks.bisect_state import BisectState, StateFile
from harness.tasks.bisect_timed import StepRounds, ends_words, step_rounds


class Bisect:
    """One bisect of one cell over ``points``, its state in ``state_path``, bound to the launch
    ``settings_bound`` (:func:`harness.tasks.bisect_settings.launch_settings`)."""

    def __init__(self, launching: Launching, cell: Cell, repo: Path, points: list[Point], settings: Settings,
                 state_path: Path, *, settings_bound: Mapping[str, object], seed: int | None = None,
                 say: Callable[[str], None] = print):
        keys = [point.key for point in points]
        bound = binding(cell.id, keys, settings_bound)
        state_file = StateFile(state_path, say)
        state = state_file.load(cell.id, keys, bound) or BisectState(
            cell=cell.id, repo=str(repo), points=keys, binding=bound, pending=[[0, len(points) - 1]])
        self.run_ = BisectRun(launching, cell, repo, points, settings, state, state_file, seed=seed, say=say)
        self.state, self.counted = state, CountedPlacement(self.run_)

    def save(self) -> None:
        self.run_.save()

    def run(self) -> dict:
        state = self.state
        while state.current or state.pending or self._next_phase():
            if state.current is None:
                low, high = state.pending[-1]
                if self._unknown(low, high) and self._accounted():
                    self._leave(low, high)
                    continue
                if self.counted.active and self.counted.alike(low, high):
                    state.pending.pop()
                    self._same_work(low, high)
                    continue
                if high - low == 1:
                    self.counted.choose_by()
                    self._verify(low, high)  # takes the range off the pending ones once the change is recorded
                    continue
                state.pending.pop()
                state.current = {"range": [low, high], "candidates": bisection.midpoint_candidates(low, high),
                                 "skipped": [], **StepRounds.empty()}
            self._step()
        state.accounting = account(state, self.run_.keys)
        mark_undone(state, self.run_.keys, self.run_.settings.min_effect)
        state.done = True
        self.save()
        return state.to_json()

    # -- ranges ----------------------------------------------------------------------------------
    def _whole(self, low: int, high: int) -> bool:
        return (low, high) == (0, self.run_.last)

    def _unknown(self, low: int, high: int) -> bool:
        """A range searched by time whose slowdown is not yet shown."""
        return [self.run_.keys[low], self.run_.keys[high]] in self.state.slowdown_unknown

    def _same_work(self, low: int, high: int) -> None:
        """A range whose ends count alike holds no change of what is counted; by ``auto`` it may
        hold the slowdown, searched by time once the work's search is over."""
        keys = [self.run_.keys[low], self.run_.keys[high]]
        if keys not in self.state.same_work:
            self.state.same_work.append(keys)
            self.save()

    def _accounted(self) -> bool:
        accounting = account(self.state, self.run_.keys)
        return bool(accounting and accounting["holds"] and self.state.culprits)

    def _leave(self, low: int, high: int) -> None:
        self.state.pending.pop()
        self.state.not_searched.append({"range": [self.run_.keys[low], self.run_.keys[high]],
                                        "why": "the culprits found account for the range's slowdown"})
        self.save()

    def _next_phase(self) -> bool:
        """By ``auto``, once the work's search is over: the ranges whose ends count the same work
        (joined where they meet), widest searched first, each to confirm its own slowdown."""
        state, at = self.state, {key: index for index, key in enumerate(self.run_.keys)}
        if not self.counted.finds_slowdowns or state.time_after_work:
            return False
        joined: list[list[int]] = []
        for low, high in sorted([at[low], at[high]] for low, high in state.same_work):
            if joined and low <= joined[-1][1]:
                joined[-1][1] = max(joined[-1][1], high)
            else:
                joined.append([low, high])
        state.time_after_work = True
        state.pending = sorted(joined, key=lambda pair: pair[1] - pair[0])
        state.slowdown_unknown = [[self.run_.keys[low], self.run_.keys[high]] for low, high in joined]
        self.save()
        if joined and not self._accounted():
            self.run_.say("dlscale-bisect: the changes of work found do not account for the range's slowdown: "
                          "searching the ranges of the same work by speed, "
                          + ", ".join(f"{self.run_.points[low].short}..{self.run_.points[high].short}"
                                      for low, high in joined))
        return bool(joined)

    # -- a step ----------------------------------------------------------------------------------
    def _step(self) -> None:
        state, run = self.state, self.run_
        step = state.current
        low, high = step["range"]
        while step["candidates"]:
            mid = step["candidates"][0]
            try:
                run.environment(mid)
            except references.ReferenceError as error:
                self._skip(step, f"cannot be built: {error}")
                continue
            self.counted.choose_by()  # once a midpoint can be built: bad input is said before any launch
            self._range_speed()
            if self.counted.active:
                placed = self.counted.place(low, mid, high)
                if isinstance(placed, str):
                    self._skip(step, placed)
                    continue
                self._placed(step, low, mid, high, placed[0], state.by, *placed[1:])
                return
            placement = step_rounds(run, step, low, mid, high,
                                    first_step=self._whole(low, high) or self._unknown(low, high))
            if placement is None:
                self._skip(step, "its launch failed: " + step["error"])
                continue
            self._finish(step, low, mid, high, placement)
            return
        skipped = "; ".join(f"{s['point']} {s['why']}" for s in step["skipped"])
        if self._whole(low, high):
            raise BisectError(f"nothing between --good {run.label(low)} and --bad {run.label(high)} could be "
                              f"built and run as a midpoint ({skipped})")
        state.unresolved.append({"range": [run.keys[low], run.keys[high]],
                                 "why": "no midpoint in the range could be built and run", "skipped": step["skipped"]})
        run.say(f"  {run.label(low)} .. {run.label(high)}: no midpoint could be built and run; left unresolved")
        state.current = None
        self.save()

    def _skip(self, step: dict, why: str) -> None:
        mid = step["candidates"].pop(0)
        step["skipped"].append({"point": self.run_.keys[mid], "why": why})
        step.update(StepRounds.empty())
        self.run_.say(f"  skipped {self.run_.label(mid)}: {why}")
        self.save()

    def _finish(self, step: dict, low: int, mid: int, high: int, placement: bisection.Placement) -> None:
        if placement.ends.kind != PairedKind.REGRESSED and (self._whole(low, high) or self._unknown(low, high)):
            words = ends_words(placement, self.run_.settings.min_effect)
            if self._whole(low, high):
                raise BisectError(f"the good end is not faster than the bad one: {words}")
            if placement.ends.kind == PairedKind.INCONCLUSIVE:  # not shown the same: whether it is slower is open
                self._unclear(low, high, words)
            else:
                self._no_slowdown(low, high, words)
            return
        kind, placed_by = placement.kind, "test"
        if kind == bisection.UNCLEAR:
            kind, placed_by = bisection.lean(placement), "position"
        self._placed(step, low, mid, high, kind, placed_by, placement.to_json(), placement.message)

    def _unclear(self, low: int, high: int, evidence: str) -> None:
        """A same-work range whose ends the rounds could not tell apart: left unresolved, never read
        as holding no slowdown."""
        keys = [self.run_.keys[low], self.run_.keys[high]]
        self.state.unresolved.append({"range": keys, "why": f"whether its ends differ in speed is unclear: {evidence}"})
        self.state.current = None
        self.run_.say(f"  {self.run_.label(low)} .. {self.run_.label(high)}: unclear, left unresolved ({evidence})")
        self.save()

    def _no_slowdown(self, low: int, high: int, evidence: str) -> None:
        keys = [self.run_.keys[low], self.run_.keys[high]]
        self.state.same_speed.append({"range": keys, "evidence": evidence})
        self.state.current = None
        self.run_.say(f"  {self.run_.label(low)} .. {self.run_.label(high)}: no slowdown ({evidence})")
        self.save()

    def _placed(self, step: dict, low: int, mid: int, high: int, kind: str, placed_by: str, evidence: dict,
                message: str) -> None:
        state, run = self.state, self.run_
        halves = [[mid, high], [low, mid]] if kind in bisection.BOTH_HALVES else \
            {bisection.LIKE_GOOD: [[mid, high]], bisection.LIKE_BAD: [[low, mid]]}[kind]
        state.pending += halves
        if self.counted.active and kind in (bisection.LIKE_GOOD, bisection.LIKE_BAD):  # the half it counts like
            self._same_work(*([low, mid] if kind == bisection.LIKE_GOOD else [mid, high]))
        state.steps.append({"range": [run.keys[low], run.keys[high]], "mid": run.keys[mid], "placement": kind,
                            "placed_by": placed_by, "evidence": evidence, "rounds": step["rounds"],
                            "looks": step["looks"], "failed": step["failed"], "left_out": step["left_out"],
                            "launch_log": step["launch_log"], "skipped": step["skipped"]})
        state.current = None
        self.save()
        both = {bisection.BETWEEN: "; two culprits: searching both halves",
                bisection.BEYOND: "; a change each way in the range: searching both halves"}.get(kind, "")
        low_confidence = " (placed by its position alone: the tests stayed unclear)" if placed_by == "position" else ""
        run.say(f"step {len(state.steps)}: {high - low - 1} point(s) between {run.points[low].short} and "
                f"{run.points[high].short}; midpoint {run.label(mid)}: {kind}{low_confidence}{both}\n  {message}; "
                f"{state.launches} launches so far")

    # -- A/Bs of two points ------------------------------------------------------------------------
    def _range_speed(self) -> None:
        """By ``auto`` with the midpoints placed by work: the range's ends' own A/B, its slowdown
        (a range of one change has its verification instead)."""
        state, run = self.state, self.run_
        if not self.counted.finds_slowdowns or state.range_speed is not None or run.last == 1:
            return
        paired = bisect_verification.measure(run, 0, run.last)
        self._refuse_ends(paired)
        state.range_speed = {"verdict": paired.verdict_kind, "evidence": paired.verdict.message,
                             "ratio": change_record(run, 0, run.last, paired)["ratio"], "pairs": len(paired.pairs),
                             "launches": paired.launches}
        bisect_verification.forget(run)
        run.say(f"dlscale-bisect: the range's ends: {paired.verdict_kind}, {paired.verdict.message}")

    def _refuse_ends(self, paired: PairedResult) -> None:
        """The range's ends measured by pairs: their launch failed, or the good end is not faster."""
        run = self.run_
        if paired.error:
            raise BisectError(f"the range's end {run.label(run.last)} cannot be launched: {paired.error}")
        if paired.verdict_kind != PairedKind.REGRESSED:
            bisect_verification.forget(run)
            raise BisectError(f"the good end is not faster than the bad one: {paired.verdict_kind}, "
                              f"{paired.verdict.message}")

    def _verify(self, parent: int, point: int) -> None:
        """The change at ``point`` against the point before it, by an A/B of pairs: a culprit where it
        made the cell slower, a fix where faster; by ``auto``'s work, a work change at the same speed
        otherwise; in a range whose slowdown is not yet shown, no change; else a culprit not confirmed.
        By ``work`` or ``instructions`` asked for, verified by its count, its speed stated."""
        state, run = self.state, self.run_
        paired = bisect_verification.measure(run, parent, point)
        by_counts = self.counted.active and not self.counted.finds_slowdowns
        whole, kind = self._whole(parent, point), paired.verdict_kind
        if whole and not (by_counts and kind != PairedKind.IMPROVED and not paired.error):
            self._refuse_ends(paired)
        record = change_record(run, parent, point, paired)
        count = self.counted.change(parent, point) if self.counted.active else None
        if count is not None:
            speed = record["evidence"] if paired.error else f"{kind}, {record['evidence']}"
            record.update({state.by: count.to_json(), "evidence": f"{count.text()}; speed: {speed}"})
        fix = kind == PairedKind.IMPROVED
        if by_counts:
            record.update(verified=count.changed, by=state.by)
            listed = state.fixes if fix else state.culprits
        elif kind in (PairedKind.REGRESSED, PairedKind.IMPROVED) or paired.error:
            listed = state.fixes if fix else state.culprits
        elif self.counted.active:
            listed = state.work_changes
        elif self._unknown(parent, point):
            listed = None
            state.same_speed.append({"range": [run.keys[parent], run.keys[point]], "evidence": record["evidence"]})
        else:
            listed = state.culprits
        if listed is not None:
            listed.append(record)
        state.verifying = None
        state.pending.pop()
        self.save()
        run.say(said_line(record, listed is state.work_changes, fix, listed is None, run.label(parent)))
