"""A cell's figures from its launches' records, and its verdicts: warm-up trimmed, contended
launches left out, samples pooled, throughput and E_G intervals, fingerprint, breakdown, machine
yardstick and CPU wait, then :func:`harness.judging.verdicts.judge_cell` against the baseline entry."""
from __future__ import annotations

from typing import Mapping, Sequence

from harness.judging.breakdown import cell_breakdown, has_breakdown
from harness.judging.fingerprint import fingerprint
from harness.judging.metrics import pool_uncontended, step_samples, summarize, trim_warmup
from harness.judging.servers import server_summary
from harness.judging.stats import Estimate, efficiency_interval, throughput_interval
from harness.judging.verdicts import Evidence, judge_cell
from harness.judging.work import against_baseline, launches_work
from harness.judging.yardstick import from_records
from harness.rank.cell import Cell
from harness.rank.contention import outside_share, outside_stall, wait_share
from harness.rank.frameworks import training_ranks
from harness.session.history_keeping import band_of
from harness.session.results import CellResult
from harness.store.baselines import BaselineFile


def evaluate(result: CellResult, *, config: Mapping, baselines: BaselineFile, reference_cell: Cell,
             earlier: Sequence[CellResult], use_yardstick: bool = True) -> None:
    """Fill in ``result``'s figures and verdicts from all its launches so far. ``config``: the
    workload; ``reference_cell``: the cell its E_G is relative to, taken from ``earlier`` results
    of the session or else from its baseline."""
    result.fingerprint = fingerprint(result.run.records, dict(config), result.cell.id, config_hash=result.config_hash)
    hardware = result.fingerprint["hardware"]
    entry = baselines.entry(result.cell.id, hardware)
    baseline_wait = _baseline_wait(entry)
    trimmed = [trim_warmup(run.records) for run in result.runs]
    result.warmup_dropped = [dropped for _, dropped in trimmed]
    tunables = baselines.tunables
    result.records, result.contended_runs = pool_uncontended([records for records, _ in trimmed], baseline_wait,
                                                             notable=tunables.notable_wait)
    result.metrics = summarize(result.records)
    result.breakdown = cell_breakdown(result.records) if has_breakdown(result.records) else None
    result.servers = server_summary([record for run in result.runs for record in run.server_records])
    result.yardstick = from_records(result.records)
    result.cpu_wait_share = wait_share(result.records)
    result.outside_share = outside_share(result.records)
    result.work = launches_work([run.records for run in result.runs], [run.server_records for run in result.runs])
    change = against_baseline((entry or {}).get("work"), result.work)
    result.work_change = change.to_json() if change else None
    result.throughput = throughput_interval(*step_samples(result.records))
    result.efficiency, result.efficiency_source = efficiency(result, reference_cell, earlier, baselines, config)
    evidence = Evidence(cell_id=result.cell.id, config_hash=result.config_hash, config=config,
                        throughput=result.throughput, efficiency=result.efficiency,
                        efficiency_source=result.efficiency_source, fingerprint=result.fingerprint,
                        yardstick=result.yardstick, cpu_wait_share=result.cpu_wait_share,
                        outside_share=result.outside_share, outside_stall=outside_stall(result.records),
                        breakdown=result.breakdown,
                        launches=max(1, len(result.runs) - result.contended_runs))
    references = {metric: baselines.reference(result.cell.id, metric, hardware) for metric in ("throughput", "efficiency")}
    result.baseline_throughput = references["throughput"].value if references["throughput"] else None
    result.baseline_bands = {metric: band_of(reference) for metric, reference in references.items() if reference} or None
    judgement = judge_cell(evidence, entry, references, use_yardstick=use_yardstick,
                           baseline_path=str(baselines.path), baseline_wait=baseline_wait, tunables=tunables)
    result.verdicts = judgement.verdicts
    result.machine_speed, result.stack_changes = judgement.machine_speed, judgement.stack_changes


def efficiency(result: CellResult, reference: Cell, earlier: Sequence[CellResult], baselines: BaselineFile,
               config: Mapping) -> tuple[Estimate | None, str | None]:
    """E_G against the ``reference`` cell measured earlier in the session, else against its
    baseline's throughput; by definition 1 for the reference cell itself. G counts the training
    ranks: a parameter-server cell's servers are not among them."""
    if reference == result.cell:
        return Estimate(value=1.0, low=1.0, high=1.0), "by definition"
    steps, batches = step_samples(result.records)
    for measured in reversed(earlier):
        if measured.cell == reference and measured.metrics:
            ref_steps, ref_batches = step_samples(measured.records)
            return efficiency_interval(steps, batches, ref_steps, ref_batches), "measured"
    baseline = baselines.reference(reference.id, "throughput", result.fingerprint["hardware"])
    if baseline:
        exact = Estimate(value=baseline.value, low=baseline.value, high=baseline.value)
        servers = int(config.get("ps_servers", 1))
        return efficiency_interval(steps, batches, exact, reference_ranks=training_ranks(
            reference.framework, reference.ranks, servers)), "baseline"
    return None, None


def _baseline_wait(entry: Mapping | None) -> float | None:
    """The share of the step time the baseline's ranks waited for a CPU, where it says."""
    share = (entry or {}).get("cpu_wait_share")
    return float(share) if isinstance(share, (int, float)) and not isinstance(share, bool) else None
