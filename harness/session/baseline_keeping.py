"""Recording the session's baselines (``--update-baselines``): the completed cells written into the
system's baseline file, the package sets their entries name kept beside it, and each cell's new
level accepted in the history."""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from harness.config.cells import AccuracySettings
from harness.judging.recording import accuracy_entry, baseline_entries
from harness.machine.environment import rank_settings
from harness.machine.provenance import environment_id, packages_of
from harness.session.history_keeping import band_of
from harness.session.keeping import Keeping
from harness.session.preparation import Preparation
from harness.store import environments
from harness.store.baselines import BaselineError

ACCURACY_SETTINGS = AccuracySettings()


@dataclasses.dataclass(frozen=True)
class Recorded:
    changes: list[str]
    """A line for each change to the baseline file."""
    kept: list[str]
    """Cells not recorded, each with why (their old entry kept)."""
    package_sets_written: list[Path]
    """The package sets written beside the baseline file, which its entries name: to be committed
    with it (harness.store.environments)."""


def record_baselines(preparation: Preparation, keeping: Keeping) -> Recorded:
    """Write the completed cells into the baseline file. A cell measured several times
    (``--cell-repeats``) is stored as the mean of its repeats with a band derived from their spread
    (:mod:`harness.judging.recording`). Each entry carries what rebuilds its environment for
    ``--confirm``: the launch environment, and the package sets of torch's environment and of the one
    its ranks ran in, kept beside the file."""
    ready, options, results = preparation.prepare(), preparation.options, keeping.results
    recorded = {**ready.provenance, "launch_environment": rank_settings(os.environ, preparation.launch_environment)}
    ran_in = {result.cell.id: packages_of(result.run.records[0]["python"]) for result in results
              if result.ok and result.run.records and result.run.records[0].get("python")}
    entries, kept = baseline_entries(results, config=dataclasses.asdict(ready.workload), provenance=recorded,
                                     band_floor=options.band_floor, accept_regressions=options.accept_regressions,
                                     widest=options.widest_baseline, use_yardstick=options.yardstick,
                                     rank_environments={cell: environment_id(packages)
                                                        for cell, packages in ran_in.items() if packages})
    entries += [accuracy_entry(result, config=dataclasses.asdict(ACCURACY_SETTINGS), provenance=recorded)
                for result in keeping.accuracy_results if result.outcome]
    if not entries:
        return Recorded(changes=[], kept=kept, package_sets_written=[])
    written = []
    try:  # before the baselines that name them
        for packages in [ready.packages, *(packages for packages in ran_in.values() if packages)]:
            if not environments.path_of(options.baselines_dir, environment_id(packages)).is_file():
                written.append(environments.keep(options.baselines_dir, packages))
    except OSError as error:
        raise BaselineError(f"cannot keep the environment's package set: {error.strerror}: {error.filename}") from None
    changes = ready.baselines.update(entries)
    hardware = {result.cell.id: (result.fingerprint or {}).get("hardware") for result in results}
    verdicts = {result.cell.id: result.verdict for result in results}
    verdicts.update((result.cell.id, result.verdict_kind) for result in keeping.accuracy_results)
    cells = [entry["cell"] for entry in entries]
    keeping.history.accept(cells, accepted_regressions=options.accept_regressions, verdicts=verdicts,
                           bands={cell: band_of(ready.baselines.reference(cell, "throughput", hardware.get(cell)))
                                  for cell in cells}, environ=os.environ)
    return Recorded(changes=changes, kept=kept,
                    package_sets_written=[environments.path_of(options.baselines_dir, identity)
                                          for identity in dict.fromkeys(written)])
