"""The false-discovery control over every A/B a session ran (:func:`harness.judging.paired.calls_that_stand`,
Benjamini-Hochberg): the ``--against`` ones and those ``--confirm`` ran, each a cell compared."""
from __future__ import annotations

from harness.judging.kinds import ERROR
from harness.judging.paired import CALLS, calls_that_stand, surely_stands
from harness.session.keeping import Keeping
from harness.session.paired import PairedResult


def change_surely_stands(result: PairedResult, cells: int, alpha: float) -> bool:
    """Whether the A/B's verdict stands under the control whatever the session's other ``cells`` - 1
    A/Bs find (:func:`harness.judging.paired.surely_stands`): a call whose repeated p-value is within
    Bonferroni's share, or a verdict that claims nothing."""
    if not result.ok or result.verdict.kind not in CALLS:
        return True
    return surely_stands(result.change_p, cells, alpha)


def control_false_discoveries(keeping: Keeping, cells: int, alpha: float) -> list[PairedResult]:
    """The control over the session's A/Bs: the ``--against`` ones among ``cells`` compared (at least
    those measured), and those ``--confirm`` ran. Sets each judged A/B's ``false_discovery``; each
    confirmation is kept again, one whose A/B's call does not stand concluded again from it held
    ``inconclusive`` (:meth:`harness.session.confirming.ConfirmingAB.held`). Returns the A/Bs whose
    call does not stand."""
    results = keeping.paired_results + [confirming.paired for confirming in keeping.confirming]
    compared = (max(cells, len(keeping.paired_results)) if keeping.paired_results else 0) + len(keeping.confirming)
    if compared < 2:
        return []
    stands = calls_that_stand([(result.verdict.kind if result.ok else ERROR, result.change_p)
                               for result in results], compared, alpha)
    held = []
    for result, stand in zip(results, stands):
        if result.verdict is None:
            continue
        result.false_discovery = {"procedure": "Benjamini-Hochberg", "rate": alpha, "cells": compared,
                                  "repeated_p": result.change_p, "stands": stand}
        if not stand:
            held.append(result)
    for confirming in keeping.confirming:  # each kept again: its A/B's ``false_discovery`` is set now
        is_held = any(confirming.paired is result for result in held)
        confirmation = confirming.held() if is_held else confirming.conclude(confirming.paired)
        confirming.result.confirmation = confirmation.to_json()
    keeping.keep_results()
    return held
