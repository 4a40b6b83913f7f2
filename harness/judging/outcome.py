"""Whether a cell's scaling test fails, and with what message: the rule the pytest plugin applies
to the verdicts of a measured cell (a launch that failed fails its test before any verdict)."""
from __future__ import annotations

import collections
import dataclasses
from typing import Sequence

from harness.judging.kinds import ERROR, MOST_SERIOUS_FIRST, UNJUDGED, PairedKind, VerdictKind
from harness.judging.verdicts import Verdict, overall

CONFIRMABLE = frozenset({VerdictKind.FAIL, VerdictKind.INCONCLUSIVE, VerdictKind.MACHINE_DIFFERS, VerdictKind.STALE})
"""Verdicts against a stored baseline that ``--confirm`` puts to an A/B against the baseline's environment.
A ``stale`` one too: its stored figure can no longer say whether the software changed, an A/B on
this node can (harness.judging.confirmation)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class FailureRule:
    """The options that decide whether a judged cell fails its test."""

    confirm: bool = False
    update_baselines: bool = False
    accept_regressions: bool = False
    strict_verdicts: bool = False
    system_changes: str = "fail"
    """``pass``: a throughput fail that ``--confirm`` found the system's (the node changed, not the
    software) passes; an efficiency fail does not (its two throughputs come from one session)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Confirmed:
    """What the A/B against the baseline's environment said of a cell's verdict."""

    cause: str
    """``software``, ``system`` or ``unknown``."""
    message: str


def to_confirm(verdict: str, rule: FailureRule) -> bool:
    """Whether a cell's verdict is put to an A/B before its test is decided."""
    return rule.confirm and not rule.update_baselines and verdict in CONFIRMABLE


def failure_message(cell_id: str, repeats: Sequence[Sequence[Verdict]], rule: FailureRule,
                    confirmed: Confirmed | None = None) -> str | None:
    """The message the test of cell ``cell_id`` fails with, ``None`` where it passes. ``repeats``:
    the verdicts of each of its repeats (every repeat is judged); ``confirmed``: the A/B of its
    last repeat's verdict, where one ran (:func:`to_confirm`).

    A failing verdict fails the test unless regressions are accepted (``--accept-regressions``),
    or it is a throughput fail the A/B found the node's, not the software's (cause ``system``, which
    the confirmation says only on positive evidence), and the rule lets that pass. With
    ``--strict-verdicts`` a cell that was measured but not judged fails too, unless baselines are
    being recorded or the confirmation found the node's change and the rule lets that pass."""
    label = len(repeats) > 1
    excused = confirmed is not None and confirmed.cause == "system" and rule.system_changes == "pass"
    failing = [verdict.message + (f" (repeat {index + 1})" if label else "")
               for index, verdicts in enumerate(repeats) for verdict in verdicts
               if verdict.failed and not (excused and verdict.metric == "throughput")]
    if confirmed:
        excuses = " (which excuses a throughput fail, never an efficiency fail)" if excused else ""
        failing = [f"{message}; confirmed: {confirmed.message}{excuses}" for message in failing]
    if failing and not rule.accept_regressions:
        return f"{cell_id} regressed: " + "; ".join(failing)
    if excused or rule.update_baselines or not rule.strict_verdicts or not repeats:
        return None
    last = repeats[-1]
    if (verdict := overall(list(last))) not in UNJUDGED:
        return None
    said = f"; confirmed: {confirmed.message}" if confirmed else ""
    return (f"{cell_id} {verdict} (--strict-verdicts): "
            + "; ".join(v.message for v in last if v.kind in UNJUDGED) + said)


def judged_line(verdicts: Sequence[str], *, recorded: bool = False, kept: int = 0, confirm: bool = False,
                causes: Sequence[str] = ()) -> str:
    """The session's last line: how many of its measured cells (their ``verdicts``) were judged
    against a baseline, what the others were, what ``--confirm``'s A/Bs put them down to (``causes``:
    software, system or unknown, one a confirmed cell), and, where none was judged and the rest were
    measured but not judged (:data:`UNJUDGED`), the next step: a session that ends green has then
    tested nothing. ``recorded``: this session recorded baselines (``--update-baselines``), all but
    ``kept`` of its cells (those kept their old ones, each with why, above this line);
    ``confirm``: it was run with ``--confirm``."""
    counts = collections.Counter(verdicts)
    judged = sum(n for kind, n in counts.items() if kind != ERROR and kind not in UNJUDGED)
    others = ", ".join(f"{counts[kind]} {kind}" for kind in (ERROR, *MOST_SERIOUS_FIRST)
                       if kind in counts and (kind == ERROR or kind in UNJUDGED))
    line = f"dlscale: {judged} of {len(verdicts)} cells judged" + (f" ({others})" if others else "")
    if causes:
        tally = collections.Counter(causes)
        line += "; confirmed by an A/B: " + ", ".join(f"{n} {cause}" for cause, n in sorted(tally.items()))
    if judged or not UNJUDGED & counts.keys():
        return line
    if recorded:
        stored = len(verdicts) - counts[ERROR] - kept
        if not kept:
            return line + ": this run recorded this machine's baselines (--update-baselines); the next one judges by them"
        if stored > 0:
            return line + (f": this run recorded {stored} of their baselines on this machine (--update-baselines; "
                           f"{kept} kept their old ones, why above); the next one judges by those")
        return line + ": --update-baselines recorded none of their baselines (why above), so the next run judges none"
    steps = ["record this machine's baselines with --update-baselines",
             "compare against a reference with --against REF"]
    if CONFIRMABLE & counts.keys() and not confirm:
        steps.append("--confirm")
    return line + ": " + ", or ".join(steps)


def decided_line(kinds: Sequence[str]) -> str:
    """An ``--against`` session's last line: how many of its A/Bs (each cell's verdict ``kinds``,
    after the false-discovery control) decided, how many did not and why, and, where none decided,
    the next step: such a session ends green having compared nothing."""
    counts = collections.Counter(kinds)
    undecided = {kind: counts[kind] for kind in (ERROR, PairedKind.INCONCLUSIVE) if counts[kind]}
    decided = len(kinds) - sum(undecided.values())
    others = ", ".join(f"{n} {kind}" for kind, n in undecided.items())
    line = f"dlscale: {decided} of {len(kinds)} cells decided by an A/B" + (f" ({others})" if others else "")
    if decided or not kinds:
        return line
    steps = []
    if PairedKind.INCONCLUSIVE in undecided:
        steps.append("more pairs (--max-pairs, --pairs-budget) or a quieter node could decide the inconclusive "
                     "ones, as each says above")
    if ERROR in undecided:
        steps.append("each failed one names its failure above: mend it and compare again")
    return line + ": " + "; ".join(steps)
