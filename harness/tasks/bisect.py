"""dlscale-bisect: which commit of the project, or which version of a package, made a cell slower,
with the evidence for each step.

    dlscale-bisect CELL --good REF [--bad REF] [the suite's workload and launcher options]
    dlscale-bisect CELL --good pkg:NAME==A --bad pkg:NAME==B

The points are the commits from ``--good`` (exclusive) to ``--bad`` (inclusive, default HEAD) along the
first-parent line, or every version of the package the indexes hold from A (exclusive) to B
(inclusive). Each step launches the range's good end, its midpoint and its bad end in rounds, in random
order within each round, on the same nodes, and places the midpoint by which end it runs like
(:mod:`harness.judging.bisection`): 8 rounds, then 16 and 32 while that is unclear. A midpoint that
cannot be built or whose launches fail is skipped for its neighbour (``git bisect skip``); a midpoint
between the ends with confidence means two culprits, and both halves are searched. At adjacent points
the culprit is verified by an A/B against its predecessor (:mod:`harness.session.paired`).

A commit's ranks run that commit's ``harness`` package (exported from git, as ``--against git:REF``
does) under the installed packages; a version's ranks run the current harness with that version
installed over the current environment (as ``--against pkg:NAME==VERSION``). The state is written
after every round: a bisect cut short (Ctrl-C, its budget, the allocation's end) goes on from where
it stopped when started again with the same arguments. Exit status: 0 every culprit found and
verified, 1 a culprit not confirmed or a range left unresolved, 2 bad input, 3 the budget spent (the
state kept).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import random
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

from harness import HARNESS_SOURCE
from harness.common.jsonio import write_json_atomic
from harness.config.options import SuiteError, SuiteOptions
from harness.judging import bisection
from harness.judging.kinds import PairedKind
from harness.launch.runner import CellRun
from harness.machine import package_sets, references
from harness.rank.cell import Cell
from harness.rank.numerics import Numerics
from harness.session.paired import PairSettings, launch_figure, measure_pairs
from harness.session.suite import Suite

STATE_VERSION = 1


class BisectError(ValueError):
    """Bad input, said in one line: an unknown ref or cell, a good end that is not faster."""


class BudgetSpent(RuntimeError):
    pass


@dataclasses.dataclass(frozen=True, kw_only=True)  # no slots: the parser reads the defaults off the class
class Settings:
    rounds: int = 8
    max_rounds: int = 32
    min_effect: float = 0.03
    verify_pairs: int = 8
    max_launches: int = 600
    max_seconds: float = 6 * 3600.0


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


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise BisectError(f"git {' '.join(args)} in {repo}: {done.stderr.strip().splitlines()[-1:] or done.returncode}")
    return done.stdout.strip()


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Point:
    """One candidate of a bisect: a commit or a package version, as the reference parts that build it."""
    key: str
    """The commit's hash, or ``NAME==VERSION``."""
    short: str
    """As the progress lines name it: the hash's first ten digits, or the key."""
    parts: tuple[str, ...]
    label: str


def commits_between(repo: Path, good: str, bad: str) -> list[str]:
    """The good commit, then every commit after it up to the bad one along the first-parent line."""
    ends = []
    for name, ref in (("--good", good), ("--bad", bad)):
        commit = references.commit_of(repo, ref)
        if commit is None:
            raise BisectError(f"{name} {ref}: no such commit in {repo}")
        ends.append(commit)
    if subprocess.run(["git", "-C", str(repo), "merge-base", "--is-ancestor", *ends], timeout=60).returncode != 0:
        raise BisectError(f"--good {good} is not an ancestor of --bad {bad}: no range to bisect")
    between = git(repo, "rev-list", "--first-parent", "--reverse", f"{ends[0]}..{ends[1]}").split()
    if not between:
        raise BisectError(f"--good {good} and --bad {bad} are the same commit: nothing to bisect")
    return [ends[0], *between]


def commit_points(repo: Path, good: str, bad: str) -> list[Point]:
    return [Point(key=sha, short=sha[:10], parts=(f"git:{sha}",),
                  label=f"{sha[:10]} {git(repo, 'log', '-1', '--format=%s', sha)}")
            for sha in commits_between(repo, good, bad)]


def index_versions(name: str) -> list[str]:
    """Every version of ``name`` pip's indexes and find-links hold (``pip index versions``)."""
    done = subprocess.run([sys.executable, "-m", "pip", "index", "versions", name], capture_output=True, text=True,
                          timeout=300)
    listed = next((line for line in done.stdout.splitlines() if line.startswith("Available versions:")), None)
    if done.returncode != 0 or listed is None:
        said = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise BisectError(f"the indexes list no versions of {name}: {said}")
    return [version.strip() for version in listed.partition(":")[2].split(",") if version.strip()]


def version_points(good: str, bad: str, listed: Sequence[str] | None = None) -> list[Point]:
    """``pkg:NAME==A`` and ``pkg:NAME==B``: A, then every version the indexes hold after it up to B."""
    from packaging.version import InvalidVersion, Version

    try:
        (name, low), (other, high) = (package_sets.parse_pin(pin.removeprefix("pkg:")) for pin in (good, bad))
    except package_sets.PackageSetError as error:
        raise BisectError(str(error)) from None
    if name != other:
        raise BisectError(f"--good {good} and --bad {bad} name two packages: bisect one package's versions")
    try:
        if Version(low) >= Version(high):
            raise BisectError(f"--good {good} is not older than --bad {bad}: no range to bisect")
        versions = sorted({v for v in (listed if listed is not None else index_versions(name))
                           if Version(low) < Version(v) <= Version(high)} | {high}, key=Version)
    except InvalidVersion as error:
        raise BisectError(f"{name}: {error}") from None
    return [Point(key=f"{name}=={v}", short=f"{name}=={v}", parts=(f"pkg:{name}=={v}",), label=f"{name} {v}")
            for v in (low, *versions)]


class Bisect:
    """One bisect of one cell over ``points`` (good first, bad last), its state in ``state_path``."""

    def __init__(self, suite: Suite, cell: Cell, repo: Path, points: list[Point], settings: Settings,
                 state_path: Path, *, seed: int | None = None, say: Callable[[str], None] = print):
        self.suite, self.cell, self.repo, self.points, self.settings = suite, cell, repo, points, settings
        self.keys = [point.key for point in points]
        self.state_path, self.say = state_path, say
        self.rng = random.Random(seed)
        self.environments: dict[int, references.Environment] = {}
        self.started = time.monotonic()
        self.state = self._load_state() or {
            "version": STATE_VERSION, "cell": cell.id, "repo": str(repo), "points": self.keys,
            "pending": [[0, len(points) - 1]], "current": None, "steps": [], "culprits": [], "unresolved": [],
            "launches": 0, "spent_s": 0.0, "done": False}
        self._spent_before = self.state["spent_s"]

    # -- state ---------------------------------------------------------------------------------
    def _load_state(self) -> dict | None:
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
        self.say(f"dlscale-bisect: going on from {self.state_path} ({len(state['steps'])} step(s), "
                 f"{state['launches']} launch(es) done)")
        return state

    def _save(self) -> None:
        self.state["spent_s"] = round(self._spent_before + time.monotonic() - self.started, 1)
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.state_path, self.state)

    def _charge(self, launches: int) -> None:
        """Stop before ``launches`` more would pass the budget."""
        spent_s = self._spent_before + time.monotonic() - self.started
        if self.state["launches"] + launches > self.settings.max_launches or spent_s > self.settings.max_seconds:
            raise BudgetSpent(f"the budget is spent ({self.state['launches']} launches of "
                              f"{self.settings.max_launches}, {spent_s:.0f} s of {self.settings.max_seconds:.0f})")

    # -- the points ----------------------------------------------------------------------------
    def label(self, index: int) -> str:
        return self.points[index].label

    def environment(self, index: int) -> references.Environment:
        if index not in self.environments:
            self.environments[index] = references.build(self.points[index].parts, self.suite.current_environment,
                                                        repo=self.repo)
        return self.environments[index]

    def launch(self, index: int) -> CellRun:
        self._charge(1)
        place = "bisect-" + re.sub(r"[^\w.=-]", "_", self.keys[index][:40])
        run = self.suite.launch_in(self.cell, self.environment(index), place)
        self.state["launches"] += 1
        return run

    # -- the search ----------------------------------------------------------------------------
    def run(self) -> dict:
        while self.state["current"] or self.state["pending"]:
            if self.state["current"] is None:
                low, high = self.state["pending"][-1]
                if high - low == 1:
                    self._verify(high)  # takes the range off the pending ones once the culprit is recorded
                    continue
                self.state["pending"].pop()
                self.state["current"] = {"range": [low, high], "candidates": bisection.midpoint_candidates(low, high),
                                         "skipped": [], "rounds": [], "failed": []}
            self._step()
        self.state["done"] = True
        self._save()
        return self.state

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
            placement = self._rounds(step, low, mid, high)
            if placement is None:
                self._skip(step, "its launches failed: " + step["failed"][-1])
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
        step["rounds"], step["failed"] = [], []
        self.say(f"  skipped {self.label(mid)}: {why}")
        self._save()

    def _rounds(self, step: dict, low: int, mid: int, high: int) -> bisection.Placement | None:
        """Rounds of the three points until the midpoint's place is clear or the most rounds are in;
        None where the midpoint's launches failed in most rounds."""
        points = {"good": low, "mid": mid, "bad": high}
        first_step = (low, high) == (0, len(self.points) - 1)
        target = self.settings.rounds
        while True:
            for order in bisection.round_orders(target - len(step["rounds"]), self.rng):
                self._charge(len(points))  # a round cut in two would be launched again whole
                figures, failure = {}, None
                for point in order.split(","):
                    run = self.launch(points[point])
                    if not run.ok:
                        failure = f"{point} {run.status}: {(run.error or run.status).strip().splitlines()[0]}"
                        break
                    figures[point] = launch_figure(run)
                if failure:
                    step["failed"].append(failure)
                    if failure.startswith("mid") and len(step["failed"]) >= 2 and \
                            len(step["failed"]) > len(step["rounds"]):
                        return None
                    if len(step["failed"]) > 2 * max(1, len(step["rounds"])):
                        raise BisectError(f"launches keep failing at the range's ends: {failure}")
                else:
                    step["rounds"].append(bisection.Round(order=order, **figures).to_json())
                self._save()
            rounds = [bisection.Round(**r) for r in step["rounds"]]
            placement = bisection.place(rounds, min_effect=self.settings.min_effect)
            ends_clear = not first_step or placement.ends.kind == PairedKind.REGRESSED
            if (placement.kind != bisection.UNCLEAR and ends_clear) or len(rounds) >= self.settings.max_rounds:
                return placement
            self.say(f"  {self.label(mid)}: {placement.kind} after {len(rounds)} rounds, more rounds")
            target = min(2 * target, self.settings.max_rounds)

    def _finish(self, step: dict, low: int, mid: int, high: int, placement: bisection.Placement) -> None:
        if (low, high) == (0, len(self.points) - 1) and placement.ends.kind != PairedKind.REGRESSED:
            raise BisectError(f"the good end is not faster than the bad one: bad/good "
                              f"{placement.ends.ratio.value:.3f} [{placement.ends.ratio.low:.3f}, "
                              f"{placement.ends.ratio.high:.3f}] over {placement.ends.pairs} rounds "
                              f"({placement.ends.kind}, minimum effect {self.settings.min_effect:.0%})")
        kind, placed_by = placement.kind, "test"
        if kind == bisection.UNCLEAR:
            kind, placed_by = bisection.lean(placement), "position"
        halves = {bisection.LIKE_GOOD: [[mid, high]], bisection.LIKE_BAD: [[low, mid]],
                  bisection.BETWEEN: [[mid, high], [low, mid]]}[kind]
        self.state["pending"] += halves
        record = {"range": [self.keys[low], self.keys[high]], "mid": self.keys[mid], "placement": kind,
                  "placed_by": placed_by, "evidence": placement.to_json(), "rounds": step["rounds"],
                  "failed": step["failed"], "skipped": step["skipped"]}
        self.state["steps"].append(record)
        self.state["current"] = None
        self._save()
        two = "; two culprits: searching both halves" if kind == bisection.BETWEEN else ""
        low_confidence = " (placed by its position alone: the tests stayed unclear)" if placed_by == "position" else ""
        self.say(f"step {len(self.state['steps'])}: {high - low - 1} point(s) between "
                 f"{self.points[low].short} and {self.points[high].short}; midpoint {self.label(mid)}: {kind}"
                 f"{low_confidence}{two}\n  {placement.message}; {self.state['launches']} launches so far")

    def _verify(self, culprit: int) -> None:
        """The culprit against the point before it (its parent commit, the version before), as an A/B of pairs."""
        parent = culprit - 1
        sides = {"reference": parent, "current": culprit}
        self._charge(2 * self.settings.verify_pairs)
        paired = measure_pairs(self.cell, self.environment(parent), lambda side: self.launch(sides[side]),
                               PairSettings(first=self.settings.verify_pairs, most=self.settings.max_rounds,
                                            min_effect=self.settings.min_effect, budget_s=self.settings.max_seconds),
                               seed=self.rng.randrange(2 ** 32))
        verified = paired.verdict is not None and paired.verdict.kind == PairedKind.REGRESSED
        evidence = paired.verdict.message if paired.verdict else paired.error
        if not verified and (parent, culprit) == (0, len(self.points) - 1):
            raise BisectError(f"the good end is not faster than the bad one: {paired.verdict_kind}, {evidence}")
        self.state["culprits"].append({"point": self.keys[culprit], "parent": self.keys[parent],
                                       "label": self.label(culprit),
                                       "verified": verified, "verdict": paired.verdict_kind, "evidence": evidence,
                                       "pairs": [dataclasses.asdict(pair) for pair in paired.pairs]})
        self.state["pending"].pop()
        self._save()
        self.say(f"culprit {self.label(culprit)}: {'verified' if verified else 'NOT confirmed'} against "
                 f"{self.label(parent)}: {paired.verdict_kind}, {evidence}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dlscale-bisect", description=__doc__.split("\n\n")[0])
    parser.add_argument("cell", help="the cell, as the suite names it (e.g. ddp-synthetic-resnet44-g1)")
    parser.add_argument("--good", required=True, help="a commit where the cell ran fast, or pkg:NAME==VERSION")
    parser.add_argument("--bad", default="HEAD",
                        help="a later commit where it runs slower (default %(default)s), or pkg:NAME==VERSION")
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
                       help="smallest change that counts (relative throughput, default %(default)s)")
    steps.add_argument("--verify-pairs", type=int, default=Settings.verify_pairs,
                       help="pairs of the culprit's A/B against the point before it, doubled while unclear "
                            "(default %(default)s)")
    steps.add_argument("--max-launches", type=int, default=Settings.max_launches, help="default %(default)s")
    steps.add_argument("--max-time", type=float, default=Settings.max_seconds, help="seconds (default %(default)s)")
    steps.add_argument("--seed", type=int)
    out = parser.add_argument_group("output")
    out.add_argument("--state", type=Path, help="the resumable state (default results/bisect/<cell>.state.json)")
    out.add_argument("--json", type=Path, help="the result (default results/bisect/<cell>.json)")
    return parser


def report(state: dict) -> str:
    lines = [f"dlscale-bisect {state['cell']}: {len(state['points']) - 1} point(s), {len(state['steps'])} step(s), "
             f"{state['launches']} launches, {state['spent_s']:.0f} s"]
    for culprit in state["culprits"]:
        lines.append(f"  culprit {culprit['label']}: "
                     f"{'verified' if culprit['verified'] else 'not confirmed'} ({culprit['evidence']})")
    for left in state["unresolved"]:
        lines.append(f"  unresolved {left['range'][0]}..{left['range'][1]}: {left['why']}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    for name in ("rounds", "max_rounds", "verify_pairs", "max_launches"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if not 0 < args.min_effect < 1:
        parser.error(f"--min-effect must lie between 0 and 1, got {args.min_effect}")
    settings = Settings(rounds=args.rounds, max_rounds=max(args.rounds, args.max_rounds), min_effect=args.min_effect,
                        verify_pairs=args.verify_pairs, max_launches=args.max_launches, max_seconds=args.max_time)
    state_path = args.state or Path("results") / "bisect" / f"{args.cell}.state.json"
    json_path = args.json or Path("results") / "bisect" / f"{args.cell}.json"
    try:
        if args.good.startswith("pkg:") or args.bad.startswith("pkg:"):
            points = version_points(args.good, args.bad)
        else:
            points = commit_points(args.repo, args.good, args.bad)
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
        suite.prepare()
        print(f"dlscale-bisect {cell.id}: {len(points) - 1} point(s) after {points[0].label} up to "
              f"{points[-1].label}, launcher {suite.launcher.name}", flush=True)
        bisect = Bisect(suite, cell, args.repo, points, settings, state_path, seed=args.seed,
                        say=lambda line: print(line, flush=True))
        state = bisect.run()
    except (BisectError, SuiteError, references.ReferenceError) as error:
        print(f"dlscale-bisect: {error}", file=sys.stderr)
        return 2
    except (BudgetSpent, KeyboardInterrupt) as stop:
        print(f"dlscale-bisect: {stop or 'interrupted'}; the state is in {state_path}: the same command goes on "
              f"from there", file=sys.stderr)
        return 3
    write_json_atomic(json_path, state)
    print(report(state))
    print(f"written to {json_path}")
    verified = state["culprits"] and all(c["verified"] for c in state["culprits"]) and not state["unresolved"]
    return 0 if verified else 1


if __name__ == "__main__":
    sys.exit(main())
