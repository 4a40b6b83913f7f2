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

This module is the command line; the parts of a bisect are modules of their own: its settings and
what its state is bound to (:mod:`~harness.tasks.bisect_settings`), its state
(:mod:`~harness.tasks.bisect_state`), its points' launches (:mod:`~harness.tasks.bisect_launches`),
the search (:mod:`~harness.tasks.bisect_search`), midpoints placed by counts
(:mod:`~harness.tasks.bisect_counted`) or by timed rounds (:mod:`~harness.tasks.bisect_timed`), the
A/Bs of two points (:mod:`~harness.tasks.bisect_verification`), the changes found and their
accounting (:mod:`~harness.tasks.bisect_changes`) and what it says at the end
(:mod:`~harness.tasks.bisect_report`).

A commit's ranks run that commit's ``harness`` package (exported from git, as ``--against git:REF``
does) under the installed packages; a package set's ranks run the current harness with those
versions installed over the current environment (as ``--against pkg:NAME==VERSION``). Exit status:
0 every culprit found verified and accounting for the range's slowdown, 1 a culprit not confirmed,
a range left unresolved or a slowdown the changes found do not account for, 2 bad input, 3 the
budget spent or the node too busy to compare on (the state kept).
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Callable, Mapping, Sequence

from harness import HARNESS_SOURCE
from harness.common.jsonio import write_json_atomic
from harness.config.options import SuiteError, SuiteOptions
from harness.judging.paired import MIN_PAIRS
from harness.judging.tunables import DEFAULT_TUNABLES
from harness.machine import references
from harness.machine.provenance import installed_packages
from harness.rank.numerics import Numerics
from harness.session.suite import Suite
from harness.tasks.bisect_points import (BisectError, Point, commit_points, package_moves, package_points,
                                         package_sets_of, version_points)
from harness.tasks.bisect_report import report, succeeded
from harness.tasks.bisect_search import Bisect
from harness.tasks.bisect_settings import COUNTED_BY, BudgetSpent, NodeTooBusy, Settings, launch_settings


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
    suite.add_argument("--workload-profile", "--profile", dest="profile", default="auto")
    suite.add_argument("--rank-device", "--device", dest="device", default="auto")
    for name in ("image-size", "batch-size", "steps", "warmup-steps", "num-workers", "cores-per-rank"):
        suite.add_argument(f"--{name}", type=int)
    suite.add_argument("--dlscale-data", "--data", dest="data", type=Path)
    suite.add_argument("--partition")
    suite.add_argument("--launch-env", action="append", default=[], metavar="NAME=VALUE")
    steps = parser.add_argument_group("the steps")
    steps.add_argument("--rounds", type=int, default=Settings.rounds,
                       help=f"rounds of a step's first try (at least {MIN_PAIRS}; default %(default)s), doubled "
                            "while unclear")
    steps.add_argument("--max-rounds", type=int, default=Settings.max_rounds, help="default %(default)s")
    steps.add_argument("--min-effect", type=float, default=Settings.min_effect,
                       help="smallest change that counts (relative throughput; default: the system's min_effect "
                            f"tunable, else {DEFAULT_TUNABLES.min_effect:g})")
    steps.add_argument("--verify-pairs", type=int, default=Settings.verify_pairs,
                       help="pairs of the culprit's A/B against the point before it, doubled while unclear "
                            "(default %(default)s)")
    steps.add_argument("--by", choices=("auto", *COUNTED_BY, "time"), default=Settings.by,
                       help="place each midpoint by the work a step counts (one launch a point: which commit "
                            "changed the work), by its steps' host instructions under callgrind (one launch a point, "
                            "minutes each), by its speed (rounds of launches), or what made it slower: by work first "
                            "where the range's ends count different work, then by speed where the slowdown is "
                            "(default %(default)s)")
    steps.add_argument("--max-launches", type=int, default=Settings.max_launches, help="default %(default)s")
    steps.add_argument("--max-time", type=float, default=Settings.max_seconds, help="seconds (default %(default)s)")
    steps.add_argument("--seed", type=int)
    out = parser.add_argument_group("output")
    out.add_argument("--state", type=Path, help="the resumable state (default results/bisect/<cell>.state.json)")
    out.add_argument("--json", type=Path, help="the result (default results/bisect/<cell>.json)")
    return parser


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


def _wrong_numbers(args: argparse.Namespace) -> str | None:
    """What is wrong with the steps' numbers, said before any launch: a look of fewer than
    :data:`MIN_PAIRS` rounds or pairs has no interval to judge (as the suite's ``--pairs``)."""
    for name, least in (("rounds", MIN_PAIRS), ("max_rounds", MIN_PAIRS), ("verify_pairs", MIN_PAIRS),
                        ("max_launches", 1)):
        if getattr(args, name) < least:
            return f"--{name.replace('_', '-')} must be at least {least}, got {getattr(args, name)}"
    for name in ("rounds", "verify_pairs"):
        if getattr(args, name) > args.max_rounds:
            return f"--{name.replace('_', '-')} ({getattr(args, name)}) must not exceed --max-rounds ({args.max_rounds})"
    if args.min_effect is not None and not 0 < args.min_effect < 1:
        return f"--min-effect must lie between 0 and 1, got {args.min_effect}"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if wrong := _wrong_numbers(args):
        print(f"dlscale-bisect: {wrong}", file=sys.stderr)
        return 2
    settings = Settings(rounds=args.rounds, max_rounds=args.max_rounds, min_effect=args.min_effect,
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
            return Bisect(suite.launching, cell, args.repo, points, budget, state, settings_bound=bound,
                          seed=args.seed, say=say).run()

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
