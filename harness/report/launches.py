"""An A/B's launches side by side with what could set their speed (``dlscale-launches``).

    dlscale-launches RESULTS.json [RESULTS.json ...] [--cell ID] [--launches]

Reads the launch log of each A/B cell in the results files (several sessions of one cell pool),
and prints:

- the spread: each side's per-launch coefficient of variation, the standard deviation of a pair's
  log ratio, how the two launches of a pair correlate, and whether the windows of one launch agree
  more with each other than launches do (the share of the variance that lies between launches);
- what each launch cost: its wall time against its measured window, and where the rest went
  (the interpreter's start-up, the framework's and model's set-up, the warm-up, the teardown, the
  launcher's exit);
- which of the launch facts each rank recorded (:mod:`harness.rank.launch_facts`) separates slow
  launches from fast ones: each numeric fact's rank correlation with the launch's speed relative to
  its side's median (Spearman), and its median among the slower and the faster half.

``--launches`` lists every launch with its facts.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from harness.report.tables import format_table
from harness.session.rounds import timed_launches

FACTS = ("minor_faults", "major_faults", "voluntary_switches", "involuntary_switches", "steal_share",
         "anon_huge_kib", "hugetlb_kib", "max_rss_kib", "environment_bytes")
"""The numeric launch facts held against a launch's speed (each rank's, the largest taken)."""
LISTED = FACTS[:7]
"""The facts ``--launches`` lists for each launch: its faults, switches, steal and huge pages
(transparent and from the reserved pool; the pages its ``GLIBC_TUNABLES`` asked for are among its
variables)."""
PER_SECOND = frozenset({"involuntary_switches"})
"""Counts over the window that time drives (the scheduler's preemptions), held against the speed per
second of window: a slower launch's longer window would otherwise count more of them by its length
alone. The other counts are per launch, and so per step (every launch times as many): faults and
voluntary switches come with the steps' work."""


def launches_of(documents: Iterable[Mapping], cell: str | None = None) -> list[dict]:
    """Every completed launch of the A/B cells in ``documents`` (of ``cell`` only, where given), each
    with its session's index and its speed relative to its side's median in that session."""
    found = []
    for session, document in enumerate(documents):
        for paired in document.get("paired_cells") or []:
            if cell is not None and paired["cell"] != cell:
                continue
            done = timed_launches(paired.get("launch_log") or [])
            for side in ("reference", "current"):
                mine = [entry for entry in done if entry["side"] == side]
                if not mine:
                    continue
                median = statistics.median(entry["throughput"] for entry in mine)
                found += [{**entry, "session": session, "cell": paired["cell"], "duet": paired.get("duet", False),
                           "relative": entry["throughput"] / median} for entry in mine]
    return found


def fact(entry: Mapping, name: str) -> float | None:
    """A launch's numeric fact (a count per second of its window, :data:`PER_SECOND`): the largest
    over its ranks; None where no rank recorded it."""
    values = [facts.get(name) for facts in entry.get("launch_facts") or [] if facts]
    values = [value for value in values if isinstance(value, (int, float)) and not isinstance(value, bool)]
    if not values:
        return None
    return float(max(values)) / entry["window_s"] if name in PER_SECOND else float(max(values))


def fact_name(name: str) -> str:
    return f"{name}/s" if name in PER_SECOND else name


def cv(values: Sequence[float]) -> float:
    return statistics.stdev(values) / statistics.fmean(values) if len(values) > 1 else math.nan


def pair_logs(launches: Sequence[Mapping]) -> list[tuple[float, float]]:
    """Each pair's two launches' log throughputs (reference, current), where both completed."""
    by_pair: dict[tuple[int, str, int], dict[str, float]] = {}
    for entry in launches:
        by_pair.setdefault((entry["session"], entry["cell"], entry["pair"]), {})[entry["side"]] = entry["throughput"]
    return [(math.log(sides["reference"]), math.log(sides["current"])) for sides in by_pair.values()
            if len(sides) == 2]


def between_launch_share(launches: Sequence[Mapping]) -> float | None:
    """Of the variance of window figures (log), the share that lies between launches rather than
    between the windows of one launch (the intraclass correlation of a one-way analysis of
    variance, each side's launches centred on its median): near 1, a launch runs all its windows at
    one speed, so more windows per launch add little; near 0, windows vary as much as launches do."""
    groups = [[math.log(value / entry["throughput"] * entry["relative"]) for value in entry["window_throughputs"]]
              for entry in launches if len(entry.get("window_throughputs") or []) > 1]
    if len(groups) < 3:
        return None
    k = statistics.fmean(len(group) for group in groups)
    grand = statistics.fmean(value for group in groups for value in group)
    between = sum(len(group) * (statistics.fmean(group) - grand) ** 2 for group in groups) / (len(groups) - 1)
    within = (sum((value - statistics.fmean(group)) ** 2 for group in groups for value in group)
              / sum(len(group) - 1 for group in groups))
    share = (between - within) / (between + (k - 1) * within) if between + (k - 1) * within > 0 else math.nan
    return max(0.0, share)


def spread_rows(launches: Sequence[Mapping]) -> list[list[str]]:
    rows = [["side", "launches", "per-launch cv", "launch s", "measured s", "measured share"]]
    for side in ("reference", "current"):
        mine = [entry for entry in launches if entry["side"] == side]
        if not mine:
            continue
        wall = statistics.median(entry["wall_s"] for entry in mine)
        window = statistics.median(entry["window_s"] for entry in mine)
        rows.append([side, str(len(mine)), f"{cv([entry['relative'] for entry in mine]):.3f}", f"{wall:.2f}",
                     f"{window:.2f}", f"{window / wall:.0%}"])
    return rows


def spread_lines(launches: Sequence[Mapping]) -> list[str]:
    pairs = pair_logs(launches)
    lines = []
    if len(pairs) > 2:
        ratios = [current - reference for reference, current in pairs]
        correlation = statistics.correlation(*zip(*pairs)) if len({p for p in pairs}) > 2 else math.nan
        lines.append(f"{len(pairs)} pairs: log ratio sd {statistics.stdev(ratios):.4f}, mean {statistics.fmean(ratios):+.4f}; "
                     f"the two launches of a pair correlate at {correlation:.2f}")
    parts = [entry["spent"] for entry in launches if entry.get("spent")]
    if parts:
        lines.append("where a launch's time went (medians): " + ", ".join(
            f"{name} {statistics.median(part[name] for part in parts):.2f} s" for name in parts[0]))
    share = between_launch_share(launches)
    if share is not None:
        lines.append(f"windows of one launch: {share:.0%} of the windows' variance lies between launches "
                     f"({'more windows per launch would add little' if share > 0.5 else 'windows vary nearly as launches do'})")
    return lines


def separation_rows(launches: Sequence[Mapping]) -> list[list[str]]:
    """Each numeric fact against the launch's relative speed: Spearman's rho with its p-value, and
    the fact's median among the slower and the faster half of the launches."""
    from scipy import stats

    rows = [["fact", "launches", "Spearman rho", "p", "median, slower half", "median, faster half"]]
    ordered = sorted(launches, key=lambda entry: entry["relative"])
    half = len(ordered) // 2
    for name in FACTS:
        known = [(entry["relative"], value) for entry in ordered if (value := fact(entry, name)) is not None]
        if len(known) < 6 or len({value for _, value in known}) < 2:
            continue
        rho, p = stats.spearmanr(*zip(*known))
        slow = [value for entry in ordered[:half] if (value := fact(entry, name)) is not None]
        fast = [value for entry in ordered[half:] if (value := fact(entry, name)) is not None]
        rows.append([fact_name(name), str(len(known)), f"{rho:+.2f}", f"{p:.3g}", f"{statistics.median(slow):.4g}",
                     f"{statistics.median(fast):.4g}"])
    ran_on = [(entry["relative"], tuple(sorted(facts.get("ran_on") or {}))) for entry in ordered
              for facts in (entry.get("launch_facts") or [None])[:1] if facts]
    places = sorted({place for _, place in ran_on})
    if len(places) > 1:
        for place in places:
            speeds = [relative for relative, where in ran_on if where == place]
            rows.append([f"ran on CPU(s) {','.join(place)}", str(len(speeds)), "-", "-", "-",
                         f"median speed {statistics.median(speeds):.3f}"])
    return rows


def launch_rows(launches: Sequence[Mapping]) -> list[list[str]]:
    rows = [["session", "pair", "side", "img/s", "relative", "launch s", "measured s",
             *map(fact_name, LISTED), "ran on", "variables"]]
    for entry in launches:
        facts = (entry.get("launch_facts") or [{}])[0] or {}
        rows.append([str(entry["session"]), str(entry["pair"] + 1), entry["side"], f"{entry['throughput']:.1f}",
                     f"{entry['relative']:.3f}", f"{entry['wall_s']:.2f}", f"{entry['window_s']:.3f}",
                     *("-" if (value := fact(entry, name)) is None else f"{value:.4g}" for name in LISTED),
                     ",".join(sorted(facts.get("ran_on") or {})) or "-",
                     " ".join(f"{k}={v}" for k, v in (facts.get("variables") or {}).items()) or "-"])
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dlscale-launches", description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, nargs="+", help="results.json files of A/B sessions")
    parser.add_argument("--cell", help="one cell's launches only")
    parser.add_argument("--launches", action="store_true", help="list every launch with its facts")
    args = parser.parse_args(argv)
    documents = []
    for path in args.results:
        try:
            documents.append(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError) as error:
            print(f"dlscale-launches: cannot read {path}: {error}", file=sys.stderr)
            return 2
    launches = launches_of(documents, args.cell)
    if not launches:
        print("dlscale-launches: no completed A/B launch in the files given" +
              (f" for cell {args.cell}" if args.cell else ""), file=sys.stderr)
        return 2
    print(format_table(spread_rows(launches)))
    for line in spread_lines(launches):
        print(line)
    rows = separation_rows(launches)
    if len(rows) > 1:
        print("what separates the slow launches from the fast (speed relative to the side's median):")
        print(format_table(rows))
    if args.launches:
        print(format_table(launch_rows(launches)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
