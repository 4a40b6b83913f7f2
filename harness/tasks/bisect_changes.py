"""The changes a bisect found, as its state keeps them: each verification's record and the line
that says it, whether the culprits and fixes verified account for the range's own slowdown
(:func:`harness.judging.bisection.account`), and which fix undid which culprit."""
from __future__ import annotations

import dataclasses

from harness.common.jsonio import finite_or_none
from harness.judging import bisection
from harness.session.paired import PairedResult
from harness.tasks.bisect_launches import BisectRun
from harness.tasks.bisect_settings import COUNTED_BY
from harness.tasks.bisect_state import BisectState


def change_record(run: BisectRun, parent: int, point: int, paired: PairedResult) -> dict:
    """A verification as the state keeps it: verified where its pairs say the speed moved."""
    kind, verdict = paired.verdict_kind, paired.verdict
    return {"point": run.keys[point], "parent": run.keys[parent], "label": run.label(point),
            "verified": kind in ("regressed", "improved"), "verdict": kind,
            "evidence": verdict.message if verdict and not paired.error else paired.error,
            "ratio": {"ratio": verdict.ratio.value, "low": finite_or_none(verdict.ratio.low),
                      "high": finite_or_none(verdict.ratio.high), "level": verdict.look.level} if verdict else None,
            "pairs": [dataclasses.asdict(pair) for pair in paired.pairs], "looks": paired.looks,
            "launches": paired.launches, "wall_s": round(paired.wall_s, 1), "failures": paired.failures,
            "left_out": paired.left_out, "seed": paired.seed}


def said_line(record: dict, work_change: bool, fix: bool, no_change: bool, parent: str) -> str:
    """The progress line of a change verified (or not), as it is found."""
    if no_change:
        return f"  {record['label']} against {parent}: no slowdown ({record['verdict']}, {record['evidence']})"
    if work_change:
        return (f"work change {record['label']}: changed the work against {parent}, speed the same or not shown to "
                f"differ: {record['evidence']}")
    how = f" by its {record['by']}" if record.get("by") else ""
    evidence = record["evidence"] if record.get("by") or record.get("work") else \
        f"{record['verdict']}, {record['evidence']}"
    return (f"{'fix' if fix else 'culprit'} {record['label']}: {'verified' if record['verified'] else 'NOT confirmed'}"
            f"{how} against {parent}: {evidence}")


def range_ratio(state: BisectState, keys: list[str]) -> dict | None:
    """The range's bad/good: its first timed step's, or its ends' own A/B where the midpoints were
    placed by work; None for a range of one change (its verification is the range's)."""
    whole = [keys[0], keys[-1]]
    first = next((step for step in state.steps if step["range"] == whole and step["placed_by"] not in COUNTED_BY),
                 None)
    if first is not None:
        return first["evidence"]["ends"]
    return (state.range_speed or {}).get("ratio")


def account(state: BisectState, keys: list[str]) -> dict | None:
    """Whether the culprits and fixes verified account for the range's slowdown; None where the
    range's was not measured apart from them."""
    ratio = range_ratio(state, keys)
    if ratio is None:
        return None
    verified = [change for change in state.culprits + state.fixes if change["verified"] and change.get("ratio")]
    return bisection.account([bisection.ratio_of(change["ratio"]) for change in verified],
                             bisection.ratio_of(ratio)).to_json()


def mark_undone(state: BisectState, keys: list[str], min_effect: float) -> None:
    """Each verified fix marks the latest verified culprit before it that it undid (``undone_by``)."""
    at = {key: index for index, key in enumerate(keys)}
    culprits = [culprit for culprit in state.culprits if culprit["verified"] and culprit.get("ratio")]
    fixes = [fix for fix in state.fixes if fix["verified"] and fix.get("ratio")]
    for fix in sorted(fixes, key=lambda fix: at[fix["point"]]):
        undone = [culprit for culprit in culprits if at[culprit["point"]] < at[fix["point"]]
                  and not culprit.get("undone_by")
                  and bisection.undoes(bisection.ratio_of(culprit["ratio"]), bisection.ratio_of(fix["ratio"]),
                                       min_effect)]
        if undone:  # the latest culprit before the fix that it undid
            max(undone, key=lambda culprit: at[culprit["point"]])["undone_by"] = fix["point"]
