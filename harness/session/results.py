"""What a session keeps of each cell: its launches, pooled records, estimates and verdicts."""
from __future__ import annotations

import dataclasses

from harness.config.cells import AccuracyCell
from harness.judging.breakdown import CellBreakdown
from harness.judging.kinds import ERROR
from harness.judging.metrics import CellMetrics
from harness.judging.stats import Estimate
from harness.judging.verdicts import Verdict, overall
from harness.judging.yardstick import Yardstick
from harness.judging.fingerprint import fingerprint_hash
from harness.judging.work import work_headline
from harness.launch.runner import CellRun
from harness.rank.cell import Cell
from harness.store.baselines import machine_label, machine_of
from harness.store.history import make_row


@dataclasses.dataclass(kw_only=True)
class CellResult:
    cell: Cell
    runs: list[CellRun]
    """Every launch of the cell: more than one when it was measured again for precision."""
    config_hash: str
    records: list[dict] = dataclasses.field(default_factory=list)
    """One pooled record per rank: every run's timed steps after the detected warm-up."""
    warmup_dropped: list[int] = dataclasses.field(default_factory=list)
    """Leading timed steps of each run detected as warm-up (MSER-5) and left out."""
    metrics: CellMetrics | None = None
    throughput: Estimate | None = None
    efficiency: Estimate | None = None
    efficiency_source: str | None = None
    """"measured" (reference cell in this run), "baseline", or "by definition" (the reference cell)."""
    verdicts: list[Verdict] = dataclasses.field(default_factory=list)
    fingerprint: dict | None = None
    breakdown: CellBreakdown | None = None
    servers: dict | None = None
    """A parameter-server cell's servers (:func:`harness.judging.servers.server_summary`)."""
    yardstick: Yardstick | None = None
    """The machine's speed during the cell's launches; ``None`` for GPU cells."""
    machine_speed: float | None = None
    """The machine's speed relative to the baseline's by the yardstick (a throughput is normalised by
    it only where it moved beyond the yardstick's own launch-to-launch noise)."""
    cpu_wait_share: float | None = None
    """The largest share of its window a rank's threads waited for a CPU (harness.rank.contention)."""
    outside_share: float | None = None
    """The largest share of a rank's own cores' time that work outside the cell took."""
    contended_runs: int = 0
    """Launches left out of the pooled samples because other work competed for the cores."""
    stack_changes: list[str] = dataclasses.field(default_factory=list)
    """Software that changed since the baseline was recorded (``"torch 2.13.1 -> 2.14.1"``)."""
    baseline_throughput: float | None = None
    """The stored baseline's throughput the cell was judged against, where it has one."""
    baseline_bands: dict | None = None
    """The bands the cell was judged by, by metric (:func:`harness.session.nights.band_of`), where its
    baseline has them."""
    work: dict | None = None
    """The work a step of the cell did, counted after its launches' windows
    (harness.judging.work.launches_work); None where no launch counted."""
    work_change: dict | None = None
    """What moved from the baseline's counted work (harness.judging.work.against_baseline, as JSON),
    where the baseline holds some."""
    confirmation: dict | None = None
    """``--confirm``: the A/B against the baseline's environment that says whether the software or
    the system changed (harness.session.paired.Confirmation, as JSON)."""

    @property
    def run(self) -> CellRun:
        return self.runs[-1]

    @property
    def ok(self) -> bool:
        return all(run.ok for run in self.runs)

    @property
    def verdict(self) -> str:
        if not self.ok:
            return ERROR
        return overall(self.verdicts)

    def to_json(self) -> dict:
        return {
            "cell": self.cell.id, "launcher": self.run.launcher, "status": self.run.status, "error": self.run.error,
            "runs": len(self.runs), "wall_s": round(sum(run.wall_s for run in self.runs), 3),
            "command": self.run.command, "warmup_dropped": self.warmup_dropped,
            "metrics": dataclasses.asdict(self.metrics) if self.metrics else None,
            "throughput": to_json(self.throughput), "efficiency": to_json(self.efficiency),
            "efficiency_source": self.efficiency_source,
            "verdict": self.verdict, "verdicts": [dataclasses.asdict(v) for v in self.verdicts],
            "config_hash": self.config_hash, "fingerprint": self.fingerprint,
            "breakdown": self.breakdown.to_json() if self.breakdown else None, "servers": self.servers,
            "yardstick": self.yardstick.to_json() if self.yardstick else None, "machine_speed": self.machine_speed,
            "cpu_wait_share": self.cpu_wait_share, "outside_share": self.outside_share,
            "contended_runs": self.contended_runs, "stack_changes": self.stack_changes,
            "baseline_throughput": self.baseline_throughput, "confirmation": self.confirmation,
            "work": self.work, "work_change": self.work_change,
            "orphans_killed": [pid for run in self.runs for pid in run.orphans_killed],
            "orphans_elsewhere": {host: pids for run in self.runs for host, pids in run.orphans_elsewhere.items() if pids},
            "records": self.records or self.run.records,
        }

    def history_row(self, *, run_id: str, git_commit: str | None, **night: object) -> dict:
        """The cell's line in the nightly history (:mod:`harness.store.history`): its figures with
        the band it was judged by, its counted work, the machine and the time it took; ``night``:
        what every line of the session shares (:class:`harness.session.nights.Night`) and the
        package set its ranks ran in."""
        hardware = (self.fingerprint or {}).get("hardware")
        return make_row(self.cell.id, run_id=run_id, verdict=self.verdict, throughput=self.throughput,
                        efficiency=self.efficiency, git_commit=git_commit,
                        fingerprint=fingerprint_hash(self.fingerprint) if self.fingerprint else None,
                        launcher=self.run.launcher, ranks=self.cell.ranks, runs=len(self.runs),
                        yardstick_s=round(self.yardstick.seconds, 6) if self.yardstick else None,
                        machine_speed=self.machine_speed, cpu_wait_share=self.cpu_wait_share,
                        baseline=self.baseline_bands, work=work_headline(self.work),
                        machine=machine_label(machine_of(hardware)) if hardware else None,
                        duration_s=round(sum(run.wall_s for run in self.runs), 3), **night)


@dataclasses.dataclass(kw_only=True)
class AccuracyResult:
    cell: AccuracyCell
    run: CellRun
    config_hash: str
    outcome: dict | None = None
    """Rank 0's record: accuracy and learning rate per epoch, final accuracy (the same on every rank)."""
    verdict: Verdict | None = None

    @property
    def verdict_kind(self) -> str:
        """The verdict's name, or ``error`` where the run failed and nothing was judged."""
        return self.verdict.kind if self.verdict else ERROR

    @property
    def final_accuracy(self) -> float | None:
        return self.outcome["final_val_accuracy"] if self.outcome else None

    def to_json(self) -> dict:
        return {
            "cell": self.cell.id, "launcher": self.run.launcher, "status": self.run.status, "error": self.run.error,
            "wall_s": round(self.run.wall_s, 3), "command": self.run.command, "config_hash": self.config_hash,
            "final_val_accuracy": self.final_accuracy, "verdict": self.verdict_kind,
            "verdicts": [dataclasses.asdict(self.verdict)] if self.verdict else [], "outcome": self.outcome,
        }

    def history_row(self, *, run_id: str, git_commit: str | None, **night: object) -> dict:
        """The cell's line in the nightly history, its final accuracy beside the verdict."""
        return make_row(self.cell.id, run_id=run_id, verdict=self.verdict_kind, git_commit=git_commit,
                        launcher=self.run.launcher, ranks=self.cell.ranks, final_val_accuracy=self.final_accuracy,
                        duration_s=round(self.run.wall_s, 3), **night)


def to_json(estimate: Estimate | None) -> dict | None:
    return estimate.to_json() if estimate is not None else None
