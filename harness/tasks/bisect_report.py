"""What a bisect says at its end, from its states: the changes that made the cell slower (or faster
again), apart from those that changed the work at the same speed; the ranges left; whether the
culprits account for the range's slowdown; and whether it succeeded (its exit status)."""
from __future__ import annotations

from typing import Sequence

CHANGED = {"culprit": "made it slower", "fix": "made it faster"}


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
            how = f"changed the {change['by']}" if change.get("by") else CHANGED[said]
            lines.append(f"  {said} {change['label']}: {'verified' if change['verified'] else 'not confirmed'} "
                         f"({how}: {change['evidence']}){undone}")
        for change in state.get("work_changes", []):
            lines.append(f"  work change {change['label']}: changed the work, speed the same or not shown to differ "
                         f"({change['evidence']})")
        for left in state["unresolved"]:
            lines.append(f"  unresolved {left['range'][0]}..{left['range'][1]}: {left['why']}")
        for same in state.get("same_speed", []):
            lines.append(f"  no slowdown {same['range'][0]}..{same['range'][1]}: {same['evidence']}")
        for left in state.get("not_searched", []):
            lines.append(f"  not searched {left['range'][0]}..{left['range'][1]}: {left['why']}")
        if state.get("accounting"):
            lines.append(f"  {state['accounting']['message']}")
    return "\n".join(lines)


def succeeded(states: Sequence[dict]) -> bool:
    """Every bisect found a culprit, verified every change it found, left no range unresolved, and
    the changes found account for its range's slowdown."""
    return all(state["culprits"] and all(change["verified"] for change in state["culprits"] + state["fixes"])
               and not state["unresolved"] and (state.get("accounting") or {"holds": True})["holds"]
               for state in states)
