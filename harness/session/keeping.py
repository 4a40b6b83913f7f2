"""Keeping what the session measured: its results (stored-path cells, accuracy cells, A/Bs, the
A/Bs ``--confirm`` ran, the cells cut short or left for time), a history line for each, and the
results file written again after each, so an interrupted session keeps what it judged."""
from __future__ import annotations

import dataclasses
import functools
import os
from pathlib import Path

from harness.common.jsonio import write_json_atomic
from harness.machine.provenance import packages_of
from harness.session.history_keeping import PackageSets, SessionHistory, night_of
from harness.session.paired import ConfirmingAB, PairedResult
from harness.session.preparation import Preparation
from harness.session.results import AccuracyResult, CellResult


class Keeping:
    """The session's results, its history and its results file."""

    def __init__(self, preparation: Preparation):
        self.preparation = preparation
        self.options = preparation.options
        self.results: list[CellResult] = []
        self.accuracy_results: list[AccuracyResult] = []
        self.paired_results: list[PairedResult] = []
        """Cells measured as an A/B against the reference environment (``--against``)."""
        self.confirming: list[ConfirmingAB] = []
        """The A/Bs ``--confirm`` ran, each entering the session's false-discovery control."""
        self.cut_short: list[str] = []
        """Cells an interrupt ended before any launch of theirs was judged."""
        self.unmeasured_for_time: list[str] = []
        """Cells not started because they could not finish before the session's deadline
        (harness.session.deadline)."""

    def record(self, result: CellResult) -> None:
        """Keep a cell with at least one launch: in the results, the history and the results file.
        An interrupt during a further launch keeps the launches already judged."""
        if not result.runs or (result.run.ok and result.metrics is None):
            return  # nothing launched, or judging it failed
        self.results.append(result)
        self.keep(result)

    def keep(self, result: CellResult | AccuracyResult) -> None:
        """A result just added to the session's: its history line, and the results file again."""
        self.history.keep(result)
        self.keep_results()

    def leave_unmeasured_for_time(self, cell_id: str) -> None:
        """A cell not started for want of time: named in the results file."""
        self.unmeasured_for_time.append(cell_id)
        self.keep_results()

    def keep_results(self) -> None:
        if self.options.results_json:
            self.write_results(self.options.results_json)

    @functools.cached_property
    def history(self) -> SessionHistory:
        """The session's part that writes its history lines."""
        ready = self.preparation.prepare()
        path = self.options.history_dir / f"{ready.system}.jsonl" if self.options.history_dir is not None else None
        return SessionHistory(path, night_of(ready.run_id, ready.provenance["git_commit"],
                                             results_json=self.options.results_json, report=self.options.report,
                                             environ=os.environ), PackageSets(packages_of))

    def history_rows(self) -> list[dict]:
        """The system's history lines, this session's included; none where it keeps no history."""
        return self.history.rows() if self.preparation.prepared is not None else []

    def results_document(self) -> dict:
        """The session's results file: what it measured, and where it ran (unknown before the session is prepared)."""
        ready = self.preparation.prepared
        reference = ready and ready.reference
        return {
            "system": ready and ready.system, "launcher": self.preparation.launcher_name,
            "run_id": ready and ready.run_id,
            "cores_per_rank": ready and ready.cores_per_rank,
            "huge_pages": ready.huge_pages.to_json() if ready and ready.huge_pages else None,
            "workload": dataclasses.asdict(ready.workload) if ready else None,
            "tunables": dataclasses.asdict(ready.baselines.tunables) if ready else None,
            "provenance": ready and ready.provenance, "environment": ready and ready.environment,
            "launch_environment": self.preparation.launch_environment,
            "cells": [result.to_json() for result in self.results],
            "accuracy_cells": [result.to_json() for result in self.accuracy_results],
            "against": {"reference": reference.environment.to_json(), "current": ready.current_environment.to_json(),
                        "difference": reference.difference} if reference else None,
            "paired_cells": [result.to_json() for result in self.paired_results],
            "unmeasured_for_time": self.unmeasured_for_time,
        }

    def write_results(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, self.results_document())
