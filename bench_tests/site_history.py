"""A nightly history made for the site's tests and its scale benchmark (generated, and said so).

Each cell starts from a real line of ``history/dlscale-local.jsonl`` (its figures, fingerprint,
launcher and ranks) and is carried over ``nights`` nights with 2% noise, the schema-2 fields a night
writes (the baseline band it was judged by, its counted work, package set, machine) and, for the
cells given a role, what a team meets in a month of nightlies:

- ``drop``: a persistent 15% drop from night :data:`DROP_AT`, where the commit changed;
- ``accepted``: the same drop from :data:`ACCEPTED_DROP_AT`, accepted (re-recorded) after night
  :data:`ACCEPTED_AFTER`, its baseline band moved with it;
- ``blip``: one night 30% slow (:data:`BLIP_AT`);
- ``package``: a new package set from :data:`PACKAGE_AT` that moved the counted work (+6% FLOPs) and
  the throughput by -3%;
- ``slow-node``: a node 20% slow for three nights (:data:`SLOW_NODE`), its yardstick as slow;
- ``failed``: a night that failed (:data:`FAILED_AT`): verdict ``error``, no figures.

:func:`write_sessions` writes the nights' results folders as the nightly job leaves them
(``nightly/<date>-<job>/results.json`` and ``report/index.html``); :func:`publish` makes all that
into a site with ``dlscale-publish``, bad input included.
"""
from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import random
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from harness.report.site.publish import main

REAL_HISTORY = Path(__file__).resolve().parents[1] / "history" / "dlscale-local.jsonl"
START = datetime.datetime(2026, 11, 1, 2, 0, tzinfo=datetime.timezone.utc)
DROP_AT = 18
ACCEPTED_DROP_AT = 10
ACCEPTED_AFTER = 14
BLIP_AT = 15
PACKAGE_AT = 20
SLOW_NODE = range(22, 25)
FAILED_AT = 8
BAND = 0.07
"""The baseline band's half-width, relative."""
ROLES = ("drop", "accepted", "blip", "package", "slow-node", "failed")
MONTH = 30
"""The nights of the tests' history."""


def templates(count: int) -> list[dict]:
    """The latest measured line of each of the real history's first ``count`` cells (file order)."""
    latest: dict[str, dict] = {}
    for raw in REAL_HISTORY.read_text().splitlines():
        try:
            line = json.loads(raw)
        except json.JSONDecodeError:
            continue
        if isinstance(line.get("throughput"), Mapping):
            latest[line["cell"]] = line
    found = list(latest.values())[:count]
    if len(found) < count:
        raise ValueError(f"{REAL_HISTORY} holds {len(found)} measured cells, not {count}")
    return found


def run_id(night: int) -> str:
    return f"{(START + datetime.timedelta(days=night)):%Y%m%dT%H%M%SZ}-{night:04x}"


def commit(night: int) -> str:
    """A new commit every third night, and one at each role's night."""
    moves = sum(night >= at for at in (DROP_AT, ACCEPTED_DROP_AT, PACKAGE_AT)) + night // 3
    return hashlib.sha1(f"commit {moves}".encode()).hexdigest()


def history(cells: Sequence[Mapping], nights: int, roles: Mapping[str, str], *, seed: int = 0) -> list[dict]:
    """``nights`` nights of every template cell, in the order a nightly appends them, with the
    acceptance line after night :data:`ACCEPTED_AFTER`."""
    noise = random.Random(seed)
    rows = []
    for night in range(nights):
        for number, template in enumerate(cells):
            role = roles.get(template["cell"], "steady")
            rows.append(_line(template, night, number, role, noise))
            if role == "accepted" and night == ACCEPTED_AFTER:
                rows.append(_acceptance(rows[-1]))
    return rows


def write_sessions(rows: Iterable[Mapping], folder: Path, *, without: Sequence[int] = (),
                   without_report: Sequence[int] = (), confirmations: Mapping[tuple[str, int], Mapping] = (),
                   unmeasured: Mapping[int, Sequence[str]] = ()) -> None:
    """Each night's results folder under ``folder/nightly``, except the nights ``without``; those
    ``without_report`` have a results file and no report. ``confirmations``: ``--confirm``'s
    verdict of a (cell, night); ``unmeasured``: the cells a night left unmeasured for want of time."""
    by_run: dict[str, list[Mapping]] = {}
    for row in rows:
        if row.get("kind") != "accepted":
            by_run.setdefault(row["run_id"], []).append(row)
    for night, (run, lines) in enumerate(by_run.items()):
        if night in without:
            continue
        session = folder / "nightly" / f"{lines[0]['date'][:10]}-{1000 + night}"
        cells = [{"cell": line["cell"], "status": "ok" if line["throughput"] else "failed",
                  "verdict": line["verdict"], "throughput": line["throughput"], "efficiency": line["efficiency"],
                  "fingerprint": None, "confirmation": dict(confirmations).get((line["cell"], night))}
                 for line in lines]
        session.mkdir(parents=True)
        (session / "results.json").write_text(json.dumps({
            "system": "generated", "run_id": run, "cells": cells,
            "unmeasured_for_time": list(dict(unmeasured).get(night, []))}))
        if night not in without_report:
            (session / "report").mkdir()
            (session / "report" / "index.html").write_text(
                f"<!doctype html><html><head><meta charset='utf-8'><title>report {run}</title></head>"
                f"<body><h1>dlscale report: run {run}</h1></body></html>")


def _line(template: Mapping, night: int, number: int, role: str, noise: random.Random) -> dict:
    level = template["throughput"]["value"]
    factor, baseline, package, flops_factor, slow = 1.0, level, "pkgset-a1", 1.0, 1.0
    if role == "drop" and night >= DROP_AT:
        factor = 0.85
    if role == "accepted" and night >= ACCEPTED_DROP_AT:
        factor = 0.85
        baseline = level * 0.85 if night > ACCEPTED_AFTER else level
    if role == "blip" and night == BLIP_AT:
        factor = 0.7
    if role == "package" and night >= PACKAGE_AT:
        factor, package, flops_factor = 0.97, "pkgset-b2", 1.06
    if role == "slow-node" and night in SLOW_NODE:
        factor = slow = 0.8
    date = START + datetime.timedelta(days=night, minutes=3 * number)
    value = level * factor * (1 + noise.gauss(0, 0.02))
    failed = role == "failed" and night == FAILED_AT
    band = {"value": baseline, "low": baseline * (1 - BAND), "high": baseline * (1 + BAND), "defaulted": False}
    flops = int(4.1e9 * template.get("ranks", 1) * flops_factor)
    digest = hashlib.sha1(f"{template['cell']} {flops}".encode()).hexdigest()[:16]
    efficiency = template.get("efficiency")
    return {
        "schema": 2, "kind": "night", "cell": template["cell"], "run_id": run_id(night),
        "date": date.isoformat(timespec="seconds"), "git_commit": commit(night),
        "throughput": None if failed else {"value": value, "low": value * 0.98, "high": value * 1.02,
                                           "confidence": 0.95},
        "efficiency": None if failed or not efficiency else {
            "value": efficiency["value"] * factor, "low": efficiency["value"] * factor * 0.97,
            "high": efficiency["value"] * factor * 1.03, "confidence": 0.95},
        "verdict": "error" if failed else "fail" if value < band["low"] else "faster" if value > band["high"] else "pass",
        "fingerprint": template.get("fingerprint"), "launcher": template.get("launcher"),
        "ranks": template.get("ranks"), "runs": 1,
        "yardstick_s": None if template.get("yardstick_s") is None else template["yardstick_s"] / slow,
        "baseline": {"throughput": band, "efficiency": None},
        "work": {"digest": digest, "flops": flops, "collective_bytes": 102_000_000 * (template.get("ranks", 1) - 1)},
        "package_set": package, "machine": "AMD EPYC family 25 model 1, 2 cores", "session_dir": None,
        "report": None, "slurm_job_id": str(1000 + night), "ci_job_url": None, "duration_s": 61.0,
    }


def _acceptance(night_line: Mapping) -> dict:
    date = datetime.datetime.fromisoformat(night_line["date"]) + datetime.timedelta(hours=6)
    level = night_line["throughput"]["value"]
    return {"schema": 2, "kind": "accepted", "cell": night_line["cell"], "run_id": night_line["run_id"],
            "date": date.isoformat(timespec="seconds"), "verdict": "accepted", "how": "re-recorded",
            "by": "a.person", "reason": "the new data pipeline decodes at full resolution: the slower level is right",
            "git_commit": night_line["git_commit"],
            "baseline": {"throughput": {"value": level, "low": level * (1 - BAND), "high": level * (1 + BAND),
                                        "defaulted": False}}}


@dataclasses.dataclass(frozen=True)
class Published:
    """A site published from a generated history, as the tests read it."""

    history: Path
    site: Path
    summary: Path
    results: Path
    cells: dict[str, str]
    """Each role's cell (``steady`` for the cell without one)."""

    def page(self, role: str) -> Path:
        return self.site / f"cell-{self.cells[role]}.html"


GONE_NIGHT, NO_REPORT_NIGHT = 5, 6
"""The night whose results folder is gone, and the night whose folder holds no report."""


def publish(folder: Path, *, nights: int = MONTH) -> Published:
    """A history of :data:`ROLES` and one steady cell over ``nights`` nights, a torn line at its
    end, its results folders (one gone, one without a report, ``--confirm``'s verdict on the
    dropped cell, a cell left unmeasured on the last night), published with ``dlscale-publish``
    and a ``--results`` folder that is gone."""
    cells = templates(len(ROLES) + 1)
    roles = dict(zip(ROLES, (cell["cell"] for cell in cells)))
    roles["steady"] = cells[-1]["cell"]
    rows = history(cells, nights, {cell: role for role, cell in roles.items()})
    path = folder / "history" / "generated.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows) + '{"schema": 2, "cell": "ddp-synth\n')
    write_sessions(rows, folder / "results", without=(GONE_NIGHT,), without_report=(NO_REPORT_NIGHT,),
                   confirmations={(roles["drop"], DROP_AT + 2): {"cause": "software", "message":
                                  "software: the current environment is 15.2% slower than the baseline's, rebuilt"}},
                   unmeasured={nights - 1: ["mxnet-native-resnet50-g2"]})
    published = Published(history=path, site=folder / "site", summary=folder / "summary.md",
                          results=folder / "results", cells=roles)
    status = main([str(path), "--results", str(published.results), "--results", str(folder / "gone"),
                   "--out", str(published.site), "--summary", str(published.summary)])
    assert status == 0
    return published
