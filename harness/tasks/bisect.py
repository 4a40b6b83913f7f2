"""dlscale-bisect: which commit of the project, or which package or version of a package, made a
cell slower, with the evidence for each step.

    dlscale-bisect CELL --good REF [--bad REF] [the suite's workload and launcher options]
    dlscale-bisect CELL --good pkg:NAME==A [--bad pkg:NAME==B]
    dlscale-bisect CELL --good pkg:N1==A1 --good pkg:N2==A2 ... [--bad pkg:N1==B1 --bad pkg:N2==B2 ...]

The points are the commits from ``--good`` (exclusive) to ``--bad`` (inclusive, default HEAD) along the
first-parent line, or every version of the package the indexes hold from A to B; a package ``--bad``
does not name is at its installed version there. Where the two package sets differ in several
packages, the bisect first finds which package (or group that must move together, as torch with
torchvision and the Horovod built on it) made the cell slower, moving one at a time, then which of
that package's versions, the others held as they were (:mod:`harness.tasks.bisect_points`).

Each step launches the range's good end, its midpoint and its bad end in rounds, in random order
within each round, on the same nodes, and places the midpoint by which end it runs like
(:mod:`harness.judging.bisection`): 8 rounds, then 16 and 32 while that is unclear. A midpoint that
cannot be built or whose launches fail is skipped for its neighbour (``git bisect skip``); a midpoint
between the ends with confidence means two culprits, and one beyond an end means a change each way
(a regression fixed later, then another): both halves are searched. At adjacent points the change is
verified by an A/B against its predecessor (:mod:`harness.session.paired`): a culprit where it made
the cell slower, a fix where it made it faster. At the end, the changes verified must account for the
range's own slowdown (:func:`harness.judging.bisection.account`), else the bisect says so.

A commit's ranks run that commit's ``harness`` package (exported from git, as ``--against git:REF``
does) under the installed packages; a package set's ranks run the current harness with those
versions installed over the current environment (as ``--against pkg:NAME==VERSION``). The state is
written after every round and every verification pair, bound to every setting that changes a launch
(:func:`launch_settings`): a bisect cut short (Ctrl-C, its budget, the allocation's end) goes on from
where it stopped when started again with the same settings, and is refused, naming them, under
others. Exit status: 0 every change found verified and accounting for the range's slowdown, 1 a
culprit not confirmed, a range left unresolved or a slowdown the changes found do not account for,
2 bad input, 3 the budget spent (the state kept).
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import itertools
import json
import math
import random
import re
import sys
import time
from pathlib import Path
from typing import Callable, Mapping, Sequence

from harness import HARNESS_SOURCE
from harness.common.jsonio import finite_or_none, write_json_atomic
from harness.config.options import SuiteError, SuiteOptions
from harness.judging import bisection
from harness.judging.kinds import PairedKind
from harness.judging.paired import ALPHA, SPENDING_RULE
from harness.judging.sequential import planned_looks
from harness.judging.tunables import DEFAULT_TUNABLES
from harness.judging.instructions import InstructionChange, cell_instructions, compare_instructions
from harness.judging.work import WorkChange, cell_work, compare_work, work_digest
from harness.launch.runner import CellRun
from harness.machine import references
from harness.machine.provenance import installed_packages
from harness.rank.cell import Cell
from harness.rank.instructions import missing_tools
from harness.rank.numerics import Numerics
from harness.rank.workload import Workload
from harness.session.paired import PairedResult, PairsInterrupted, measure_pairs
from harness.session.rounds import (LaunchedFn, PairSettings, back_to_back, busy_holds, busy_words, new_look,
                                    run_rounds, too_busy)
from harness.session.suite import Suite
from harness.tasks.bisect_points import (BisectError, Point, commit_points, package_moves, package_points,
                                         package_sets_of, version_points)

STATE_VERSION = 5
"""2: the state is bound to its launch settings (``binding``), keeps a verification's pairs as they
come (``verifying``) and the fixes found (``fixes``); 3: whether it places its midpoints by their
counted work or by their speed (``by``), each point's work (``work``) and the ranges whose ends
count the same work (``same_work``); 4: or by their host instructions (``by`` ``instructions``,
each point's count under ``instructions``); 5: a step's rounds are the A/B core's (its failed
launches as records, the rounds left out for outside work, every launch's log entry), and the binding
holds the harness code's version."""


COUNTED_BY = ("work", "instructions")
"""What a midpoint may be placed by from one launch of it, counted rather than timed."""
COUNTS = {"work": cell_work, "instructions": cell_instructions}
"""What a launch's records count, by what a midpoint is placed by."""


class BudgetSpent(RuntimeError):
    pass


class NodeTooBusy(RuntimeError):
    """A step's rounds were left out for outside work on their cores more than the A/B core allows;
    the rounds are kept, and the bisect goes on from them when started again."""


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
        comparisons judged as an A/B's pairs are); decided where it is placed, and on the range's
        first step only where its ends differ with confidence."""
        if not new_look(self):
            return False
        self.placement = bisection.place(self.kept, min_effect=settings.min_effect, looks=self.looks,
                                         most=settings.most, alpha=settings.alpha, rule=settings.rule,
                                         holds=busy_holds(self))
        ends_clear = not self.first_step or self.placement.ends.kind == PairedKind.REGRESSED
        self.decided = self.placement.kind != bisection.UNCLEAR and ends_clear
        return self.decided


_AB_DEFAULTS = {option.name: option.default for option in dataclasses.fields(SuiteOptions)}


@dataclasses.dataclass(frozen=True, kw_only=True)  # no slots: the parser reads the defaults off the class
class Settings:
    """A step's rounds and a culprit's verification are judged as an A/B's pairs are (``--against``),
    with its defaults."""
    rounds: int = _AB_DEFAULTS["pairs"]
    max_rounds: int = _AB_DEFAULTS["max_pairs"]
    min_effect: float | None = None
    """``None``: the system's (:attr:`harness.judging.tunables.Tunables.min_effect`)."""
    verify_pairs: int = _AB_DEFAULTS["pairs"]
    alpha: float = ALPHA
    rule: str = SPENDING_RULE
    """How a step's looks and a verification's spend the error (the suite's ``--spending``)."""
    notable: float = DEFAULT_TUNABLES.notable_wait
    """Outside work on a launch's cores beyond which its round is left out (the system's tunable)."""
    max_launches: int = 600
    max_seconds: float = 6 * 3600.0
    by: str = "auto"
    """How midpoints are placed: ``work`` (one launch a point, by the work a step counts),
    ``instructions`` (one launch a point under callgrind, by its steps' host instructions), ``time``
    (rounds of launches, by speed) or ``auto`` (by work where the range's ends count different work)."""


def cell_options(cell_id: str) -> dict:
    """The suite's matrix options that select exactly the cell ``cell_id`` names
    (``<framework>-<loader>-<model>[-<dtype>][-channels_last][-compiled]-g<ranks>``)."""
    parts = cell_id.split("-")
    numerics, head = Numerics.from_words(parts[:-1])
    if len(head) != 3 or not parts[-1][:1] == "g" or not parts[-1][1:].isdigit():
        raise BisectError(f"{cell_id!r} is not a cell id: say <framework>-<loader>-<model>-g<ranks>, "
                          f"e.g. ddp-synthetic-resnet44-g1")
    return {"frameworks": head[0], "loaders": head[1], "models": head[2], "gpus": parts[-1][1:],
            "dtypes": numerics.dtype, "channels_last": numerics.channels_last, "compile": numerics.compiled}


def launch_settings(*, workload: Workload, launcher: str, cores_per_rank: int | None, device: str, system: str,
                    launch_environment: Mapping[str, str], packages: Mapping[str, str], harness_code: str | None,
                    settings: Settings) -> dict[str, object]:
    """Every setting that changes a bisect's launches or how its rounds and pairs are judged, by
    names a reader knows: the workload's fields, the launcher, the cores per rank, the device, the
    system the launches run on, each launch variable, each installed distribution (the base every
    point's environment is built over), the version of the harness code that measures and judges
    them (:func:`harness.machine.provenance.code_version`), the minimum effect, the outside work
    that leaves a round out and the looks and error of the steps and verifications. A state is
    bound to them (:func:`binding`). The budget (``--max-launches``, ``--max-time``) and ``--seed``
    are not among them: a resumed bisect may change those."""
    named: dict[str, object] = {f"workload {name}": value for name, value in dataclasses.asdict(workload).items()}
    named.update({"launcher": launcher, "cores per rank": cores_per_rank, "device": device, "system": system,
                  "min effect": settings.min_effect, "rounds": settings.rounds, "max rounds": settings.max_rounds,
                  "verify pairs": settings.verify_pairs, "alpha": settings.alpha, "spending rule": settings.rule,
                  "notable outside work": settings.notable, "placed by": settings.by, "harness code": harness_code})
    named.update({f"launch env {name}": value for name, value in sorted(launch_environment.items())})
    named.update({f"package {name}": version for name, version in sorted(packages.items())})
    return json.loads(json.dumps(named, default=str))  # as the state file gives them back


def binding(cell_id: str, keys: Sequence[str], settings: Mapping[str, object]) -> dict:
    """What a state file is bound to: a digest of the cell, the points and the launch settings, and
    the settings themselves, readable, to name those that differ."""
    text = json.dumps({"cell": cell_id, "points": list(keys), "settings": settings}, sort_keys=True, default=str)
    return {"digest": hashlib.sha256(text.encode()).hexdigest()[:16], "settings": dict(settings)}


_UNSET = object()


def setting_differences(old: Mapping[str, object], new: Mapping[str, object]) -> list[str]:
    """Each setting that differs, as ``name: old -> new`` (``(none)`` where one side lacks it or has none)."""
    def shown(value: object) -> str:
        return "(none)" if value is _UNSET or value is None else str(value)
    return [f"{name}: {shown(old.get(name, _UNSET))} -> {shown(new.get(name, _UNSET))}"
            for name in sorted(old.keys() | new.keys()) if old.get(name, _UNSET) != new.get(name, _UNSET)]


class Bisect:
    """One bisect of one cell over ``points`` (good first, bad last), its state in ``state_path``,
    bound to the launch ``settings_bound`` (:func:`launch_settings`)."""

    def __init__(self, suite: Suite, cell: Cell, repo: Path, points: list[Point], settings: Settings,
                 state_path: Path, *, settings_bound: Mapping[str, object], seed: int | None = None,
                 say: Callable[[str], None] = print):
        self.suite, self.cell, self.repo, self.points, self.settings = suite, cell, repo, points, settings
        self.keys = [point.key for point in points]
        self.state_path, self.say = state_path, say
        self.rng = random.Random(seed)
        self.environments: dict[int, references.Environment] = {}
        self.started = time.monotonic()
        bound = binding(cell.id, self.keys, settings_bound)
        self.state = self._load_state(bound) or {
            "version": STATE_VERSION, "cell": cell.id, "repo": str(repo), "points": self.keys, "binding": bound,
            "pending": [[0, len(points) - 1]], "current": None, "verifying": None, "steps": [], "culprits": [],
            "fixes": [], "unresolved": [], "accounting": None, "launches": 0, "spent_s": 0.0, "done": False,
            "by": None, "work": {}, "instructions": {}, "same_work": []}
        self._spent_before = self.state["spent_s"]

    # -- state ---------------------------------------------------------------------------------
    def _load_state(self, bound: dict) -> dict | None:
        if not self.state_path.is_file():
            return None
        try:
            state = json.loads(self.state_path.read_text())
        except (OSError, ValueError) as error:
            raise BisectError(f"the state file {self.state_path} cannot be read ({error}): remove it to start "
                              f"afresh") from None
        if state.get("cell") != self.cell.id or state.get("points") != self.keys:
            raise BisectError(f"the state file {self.state_path} is another bisect's ({state.get('cell')}, "
                              f"{len(state.get('points') or [])} points): name another --state")
        if state.get("version") != STATE_VERSION:
            raise BisectError(f"the state file {self.state_path} was written by another version of dlscale-bisect "
                              f"(state version {state.get('version')}, this one's {STATE_VERSION}), without the "
                              f"settings it ran under: remove it to start afresh")
        if state["binding"]["digest"] != bound["digest"]:
            differ = setting_differences(state["binding"]["settings"], bound["settings"]) or \
                [f"digest {state['binding']['digest']} -> {bound['digest']}"]
            more = f"; and {len(differ) - 8} more" if len(differ) > 8 else ""
            raise BisectError(f"the state file {self.state_path} was written under other settings ("
                              f"{'; '.join(differ[:8])}{more}): its rounds cannot be mixed with these; run with "
                              f"its settings to go on, or name another --state to start afresh")
        self.say(f"dlscale-bisect: going on from {self.state_path} ({len(state['steps'])} step(s), "
                 f"{state['launches']} launch(es) done)")
        return state

    def _save(self) -> None:
        self.state["spent_s"] = round(self._spent_s(), 1)
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.state_path, self.state)

    def _spent_s(self) -> float:
        return self._spent_before + time.monotonic() - self.started

    def _charge(self, launches: int) -> None:
        """Stop before ``launches`` more would pass the budget."""
        spent_s = self._spent_s()
        if self.state["launches"] + launches > self.settings.max_launches or spent_s > self.settings.max_seconds:
            raise BudgetSpent(f"the budget is spent ({self.state['launches']} launches of "
                              f"{self.settings.max_launches}, {spent_s:.0f} s of {self.settings.max_seconds:.0f})")

    # -- the points ----------------------------------------------------------------------------
    def label(self, index: int) -> str:
        return self.points[index].label

    def environment(self, index: int) -> references.Environment:
        if index not in self.environments:
            current = self.suite.prepare().current_environment
            self.environments[index] = references.build(self.points[index].parts, current, repo=self.repo)
        return self.environments[index]

    def launch(self, index: int, *, charge: bool = True, under_callgrind: bool = False) -> CellRun:
        """One launch of the point (``under_callgrind``: its ranks counting their host instructions);
        ``charge=False`` where the round or pair it belongs to was charged."""
        if charge:
            self._charge(1)
        place = ("bisect-instructions-" if under_callgrind else "bisect-") + re.sub(r"[^\w.=-]", "_",
                                                                                   self.keys[index][:40])
        launch_in = self.suite.launch_counting_instructions if under_callgrind else self.suite.launch_in
        run = launch_in(self.cell, self.environment(index), place)
        self.state["launches"] += 1
        return run

    # -- the search ----------------------------------------------------------------------------
    def run(self) -> dict:
        while self.state["current"] or self.state["pending"]:
            if self.state["current"] is None:
                low, high = self.state["pending"][-1]
                if self.by_counts and self._same_work(low, high):
                    continue
                if high - low == 1:
                    self._choose_by()
                    self._verify(high)  # takes the range off the pending ones once the change is recorded
                    continue
                self.state["pending"].pop()
                self.state["current"] = {"range": [low, high], "candidates": bisection.midpoint_candidates(low, high),
                                         "skipped": [], **StepRounds.empty()}
            self._step()
        self._account()
        self.state["done"] = True
        self._save()
        return self.state

    # -- by counted work --------------------------------------------------------------------------
    @property
    def by_counts(self) -> bool:
        """Midpoints are placed by what one launch of each counts: its work, or its instructions."""
        return self.state["by"] in COUNTED_BY

    def _choose_by(self) -> None:
        """Once: by counted work where the range's ends count different work (``--by auto``), one
        launch a point; else by time, in rounds. The ends' launches are kept for the work's steps."""
        if self.state["by"] is not None:
            return
        if self.settings.by == "time":
            self.state["by"] = "time"
            return
        if self.settings.by == "instructions":
            self._choose_instructions()
            return
        last = len(self.points) - 1
        good, bad = self._counted(0, "work"), self._counted(last, "work")
        if good is None or bad is None:
            why = "an end's launch counted no work (a harness without counting, or a failed launch)"
        elif work_digest(good) == work_digest(bad):
            why = "the ends count the same work"
        else:
            self.state["by"] = "work"
            self.say(f"dlscale-bisect: the ends differ in the work a step does ({compare_work(good, bad).text()}): "
                     "each midpoint placed by its work, one launch a point")
            self._save()
            return
        if self.settings.by == "work":
            raise BisectError(f"--by work: {why}, so no midpoint can be placed by its work")
        self.state["by"] = "time"
        self.say(f"dlscale-bisect: {why}: each midpoint placed by its speed, in rounds")
        self._save()

    def _choose_instructions(self) -> None:
        """``--by instructions``, where the ends' host instructions differ."""
        if reason := missing_tools():
            raise BisectError(f"--by instructions: {reason}")
        good, bad = self._counted(0, "instructions"), self._counted(len(self.points) - 1, "instructions")
        if good is None or bad is None:
            raise BisectError("--by instructions: an end's launch under callgrind counted no instructions (a "
                              "harness without --count-instructions, or a failed launch)")
        change = compare_instructions(good, bad)
        if not change.changed:
            raise BisectError(f"--by instructions: the ends count the same ({change.text()}), so no midpoint can be "
                              "placed by its instructions")
        self.state["by"] = "instructions"
        self.say(f"dlscale-bisect: the ends differ in their host instructions ({change.text()}): each midpoint "
                 "placed by its instructions, one launch a point under callgrind")
        self._save()

    def _counted(self, index: int, by: str | None = None) -> dict | None:
        """What a step of the point counts ``by`` (``work``, or ``instructions`` under callgrind; None:
        as the midpoints are placed), from one launch of it (kept: launched once); None where its
        launch failed or counted none."""
        by = by or self.state["by"]
        key = self.keys[index]
        if key not in self.state[by]:
            run = self.launch(index, under_callgrind=by == "instructions")
            self.state[by][key] = COUNTS[by](run.records) if run.ok else None
            self._save()
        return self.state[by][key]

    def _change(self, before: int, after: int) -> WorkChange | InstructionChange:
        """What moved from one point's count to another's."""
        compare = compare_instructions if self.state["by"] == "instructions" else compare_work
        return compare(self._counted(before), self._counted(after))

    def _like(self, one: int, other: int) -> bool:
        """Whether two points count alike: the same work, or instructions within their own noise."""
        if self.state["by"] == "instructions":
            return not self._change(one, other).changed
        return work_digest(self._counted(one)) == work_digest(self._counted(other))

    def _same_work(self, low: int, high: int) -> bool:
        """A pending range whose ends count alike holds no change of what is counted: it is dropped."""
        if not self._like(low, high):
            return False
        self.state["pending"].pop()
        self.state["same_work"].append([self.keys[low], self.keys[high]])
        self._save()
        return True

    def _place_by_counts(self, step: dict, low: int, mid: int, high: int) -> bool:
        """Places the midpoint by what its one launch counted; False where it is skipped (its launch
        failed)."""
        if self._counted(mid) is None:
            self._skip(step, f"its launch failed or counted no {self.state['by']}")
            return False
        kind = bisection.place_by_counts(self._like(low, mid), self._like(mid, high))
        evidence = {"against_good": self._change(low, mid).text(), "against_bad": self._change(high, mid).text()}
        self._placed(step, low, mid, high, kind, self.state["by"],
                     evidence, f"against {self.points[low].short}: {evidence['against_good']}; against "
                               f"{self.points[high].short}: {evidence['against_bad']}")
        return True

    # -- a step: its midpoint placed by its work, or by rounds of launches ----------------------
    def _step(self) -> None:
        step = self.state["current"]
        low, high = step["range"]
        while step["candidates"]:
            mid = step["candidates"][0]
            try:
                self.environment(mid)
            except references.ReferenceError as error:
                self._skip(step, f"cannot be built: {error}")
                continue
            self._choose_by()  # once a midpoint can be built: bad input is said before any launch
            if self.by_counts:
                if self._place_by_counts(step, low, mid, high):
                    return
                continue
            placement = self._rounds(step, low, mid, high)
            if placement is None:
                self._skip(step, "its launch failed: " + step["error"])
                continue
            self._finish(step, low, mid, high, placement)
            return
        skipped = "; ".join(f"{s['point']} {s['why']}" for s in step["skipped"])
        if (low, high) == (0, len(self.points) - 1):
            raise BisectError(f"nothing between --good {self.label(low)} and --bad {self.label(high)} could be "
                              f"built and run as a midpoint ({skipped})")
        self.state["unresolved"].append({"range": [self.keys[low], self.keys[high]],
                                         "why": "no midpoint in the range could be built and run",
                                         "skipped": step["skipped"]})
        self.say(f"  {self.label(low)} .. {self.label(high)}: no midpoint could be built and run; left unresolved")
        self.state["current"] = None
        self._save()

    def _skip(self, step: dict, why: str) -> None:
        mid = step["candidates"].pop(0)
        step["skipped"].append({"point": self.keys[mid], "why": why})
        step.update(StepRounds.empty())
        self.say(f"  skipped {self.label(mid)}: {why}")
        self._save()

    def _rounds(self, step: dict, low: int, mid: int, high: int) -> bisection.Placement | None:
        """Rounds of the three points through the A/B core (:func:`harness.session.rounds.run_rounds`)
        until the midpoint's place is clear or the most rounds are in, judged at each look with the
        error spent across the step's looks; None where a launch of the midpoint failed (the
        failure named in the step's ``failed``). A launch of an end that fails, or a node too busy to
        compare on, ends the bisect, its rounds kept."""
        points = {"good": low, "mid": mid, "bad": high}
        step["error"] = None  # what stopped an earlier start (an end's failure, a busy node) is in its records
        rounds = StepRounds(step, first_step=(low, high) == (0, len(self.points) - 1))

        def launch(point: str) -> CellRun:
            return self.launch(points[point], charge=False)

        def round_of(order: str, launched: LaunchedFn) -> dict[str, CellRun]:
            self._charge(len(points))  # a round cut in two would be launched again whole
            return back_to_back(launch, bisection.sequence)(order, launched)

        def after_look() -> None:
            placement = rounds.placement
            if rounds.decided or len(rounds.kept) >= self.settings.max_rounds:
                return
            unclear = placement.kind if placement.kind == bisection.UNCLEAR else \
                f"{placement.kind}, but the regression itself (bad/good) is {placement.ends.kind} so far"
            self.say(f"  {self.label(mid)}: {unclear} after {len(rounds.kept)} rounds, more rounds")

        settings = self._pair_settings()
        run_rounds(rounds, round_of, settings, self.rng, started=time.monotonic(), on_round=self._save,
                   on_look=after_look)
        if rounds.placement is None and not rounds.error:  # resumed with its last look judged before
            rounds.judge(settings)
        self._save()
        if rounds.error and step["failed"]:
            failure = step["failed"][-1]
            if failure["side"] == "mid":
                return None
            raise BisectError(f"the range's {failure['side']} end {self.label(points[failure['side']])} cannot be "
                              f"launched: {rounds.error}")
        if rounds.error or too_busy(rounds):  # a busy node holds an A/B's verdict; a step ends 3, to resume
            raise NodeTooBusy(f"{self.label(mid)}: {rounds.error or busy_words(rounds)}")
        return rounds.placement

    def _pair_settings(self, first: int | None = None) -> PairSettings:
        """How the bisect's rounds and pairs are measured and judged by the A/B core: its own budget
        holds (:meth:`_charge`), not a time per comparison."""
        return PairSettings(first=first or self.settings.rounds, most=self.settings.max_rounds,
                            min_effect=self.settings.min_effect, alpha=self.settings.alpha, rule=self.settings.rule,
                            notable=self.settings.notable, budget_s=math.inf)

    def _finish(self, step: dict, low: int, mid: int, high: int, placement: bisection.Placement) -> None:
        if (low, high) == (0, len(self.points) - 1) and placement.ends.kind != PairedKind.REGRESSED:
            raise BisectError(f"the good end is not faster than the bad one: bad/good "
                              f"{placement.ends.ratio.text(3)} over {placement.ends.pairs} rounds "
                              f"({placement.ends.kind}, minimum effect {self.settings.min_effect:.0%})")
        kind, placed_by = placement.kind, "test"
        if kind == bisection.UNCLEAR:
            kind, placed_by = bisection.lean(placement), "position"
        self._placed(step, low, mid, high, kind, placed_by, placement.to_json(), placement.message)

    def _placed(self, step: dict, low: int, mid: int, high: int, kind: str, placed_by: str, evidence: dict,
                message: str) -> None:
        halves = [[mid, high], [low, mid]] if kind in bisection.BOTH_HALVES else \
            {bisection.LIKE_GOOD: [[mid, high]], bisection.LIKE_BAD: [[low, mid]]}[kind]
        self.state["pending"] += halves
        record = {"range": [self.keys[low], self.keys[high]], "mid": self.keys[mid], "placement": kind,
                  "placed_by": placed_by, "evidence": evidence, "rounds": step["rounds"],
                  "looks": step["looks"], "failed": step["failed"], "left_out": step["left_out"],
                  "launch_log": step["launch_log"], "skipped": step["skipped"]}
        self.state["steps"].append(record)
        self.state["current"] = None
        self._save()
        both = {bisection.BETWEEN: "; two culprits: searching both halves",
                bisection.BEYOND: "; a change each way in the range: searching both halves"}.get(kind, "")
        low_confidence = " (placed by its position alone: the tests stayed unclear)" if placed_by == "position" else ""
        self.say(f"step {len(self.state['steps'])}: {high - low - 1} point(s) between "
                 f"{self.points[low].short} and {self.points[high].short}; midpoint {self.label(mid)}: {kind}"
                 f"{low_confidence}{both}\n  {message}; {self.state['launches']} launches so far")

    def _verify(self, culprit: int) -> None:
        """The change at ``culprit`` against the point before it (its parent commit, the version
        before), as an A/B of pairs: a culprit where it made the cell slower, a fix where faster.
        Its pairs are kept in the state after every pair, and a resumed bisect goes on from them."""
        parent = culprit - 1
        sides = {"reference": parent, "current": culprit}
        pair_settings = self._pair_settings(first=self.settings.verify_pairs)
        kept = self.state["verifying"]
        resumed = None
        if kept and kept["point"] == self.keys[culprit] and kept["parent"] == self.keys[parent]:
            resumed = PairedResult.from_json(kept["result"], self.cell, self.environment(parent))
            self.say(f"  {self.label(culprit)}: going on from the {len(resumed.pairs)} pair(s) its verification "
                     f"kept")
        launched = itertools.count()  # from a pair's start: a resumed result goes on at the next pair

        def launch(side: str) -> CellRun:
            if next(launched) % 2 == 0:
                self._charge(2)  # a pair's first launch charges for both: the budget never cuts a pair in two
            return self.launch(sides[side], charge=False)

        live = [resumed] if resumed else []
        began = time.monotonic() - (resumed.wall_s if resumed else 0.0)

        def keep(result: PairedResult) -> None:
            """After every pair (before the look it completes is judged), with the time so far
            (``measure_pairs`` sets the result's own at its end)."""
            live[:] = [result]
            kept = {**result.to_json(), "wall_s": round(time.monotonic() - began, 3)}
            self.state["verifying"] = {"point": self.keys[culprit], "parent": self.keys[parent], "result": kept}
            self._save()

        if resumed is None or not resumed.error:
            self._charge(2 * max(1, self.settings.verify_pairs - (len(resumed.pairs) if resumed else 0)))
            try:
                paired = measure_pairs(self.cell, self.environment(parent), launch, pair_settings,
                                       seed=resumed.seed if resumed else self.rng.randrange(2 ** 32),
                                       on_pair=keep, resume=resumed)
            except (PairsInterrupted, BudgetSpent):
                if live:  # with the looks judged since the last pair: their error is spent
                    keep(live[0])
                    planned = planned_looks(pair_settings.first, pair_settings.most)
                    result = self.state["verifying"]["result"]
                    result["looks"] = [look for look in result["looks"] if look in planned]  # not an interrupt's
                    self._save()
                raise
        else:
            paired = resumed  # a failed launch had ended it
        self._record_change(parent, culprit, paired)

    def _record_change(self, parent: int, culprit: int, paired: PairedResult) -> None:
        kind = paired.verdict_kind
        evidence = paired.verdict.message if paired.verdict else paired.error
        whole = (parent, culprit) == (0, len(self.points) - 1)  # the pairs measured the range's own ends
        # by work, a change of work whose speed the pairs could not tell stands; one the ends show faster does not
        if whole and (kind == PairedKind.IMPROVED if self.by_counts else kind != PairedKind.REGRESSED):
            raise BisectError(f"the good end is not faster than the bad one: {kind}, {evidence}")
        work = None
        fix = kind == PairedKind.IMPROVED
        if self.by_counts:  # a change of work, verified by its count against its parent's; the pairs state its speed
            work = self._change(parent, culprit)
            verified = work.changed
            evidence = f"{work.text()}; speed: {kind}, {evidence}"
        else:
            verified = kind in (PairedKind.REGRESSED, PairedKind.IMPROVED)
        verdict = paired.verdict
        record = {"point": self.keys[culprit], "parent": self.keys[parent], "label": self.label(culprit),
                  "verified": verified, "verdict": kind, "evidence": evidence,
                  **({self.state["by"]: work.to_json()} if work else {}),
                  "ratio": {"ratio": verdict.ratio.value, "low": finite_or_none(verdict.ratio.low),
                            "high": finite_or_none(verdict.ratio.high), "level": verdict.look.level}
                  if verdict else None,
                  "pairs": [dataclasses.asdict(pair) for pair in paired.pairs], "looks": paired.looks,
                  "launches": paired.launches, "wall_s": round(paired.wall_s, 1), "failures": paired.failures,
                  "left_out": paired.left_out, "seed": paired.seed}
        (self.state["fixes"] if fix else self.state["culprits"]).append(record)
        self.state["verifying"] = None
        self.state["pending"].pop()
        self._save()
        said = "fix" if fix else "culprit"
        how = f" by its {self.state['by']}" if self.by_counts else ""
        self.say(f"{said} {self.label(culprit)}: {'verified' if record['verified'] else 'NOT confirmed'}{how} against "
                 f"{self.label(parent)}: {evidence if self.by_counts else f'{kind}, {evidence}'}")

    def _account(self) -> None:
        """Whether the changes verified account for the range's slowdown, measured as bad/good by its
        first step's rounds; and which fix undid which culprit. A range of one point has no step: its
        one verification is the range's change, and a bisect by work measures no range's speed."""
        whole = [self.keys[0], self.keys[-1]]
        first = next((step for step in self.state["steps"] if step["range"] == whole and step["placed_by"] not in COUNTED_BY),
                     None)
        culprits = [culprit for culprit in self.state["culprits"] if culprit["verified"]]
        fixes = [fix for fix in self.state["fixes"] if fix["verified"]]
        if first is not None:
            accounting = bisection.account([bisection.ratio_of(change["ratio"]) for change in culprits + fixes],
                                           bisection.ratio_of(first["evidence"]["ends"]))
            self.state["accounting"] = accounting.to_json()
        at = {key: index for index, key in enumerate(self.keys)}
        for fix in sorted(fixes, key=lambda fix: at[fix["point"]]):
            undone = [culprit for culprit in culprits if at[culprit["point"]] < at[fix["point"]]
                      and not culprit.get("undone_by")
                      and bisection.undoes(bisection.ratio_of(culprit["ratio"]), bisection.ratio_of(fix["ratio"]),
                                           self.settings.min_effect)]
            if undone:  # the latest culprit before the fix that it undid
                max(undone, key=lambda culprit: at[culprit["point"]])["undone_by"] = fix["point"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dlscale-bisect", description=__doc__.split("\n\n")[0])
    parser.add_argument("cell", help="the cell, as the suite names it (e.g. ddp-synthetic-resnet44-g1)")
    parser.add_argument("--good", required=True, action="append",
                        help="a commit where the cell ran fast, or pkg:NAME==VERSION (one per package)")
    parser.add_argument("--bad", action="append",
                        help="a later commit where it runs slower (default HEAD), or pkg:NAME==VERSION (one per "
                             "package; default: as installed)")
    parser.add_argument("--together", action="append", default=[], metavar="NAME,NAME",
                        help="packages that move together in a bisect across packages (torch with torchvision "
                             "and horovod, and tensorflow or mxnet with horovod, always do)")
    parser.add_argument("--repo", type=Path, default=HARNESS_SOURCE.parent,
                        help="the project's git checkout (default: the one this harness comes from)")
    suite = parser.add_argument_group("the launches (as the suite's options of the same names)")
    suite.add_argument("--launcher")
    for name in ("profile", "device"):
        suite.add_argument(f"--{name}", default="auto")
    for name in ("image-size", "batch-size", "steps", "warmup-steps", "num-workers", "cores-per-rank"):
        suite.add_argument(f"--{name}", type=int)
    suite.add_argument("--data", type=Path)
    suite.add_argument("--partition")
    suite.add_argument("--launch-env", action="append", default=[], metavar="NAME=VALUE")
    steps = parser.add_argument_group("the steps")
    steps.add_argument("--rounds", type=int, default=Settings.rounds,
                       help="rounds of a step's first try (default %(default)s), doubled while unclear")
    steps.add_argument("--max-rounds", type=int, default=Settings.max_rounds, help="default %(default)s")
    steps.add_argument("--min-effect", type=float, default=Settings.min_effect,
                       help="smallest change that counts (relative throughput; default: the system's min_effect "
                            f"tunable, else {DEFAULT_TUNABLES.min_effect:g})")
    steps.add_argument("--verify-pairs", type=int, default=Settings.verify_pairs,
                       help="pairs of the culprit's A/B against the point before it, doubled while unclear "
                            "(default %(default)s)")
    steps.add_argument("--by", choices=("auto", *COUNTED_BY, "time"), default=Settings.by,
                       help="place each midpoint by the work a step counts (one launch a point), by its steps' host "
                            "instructions under callgrind (one launch a point, minutes each), by its speed (rounds "
                            "of launches), or by work where the range's ends count different work (default "
                            "%(default)s)")
    steps.add_argument("--max-launches", type=int, default=Settings.max_launches, help="default %(default)s")
    steps.add_argument("--max-time", type=float, default=Settings.max_seconds, help="seconds (default %(default)s)")
    steps.add_argument("--seed", type=int)
    out = parser.add_argument_group("output")
    out.add_argument("--state", type=Path, help="the resumable state (default results/bisect/<cell>.state.json)")
    out.add_argument("--json", type=Path, help="the result (default results/bisect/<cell>.json)")
    return parser


def report(states: Sequence[dict]) -> str:
    lines = []
    for state in states:
        lines.append(f"dlscale-bisect {state['cell']}: {len(state['points']) - 1} point(s), {len(state['steps'])} "
                     f"step(s), {state['launches']} launches, {state['spent_s']:.0f} s")
        labels = {change["point"]: change["label"] for change in state["culprits"] + state["fixes"]}
        at = {key: index for index, key in enumerate(state["points"])}
        changes = [("culprit", change) for change in state["culprits"]] + [("fix", change) for change in state["fixes"]]
        for said, change in sorted(changes, key=lambda pair: at[pair[1]["point"]]):
            undone = f"; undone later by {labels[change['undone_by']]}" if change.get("undone_by") else ""
            lines.append(f"  {said} {change['label']}: {'verified' if change['verified'] else 'not confirmed'} "
                         f"({change['evidence']}){undone}")
        for left in state["unresolved"]:
            lines.append(f"  unresolved {left['range'][0]}..{left['range'][1]}: {left['why']}")
        if state.get("accounting"):
            lines.append(f"  {state['accounting']['message']}")
    return "\n".join(lines)


def succeeded(states: Sequence[dict]) -> bool:
    """Every bisect found a culprit, verified every change it found, left no range unresolved, and
    the changes found account for its range's slowdown."""
    return all(state["culprits"] and all(change["verified"] for change in state["culprits"] + state["fixes"])
               and not state["unresolved"] and (state.get("accounting") or {"holds": True})["holds"]
               for state in states)


def across_packages(start: Callable[[list[Point], Path, Settings], dict], good: Mapping[str, str],
                    bad: Mapping[str, str], moves: Sequence[tuple[str, ...]], settings: Settings, state_path: Path,
                    say: Callable[[str], None]) -> list[dict]:
    """The bisects of a move from the ``good`` package set to the ``bad`` one: which move (when
    several), then which version of the package that move changed. ``start`` runs one bisect over
    its points with its state file and budget, and returns its state."""
    def versions(name: str, held: Mapping[str, str]) -> list[Point]:
        return version_points(f"pkg:{name}=={good[name]}", f"pkg:{name}=={bad[name]}",
                              held=[f"pkg:{other}=={version}" for other, version in sorted(held.items()) if other != name])

    if len(moves) == 1 and len(moves[0]) == 1:
        return [start(versions(moves[0][0], good), state_path, settings)]
    points = package_points(good, bad, moves)
    say(f"dlscale-bisect: {len(moves)} move(s) from the good package set to the bad: "
        + "; ".join(point.label for point in points[1:]))
    states = [start(points, state_path, settings)]
    for culprit in states[0]["culprits"]:
        index = states[0]["points"].index(culprit["point"])
        group = moves[index - 1]
        if len(group) > 1:
            say(f"  {', '.join(group)} moved together: their versions are not bisected one by one")
            continue
        if not culprit["verified"]:
            continue
        before = {**good, **{name: bad[name] for earlier in moves[:index - 1] for name in earlier}}
        try:
            points_of_name = versions(group[0], before)
        except BisectError as error:
            say(f"  the versions of {group[0]} between are not bisected: {error}")
            continue
        if len(points_of_name) == 2:
            continue  # adjacent versions: the move's own verification named the culprit
        launches, spent_s = sum(s["launches"] for s in states), sum(s["spent_s"] for s in states)
        left = dataclasses.replace(settings, max_launches=settings.max_launches - launches,
                                   max_seconds=settings.max_seconds - spent_s)
        say(f"dlscale-bisect: {culprit['label']}: which of its {len(points_of_name) - 1} version(s)")
        states.append(start(points_of_name, state_path.with_name(f"{state_path.stem}-{group[0]}.json"), left))
    return states


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    for name in ("rounds", "max_rounds", "verify_pairs", "max_launches"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.min_effect is not None and not 0 < args.min_effect < 1:
        parser.error(f"--min-effect must lie between 0 and 1, got {args.min_effect}")
    settings = Settings(rounds=args.rounds, max_rounds=max(args.rounds, args.max_rounds), min_effect=args.min_effect,
                        verify_pairs=args.verify_pairs, max_launches=args.max_launches, max_seconds=args.max_time,
                        by=args.by)
    state_path = args.state or Path("results") / "bisect" / f"{args.cell}.state.json"
    json_path = args.json or Path("results") / "bisect" / f"{args.cell}.json"
    try:
        by_packages = any(part.startswith("pkg:") for part in [*args.good, *(args.bad or [])])
        if by_packages:
            good, bad = package_sets_of(args.good, args.bad or [], installed_packages())
            moves = package_moves(good, bad, [names.split(",") for names in args.together])
            if not moves:
                raise BisectError("--good and --bad are the same package set: nothing to bisect")
        elif len(args.good) > 1 or len(args.bad or []) > 1:
            raise BisectError("a bisect across commits takes one --good REF and at most one --bad REF")
        else:
            points = commit_points(args.repo, args.good[0], (args.bad or ["HEAD"])[0])
        try:
            suite = Suite(SuiteOptions(
                launcher=args.launcher, **cell_options(args.cell), profile=args.profile, device=args.device,
                image_size=args.image_size, batch_size=args.batch_size, steps=args.steps,
                warmup_steps=args.warmup_steps, num_workers=args.num_workers, cores_per_rank=args.cores_per_rank,
                data=args.data, partition=args.partition, launch_env=tuple(args.launch_env), history_dir=None,
                workdir=state_path.parent / "cells"))
        except SuiteError as error:
            raise BisectError(f"no cell {args.cell}: {error}") from None
        cell = next((cell for cell in suite.cells() if cell.id == args.cell), None)
        if cell is None:
            raise BisectError(f"no cell {args.cell}: the suite's matrix for it holds "
                              f"{', '.join(c.id for c in suite.cells()) or 'none'}")
        if reason := suite.skip_reason(cell):
            raise BisectError(f"{cell.id} cannot run here: {reason}")
        ready = suite.prepare()
        settings = dataclasses.replace(settings, min_effect=settings.min_effect or ready.baselines.tunables.min_effect,
                                       alpha=suite.pair_settings.alpha, rule=suite.pair_settings.rule,
                                       notable=suite.pair_settings.notable)

        def say(line: str) -> None:
            print(line, flush=True)

        def start(points: list[Point], state: Path, budget: Settings) -> dict:
            say(f"dlscale-bisect {cell.id}: {len(points) - 1} point(s) after {points[0].label} up to "
                f"{points[-1].label}, launcher {ready.launcher.name}")
            bound = launch_settings(workload=ready.workload, launcher=ready.launcher.name,
                                    cores_per_rank=ready.cores_per_rank, device=args.device, system=ready.system,
                                    launch_environment=suite.launch_environment, packages=ready.packages,
                                    harness_code=(ready.provenance.get("code") or {}).get("harness"),
                                    settings=budget)
            return Bisect(suite, cell, args.repo, points, budget, state, settings_bound=bound, seed=args.seed,
                          say=say).run()

        if by_packages:
            states = across_packages(start, good, bad, moves, settings, state_path, say)
        else:
            states = [start(points, state_path, settings)]
    except (BisectError, SuiteError, references.ReferenceError) as error:
        print(f"dlscale-bisect: {error}", file=sys.stderr)
        return 2
    except (BudgetSpent, NodeTooBusy, KeyboardInterrupt) as stop:
        print(f"dlscale-bisect: {stop or 'interrupted'}; the state is in {state_path}: the same command goes on "
              f"from there", file=sys.stderr)
        return 3
    result = states[0] if len(states) == 1 else {
        "cell": cell.id, "phases": states, "culprits": [c for state in states for c in state["culprits"]],
        "fixes": [f for state in states for f in state["fixes"]],
        "unresolved": [u for state in states for u in state["unresolved"]],
        "launches": sum(state["launches"] for state in states), "spent_s": sum(state["spent_s"] for state in states)}
    write_json_atomic(json_path, result)
    print(report(states))
    print(f"written to {json_path}")
    return 0 if succeeded(states) else 1


if __name__ == "__main__":
    sys.exit(main())
