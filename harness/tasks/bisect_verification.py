"""A bisect's A/Bs of two points (:func:`harness.session.paired.measure_pairs`): a change against the
point before it (its parent commit, the version before), or the range's ends where the midpoints
were placed by their work. Its pairs are kept in the state after every pair (``verifying``), and a
bisect started again goes on from them; a node too busy to compare on stops the bisect to resume
(exit status 3), as a step's rounds do."""
from __future__ import annotations

import itertools
import time

from harness.judging.sequential import planned_looks
from harness.launch.runner import CellRun
from harness.session.paired import PairedResult, PairsInterrupted, measure_pairs
from harness.session.rounds import busy_words, too_busy
from harness.tasks.bisect_launches import BisectRun
from harness.tasks.bisect_settings import BudgetSpent, NodeTooBusy
from harness.tasks.bisect_timed import pair_settings


def measure(run: BisectRun, parent: int, point: int) -> PairedResult:
    """The A/B of ``point`` (current) against ``parent`` (reference), gone on from its pairs kept.
    Raises :class:`NodeTooBusy` with its pairs kept where the node was too busy; the result of one a
    failed launch ended is returned with its ``error`` and no longer kept (:func:`forget`)."""
    state, sides = run.state, {"reference": parent, "current": point}
    settings = pair_settings(run, first=run.settings.verify_pairs)
    kept = state.verifying
    resumed = None
    if kept and kept["point"] == run.keys[point] and kept["parent"] == run.keys[parent]:
        resumed = PairedResult.from_json(kept["result"], run.cell, run.environment(parent))
        if too_busy(resumed) or resumed.error == busy_words(resumed):  # a fresh start on the node
            resumed.error = None
            kept["result"]["left_out_earlier"] = kept["result"].get("left_out_earlier", []) + resumed.left_out
            resumed.left_out = []
        run.say(f"  {run.label(point)}: going on from the {len(resumed.pairs)} pair(s) its verification kept")
    launched = itertools.count()  # from a pair's start: a resumed result goes on at the next pair

    def launch(side: str) -> CellRun:
        if next(launched) % 2 == 0:
            run.charge(2)  # a pair's first launch charges for both: the budget never cuts a pair in two
        return run.launch(sides[side], charge=False)

    live = [resumed] if resumed else []
    began = time.monotonic() - (resumed.wall_s if resumed else 0.0)
    earlier = (kept or {}).get("result", {}).get("left_out_earlier", []) if resumed else []

    def keep(result: PairedResult) -> None:
        """After every pair (before the look it completes is judged), with the time so far
        (``measure_pairs`` sets the result's own at its end)."""
        live[:] = [result]
        kept = {**result.to_json(), "wall_s": round(time.monotonic() - began, 3), "left_out_earlier": earlier}
        state.verifying = {"point": run.keys[point], "parent": run.keys[parent], "result": kept}
        run.save()

    if resumed is None or not resumed.error:
        run.charge(2 * max(1, run.settings.verify_pairs - (len(resumed.pairs) if resumed else 0)))
        try:
            paired = measure_pairs(run.cell, run.environment(parent), launch, settings,
                                   seed=resumed.seed if resumed else run.rng.randrange(2 ** 32),
                                   on_pair=keep, resume=resumed)
        except (PairsInterrupted, BudgetSpent):
            if live:  # with the looks judged since the last pair: their error is spent
                keep(live[0])
                planned = planned_looks(settings.first, settings.most)
                result = state.verifying["result"]
                result["looks"] = [look for look in result["looks"] if look in planned]  # not an interrupt's
                run.save()
            raise
    else:
        paired = resumed  # a failed launch had ended it
    if too_busy(paired) or paired.error == busy_words(paired):
        keep(paired)
        raise NodeTooBusy(f"{run.label(point)} against {run.label(parent)}: {busy_words(paired)}")
    if paired.error:
        forget(run)
    return paired


def forget(run: BisectRun) -> None:
    """No A/B under way: the next start measures afresh."""
    run.state.verifying = None
    run.save()
