"""dlscale-publish: a system's nightly history as a static site, and the morning's digest.

    dlscale-publish history/<system>.jsonl [--results DIR ...] --out SITE [--summary summary.md]
        [--compare OLD_RUN NEW_RUN] [--threshold 0.05] [--min-nights 3] [--base-url URL]

writes ``SITE/index.html`` (every cell, open regressions first), a page per cell, the open
regressions with their Atom feed and a compare page of two runs; the folder needs no server and
loads nothing from the network. Each night links to its report: the one its history line names,
else that of the results folder under ``--results`` whose ``results.json`` holds its run id. Lines
that do not parse, results folders that are gone and nights without a report are named on the
index, and the site is built all the same. Exit status 0, or 2 for bad arguments.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Sequence

from harness.judging.changepoints import DEFAULT_MIN_NIGHTS
from harness.report.history import DEFAULT_THRESHOLD
from harness.report.site.build import Inputs, build, write
from harness.report.site.digest import digest
from harness.report.site.sessions import find_sessions
from harness.report.site.views import cell_views
from harness.store.history import read


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dlscale-publish", description=__doc__.split("\n\n")[0])
    parser.add_argument("history", type=Path, help="history/<system>.jsonl")
    parser.add_argument("--results", type=Path, action="append", default=[], metavar="DIR",
                        help="a folder searched for the sessions' results.json (e.g. results/nightly); repeatable")
    parser.add_argument("--out", type=Path, required=True, help="the site's folder (written, or rewritten)")
    parser.add_argument("--summary", type=Path, help="also write the latest night's digest (Markdown) here")
    parser.add_argument("--compare", nargs=2, metavar=("OLD_RUN", "NEW_RUN"),
                        help="the two runs of the compare page (default: the latest two)")
    parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD,
                        help="relative drop of a cell's latest level that is a regression (default %(default)s)")
    parser.add_argument("--min-nights", type=int, default=DEFAULT_MIN_NIGHTS,
                        help="shortest level a change point may create (default %(default)s)")
    parser.add_argument("--base-url", default="",
                        help="the site's address, for the feed's and the digest's links (default: relative)")
    args = parser.parse_args(argv)
    if not args.history.is_file():
        parser.error(f"{args.history} is not a file")
    rows, skipped = read(args.history)
    sessions, problems = find_sessions(args.results, [row["session_dir"] for row in rows if row.get("session_dir")])
    problems = [f"{args.history}: skipped {problem}" for problem in skipped] + problems
    for problem in problems:
        print(f"dlscale-publish: {problem}", file=sys.stderr)
    base_url = args.base_url and args.base_url.rstrip("/") + "/"
    views = cell_views(rows, sessions, threshold=args.threshold, min_nights=args.min_nights)
    inputs = Inputs(sessions=sessions, problems=problems, out=args.out,
                    compare=tuple(args.compare) if args.compare else None, base_url=base_url)
    write(build(rows, views, inputs), args.out)
    print(f"{args.out / 'index.html'}: {len(views)} cells, {sum(v.regression is not None for v in views)} open "
          "regressions")
    if args.summary:
        site = base_url or Path(os.path.relpath(args.out.resolve(), args.summary.resolve().parent)).as_posix() + "/"
        args.summary.parent.mkdir(parents=True, exist_ok=True)
        args.summary.write_text(digest(rows, views, sessions, site=site, min_nights=args.min_nights))
        print(args.summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
