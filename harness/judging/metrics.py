"""A cell's figures from all of its ranks' records: global throughput, per-rank throughput, E_G."""
from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Sequence

from harness.judging.stats import detect_warmup, throughput_point
from harness.judging.contention import launch_contended
from harness.judging.tunables import DEFAULT_TUNABLES


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CellMetrics:
    throughput: float
    """Images per second of the whole job: all ranks' images over the sum of each step's slowest
    rank time (the job is as fast as its slowest rank)."""
    per_rank: float
    step_time: float
    """Mean over timed steps of the slowest rank's step time, seconds."""
    data_wait_share: float
    """Share of the step the slowest rank spent waiting for its next batch."""
    final_loss: float
    """Mean over ranks of the last timed step's loss."""
    slowest_rank: int
    images: int
    window_s: float
    ranks: int


def summarize(records: list[dict]) -> CellMetrics:
    """Aggregate over every rank; the job is as fast as its slowest rank, never rank 0 x world size."""
    if not records:
        raise ValueError("no rank records to summarize")
    images = sum(record["images"] for record in records)
    slowest = max(records, key=lambda record: sum(record["step_times"]))
    window = max(record["window_s"] for record in records)
    steps = min(len(record["step_times"]) for record in records)
    step_max = [max(record["step_times"][i] for record in records) for i in range(steps)]
    rank_steps, batches = step_samples(records)
    throughput = throughput_point([times[:steps] for times in rank_steps], batches) if steps else math.nan
    return CellMetrics(
        throughput=throughput,
        per_rank=throughput / len(records),
        step_time=statistics.fmean(step_max) if step_max else math.nan,
        data_wait_share=sum(slowest["data_wait"]) / sum(slowest["step_times"]) if slowest["step_times"] else math.nan,
        final_loss=statistics.fmean(record["losses"][-1] for record in records if record["losses"]),
        slowest_rank=slowest["rank"],
        images=images,
        window_s=window,
        ranks=len(records),
    )


CELL_METRICS = ("throughput", "efficiency")
"""The figures a cell's baseline and history lines hold, each with its interval."""
STEP_SERIES = ("step_times", "data_wait", "losses", "fwd_bwd", "optimizer", "cpu_wait", "outside_cpu")
POOLED_SERIES = STEP_SERIES + ("compute_probe", "yardstick")


def drop_leading_steps(records: list[dict], count: int) -> list[dict]:
    """The records without their first ``count`` timed steps (detected warm-up)."""
    trimmed = []
    for record in records:
        kept = len(record["step_times"]) - count
        per_step = record["images"] // max(1, len(record["step_times"]))
        trimmed.append({**record, **{key: record[key][count:] for key in STEP_SERIES if key in record},
                        "images": per_step * kept})
    return trimmed


def step_samples(records: list[dict]) -> tuple[list[list[float]], list[int]]:
    """Each rank's step times and its images per step: what a throughput interval is computed from."""
    steps = [record["step_times"] for record in records]
    batches = [record["images"] // max(1, len(record["step_times"])) for record in records]
    return steps, batches


def trim_warmup(records: list[dict]) -> tuple[list[dict], int]:
    """One launch's records without its warm-up, detected on the slowest rank's steps, and the
    number of leading steps dropped."""
    slowest = [max(steps) for steps in zip(*(record["step_times"] for record in records))]
    dropped = detect_warmup(slowest)
    return drop_leading_steps(records, dropped), dropped


def pool_runs(runs: list[list[dict]]) -> list[dict]:
    """One record per rank with the per-step samples of several runs of the same cell, in order."""
    pooled = {}
    for records in runs:
        for record in records:
            previous = pooled.get(record["rank"])
            if previous is None:
                pooled[record["rank"]] = dict(record)
                continue
            for key in POOLED_SERIES:
                if key in record:
                    previous[key] = previous.get(key, []) + record[key]
            previous["images"] += record["images"]
            previous["window_s"] += record["window_s"]
    return [pooled[rank] for rank in sorted(pooled)]


def pool_uncontended(runs: Sequence[list[dict]], baseline_share: float | None, *,
                     notable: float = DEFAULT_TUNABLES.notable_wait) -> tuple[list[dict], int]:
    """Pool several launches' records (warm-up already dropped), leaving out the launches that were
    ``contended``, unless every one was; returns the pooled records and how many were left out."""
    quiet = [records for records in runs if not launch_contended(records, baseline_share, notable=notable)]
    return pool_runs(quiet or list(runs)), (len(runs) - len(quiet) if quiet else 0)


def parallel_efficiency(throughput: float, ranks: int, reference_throughput: float, reference_ranks: int) -> float:
    """E_G = (X_G / G) / (X_ref / G_ref): the study's eqs (3)-(4) written with throughputs."""
    if reference_throughput <= 0 or ranks <= 0 or reference_ranks <= 0:
        raise ValueError("efficiency needs positive throughputs and rank counts")
    return (throughput / ranks) / (reference_throughput / reference_ranks)
