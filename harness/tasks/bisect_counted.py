"""A bisect's midpoints placed by what one launch of each counts (its work, or its host
instructions under callgrind) against its range's ends': counts do not depend on the node, so one
launch a point places it (:func:`harness.judging.bisection.place_by_counts`). Every counting launch
is logged as a round's launch is, and a failed one's error kept."""
from __future__ import annotations

from harness.judging import bisection
from harness.judging.instructions import InstructionChange, cell_instructions, compare_instructions
from harness.judging.work import WorkChange, cell_work, compare_work, work_digest
from harness.rank.instructions import missing_tools
from harness.session.rounds import log_entry
from harness.tasks.bisect_launches import BisectRun
from harness.tasks.bisect_points import BisectError
from harness.tasks.bisect_settings import COUNTED_BY

COUNTS = {"work": lambda run: cell_work(run.records, run.server_records),
          "instructions": lambda run: cell_instructions(run.records)}
"""What a launch counted, by what a midpoint is placed by."""


class CountedPlacement:
    def __init__(self, run: BisectRun):
        self.run, self.state = run, run.state

    @property
    def active(self) -> bool:
        """Midpoints are placed by what one launch of each counts (by ``auto``: until the work's
        search is over and the same-work ranges are searched by time)."""
        return self.state.by in COUNTED_BY and not self.state.time_after_work

    @property
    def finds_slowdowns(self) -> bool:
        """By ``auto``, the work's changes are candidates until their speed is measured; by ``work``
        or ``instructions`` asked for, the question is where the count changed."""
        return self.state.by == "work" and self.run.settings.by == "auto"

    def choose_by(self) -> None:
        """Once: by counted work where the range's ends count different work (``--by auto``), one
        launch a point; else by time, in rounds. The ends' launches are kept for the work's steps."""
        if self.state.by is not None:
            return
        if self.run.settings.by == "time":
            self.state.by = "time"
            return
        if self.run.settings.by == "instructions":
            self._choose_instructions()
            return
        good, bad = self.counted(0, "work"), self.counted(self.run.last, "work")
        if good is None or bad is None:
            failed = [f"{self.run.points[index].short}: {self.state.counted_errors[key].splitlines()[0]}"
                      for index in (0, self.run.last) if (key := self.run.keys[index]) in self.state.counted_errors]
            why = "an end's launch counted no work (" + ("; ".join(f"its launch failed, {said}" for said in failed)
                                                         or "a harness without counting") + ")"
        elif work_digest(good) == work_digest(bad):
            why = "the ends count the same work"
        else:
            self.state.by = "work"
            then = "; then by speed where the slowdown is, if the work's changes do not account for it" \
                if self.run.settings.by == "auto" else ""
            self.run.say(f"dlscale-bisect: the ends differ in the work a step does ({compare_work(good, bad).text()}): "
                         f"each midpoint placed by its work, one launch a point{then}")
            self.run.save()
            return
        if self.run.settings.by == "work":
            raise BisectError(f"--by work: {why}, so no midpoint can be placed by its work")
        self.state.by = "time"
        self.run.say(f"dlscale-bisect: {why}: each midpoint placed by its speed, in rounds")
        self.run.save()

    def _choose_instructions(self) -> None:
        """``--by instructions``, where the ends' host instructions differ."""
        if reason := missing_tools():
            raise BisectError(f"--by instructions: {reason}")
        good, bad = self.counted(0, "instructions"), self.counted(self.run.last, "instructions")
        if good is None or bad is None:
            raise BisectError("--by instructions: an end's launch under callgrind counted no instructions (a "
                              "harness without --count-instructions, or a failed launch)")
        change = compare_instructions(good, bad)
        if not change.changed:
            raise BisectError(f"--by instructions: the ends count the same ({change.text()}), so no midpoint can be "
                              "placed by its instructions")
        self.state.by = "instructions"
        self.run.say(f"dlscale-bisect: the ends differ in their host instructions ({change.text()}): each midpoint "
                     "placed by its instructions, one launch a point under callgrind")
        self.run.save()

    def counted(self, index: int, by: str | None = None) -> dict | None:
        """What a step of the point counts ``by`` (``work``, or ``instructions`` under callgrind; None:
        as the midpoints are placed), from one launch of it (kept: launched once), logged; None
        where its launch failed (its error kept) or counted none."""
        by = by or self.state.by
        key = self.run.keys[index]
        kept = getattr(self.state, by)
        if key not in kept:
            run = self.run.launch(index, under_callgrind=by == "instructions")
            index = len(self.state.counted_log)
            entry = log_entry(run, side=key, index=index, order=by) if by == "work" else \
                {"pair": index, "side": key, "order": by, "status": run.status, "wall_s": round(run.wall_s, 3)}
            if not run.ok:
                entry["error"] = self.state.counted_errors[key] = (run.error or run.status).strip()
            self.state.counted_log.append(entry)
            kept[key] = COUNTS[by](run) if run.ok else None
            self.run.save()
        return kept[key]

    def change(self, before: int, after: int) -> WorkChange | InstructionChange:
        """What moved from one point's count to another's."""
        compare = compare_instructions if self.state.by == "instructions" else compare_work
        return compare(self.counted(before), self.counted(after))

    def alike(self, one: int, other: int) -> bool:
        """Whether two points count alike: the same work, or instructions within their own noise."""
        if self.state.by == "instructions":
            return not self.change(one, other).changed
        return work_digest(self.counted(one)) == work_digest(self.counted(other))

    def place(self, low: int, mid: int, high: int) -> tuple[str, dict, str] | str:
        """The midpoint's place by what its one launch counted, its evidence and its message; or why
        it cannot be placed (its launch failed or counted none: it is skipped)."""
        if self.counted(mid) is None:
            error = self.state.counted_errors.get(self.run.keys[mid])
            return f"its launch failed: {error.splitlines()[0]}" if error else \
                f"its launch counted no {self.state.by}"
        kind = bisection.place_by_counts(self.alike(low, mid), self.alike(mid, high))
        evidence = {"against_good": self.change(low, mid).text(), "against_bad": self.change(high, mid).text()}
        message = (f"against {self.run.points[low].short}: {evidence['against_good']}; against "
                   f"{self.run.points[high].short}: {evidence['against_bad']}")
        return kind, evidence, message
