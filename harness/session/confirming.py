"""``--confirm``: a cell's stored-baseline verdict (a fail, inconclusive, machine-differs or stale
one) confirmed by an A/B against the environment its baseline was recorded with, rebuilt, on this
node now (harness.judging.confirmation decides the cause: ``software``, ``system`` only on positive
evidence, else ``unknown`` naming why). Every A/B it runs is kept for the session's false-discovery
control (:mod:`harness.session.discoveries`), which may conclude it again
(:meth:`harness.session.paired.ConfirmingAB.held`)."""
from __future__ import annotations

import dataclasses
import functools
import os
from typing import Callable

from harness.judging.confirmation import (SOFTWARE, UNKNOWN, Rebuild, Setting, Split, conclude, judged_now,
                                          plan_rebuild, rebuilt_code_missing, scaled, software_by_work)
from harness.judging.verdicts import Evidence, config_change
from harness.machine import references
from harness.machine.environment import rank_settings
from harness.machine.provenance import code_hash, packages_of
from harness.rank.frameworks import FRAMEWORKS
from harness.rank.runtime import interpreter
from harness.session import preflight
from harness.session.against import Against
from harness.session.keeping import Keeping
from harness.session.launching import Launching
from harness.session.paired import Confirmation, ConfirmingAB, PairedResult, confirmed_by
from harness.session.preparation import Preparation
from harness.session.results import CellResult
from harness.store import environments


class Confirming:
    """The session's confirmations of stored-baseline verdicts."""

    def __init__(self, preparation: Preparation, launching: Launching, against: Against, keeping: Keeping):
        self.preparation, self.launching, self.against, self.keeping = preparation, launching, against, keeping
        self.options = preparation.options

    def confirm(self, result: CellResult, on_progress: Callable[[str], None] | None = None) -> Confirmation:
        """Confirm a cell's stored-baseline verdict (a fail, inconclusive, machine-differs or stale
        one) by an A/B against the environment its baseline was recorded with, rebuilt, on this node
        now: ``software``, ``system`` only on positive evidence, else ``unknown`` naming why
        (harness.judging.confirmation)."""
        ready = self.preparation.prepare()
        hardware = (result.fingerprint or {}).get("hardware")
        band = ready.baselines.reference(result.cell.id, "throughput", hardware)
        interrupt = None
        entry = ready.baselines.entry(result.cell.id, hardware) or {}
        if band is None or result.throughput is None:
            confirmation = Confirmation(cause=UNKNOWN, message="unknown: the baseline has no throughput figure to "
                                                               "confirm a move of")
        elif moved := software_by_work(result.work_change, entry.get("config_hash") == result.config_hash):
            confirmation = Confirmation(cause=SOFTWARE, message=moved)
        else:
            stored = scaled(result.throughput, 1 / band.value)
            rebuild, reference = self.baseline_environment(result)
            if reference is None and rebuild.identical and rebuild.exact:  # the cell's own launches are the
                launches = max(1, len(result.runs) - result.contended_runs)  # baseline environment's, now
                split = Split.identical(stored, judged_now(stored, band, launches))
                confirmation = Confirmation.of(conclude(rebuild, split), rebuild)
            elif reference is None:
                confirmation = Confirmation.of(conclude(rebuild, Split.of(stored)), rebuild)
            else:
                paired, interrupt = self.against.pairs(result.cell, reference, self.launching.launcher_of(reference),
                                                      on_progress)
                confirmation = self.confirm_by(result, paired, functools.partial(
                    confirmed_by, rebuild=rebuild, stored=stored, band=band,
                    difference=references.describe_difference(references.difference(reference,
                                                                                     ready.current_environment))))
        result.confirmation = confirmation.to_json()
        self.keeping.keep_results()
        if interrupt:
            raise interrupt
        return confirmation

    def confirm_by(self, result: CellResult, paired: PairedResult,
                   conclude: Callable[[PairedResult], Confirmation]) -> Confirmation:
        """The confirmation ``paired`` (an A/B against the baseline's environment) gives ``result``'s
        verdict, the A/B kept for the session's false-discovery control
        (:func:`harness.session.discoveries.control_false_discoveries`)."""
        self.keeping.confirming.append(ConfirmingAB(result=result, paired=paired, conclude=conclude))
        return conclude(paired)

    def baseline_environment(self, result: CellResult) -> tuple[Rebuild, references.Environment | None]:
        """How the environment a cell's baseline entry was recorded with is rebuilt here, and the
        reference that rebuilds it; None where nothing differs from the current environment that can
        be rebuilt, or it cannot be built (the rebuild's ``missing`` says which part, and why)."""
        ready = self.preparation.prepare()
        entry = ready.baselines.entry(result.cell.id, (result.fingerprint or {}).get("hardware")) or {}
        recorded = entry.get("provenance") or {}
        runtime = FRAMEWORKS.entry(result.cell.framework).runtime
        package_set = recorded.get("rank_environment") or (recorded.get("environment") if runtime == "torch" else None)
        then = Setting(commit=recorded.get("git_commit"), code=recorded.get("code"), runtime=runtime,
                       packages=environments.load(self.options.baselines_dir, package_set) if package_set else None,
                       stack=entry["fingerprint"].get("stack") if entry.get("fingerprint") else None,
                       launch_environment=recorded.get("launch_environment"), launcher=recorded.get("launcher"),
                       layout=entry["fingerprint"].get("hardware") if entry.get("fingerprint") else None)
        now = Setting(commit=ready.current_environment.commit, committed=not references.uncommitted_changes(),
                      code=ready.provenance.get("code"), runtime=runtime,
                      packages=ready.packages if runtime == "torch" else packages_of(interpreter(runtime)),
                      stack=(result.fingerprint or {}).get("stack"),
                      launch_environment=rank_settings(os.environ, self.preparation.launch_environment),
                      launcher=result.run.launcher, layout=(result.fingerprint or {}).get("hardware"))
        workload = config_change(entry, Evidence(cell_id=result.cell.id, config_hash=result.config_hash,
                                                 config=dataclasses.asdict(ready.workload),
                                                 throughput=result.throughput))
        rebuild = plan_rebuild(then, now, project=references.project_distributions(), workload_change=workload)
        if rebuild.commit is None or rebuild.identical:
            return rebuild, None
        try:
            reference = references.build([f"git:{rebuild.commit}", *rebuild.parts], ready.current_environment)
        except references.ReferenceError as error:
            return rebuild.with_missing(f"build: {error}"), None
        if reason := preflight.cannot_start_in(reference, result.cell.framework):
            return rebuild.with_missing(f"packages: {reason}"), None
        return rebuild.with_missing(rebuilt_code_missing(then, code_hash(reference.source / "harness"))), reference
