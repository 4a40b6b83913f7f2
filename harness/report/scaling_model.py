"""E_G beyond the machine: a step-time model of a cell, calibrated from what dlscale measures on
one or two nodes, predicting its parallel efficiency and time to train at G = 4 ... 1,024 GPUs.

    step(G)    = compute + optimizer + data + decode + exposed(G) + wait(G) - wait(G_ref)
    exposed(G) = max(0, allreduce(G) - hidden)
    wait(G)    = what the slowest of G ranks takes beyond one rank's mean step: a spread every
               step has and a delay of fixed duration some steps have, each drawn per rank per
               step (:mod:`harness.report.stragglers`); counted beyond the wait(G_ref) the measured
               reference step already holds
    decode     = GPU time a loader that decodes on the GPU takes from training each step (0 where
               the CPU decodes); paid at every G
    allreduce(G): the gradient in fusion buckets, each a ring or a tree all-reduce (whichever is
               faster, as NCCL chooses) over the slowest link the G ranks span: within a node up to
               ``gpus_per_node`` ranks, between nodes beyond (:mod:`harness.report.network`)
    E_G(G)     = step(G_ref) / step(G)     (batch per GPU fixed: the study's eqs. 3 and 4)

``compute``, ``optimizer``, ``data`` and the exposed communication come from the cell's measured
breakdown (:mod:`harness.judging.breakdown`, its slowest rank), the spread and the delay from its
ranks' step times (:func:`harness.report.stragglers.estimate_rank_delay`). ``hidden`` is the
communication backward compute hid: measured as ``allreduce(G_ref) - exposed(G_ref)`` on a cell of
2+ ranks, and unknown on a 1-rank cell, where the prediction spans no overlap to full overlap of
the backward pass (two thirds of forward+backward). Every prediction is a band over those, the
links' fitted intervals and any alternative delays the calibration allows. The data term stays per
rank (each node decodes its own batches) unless a shared file system's bandwidth is given, which
all G ranks then share: a loader that prefetches (``data_prefetched``) makes the step the larger of
the rest of the step and the file system's serving time, a loader that waits adds it.

    python -m harness.report.scaling_model RESULTS --cell ID --intra FILE [--inter FILE]
        [--gpus-per-node 4] [--gpus 4,8,...,1024] [--network-speedup 2] [--batch-per-gpu 128]
        [--bucket-mb 25] [--fs-bandwidth-gbps 100 --image-kb 110 [--loader-waits]]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import Mapping, Sequence

from harness.config.cells import scaling_cell
from harness.judging.breakdown import cell_breakdown
from harness.report.collectives import bus_factor, gradient_bytes
from harness.report.network import Link, read_link
from harness.report.projection import format_duration, time_to_train_s
from harness.report.stragglers import RankDelay, busy_collision, estimate_rank_delay, expected_wait
from harness.report.tables import format_table

STUDY_GPUS = (4, 8, 16, 32, 64, 128, 256, 512, 1024)
BACKWARD_SHARE = 2 / 3
"""Backward's share of forward+backward (about twice the forward's work): the most compute that
can hide communication when the overlap was not measured."""
DEFAULT_BUCKET_BYTES = 25 * 2**20  # torch DDP's bucket_cap_mb default
TERMS = ("compute", "data", "file system", "GPU decoding", "exposed communication", "wait for the slowest rank")
"""The parts a step is the sum of (:func:`step_terms`); compute holds the optimizer step and the
framework's own per-step work beside forward and backward."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Network:
    intra: Link
    inter: Link
    gpus_per_node: int

    def link(self, gpus: int) -> Link:
        return self.intra if gpus <= self.gpus_per_node else self.inter


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CellModel:
    """One cell's measured step, per rank, at ``reference_gpus`` ranks."""

    name: str
    reference_gpus: int
    batch_per_gpu: int
    compute_s: float
    optimizer_s: float
    data_s: float
    exposed_s: float
    gradient_bytes: int
    bucket_bytes: int
    delay: RankDelay = RankDelay()
    """What holds a rank up in a step: the wait for the slowest rank grows from it."""
    other_delays: tuple[RankDelay, ...] = ()
    """Other delays the calibration allows as well (it fixed only their cost at one rank count):
    the band spans them."""
    decode_s: float = 0.0
    """GPU time per step that decoding the batch on the GPU takes from training; 0 where the CPU
    decodes. It is paid at every G, and its bursts hold up collectives due while they run
    (:func:`harness.report.stragglers.busy_collision`): a wait that grows with G."""
    data_prefetched: bool = True
    """How a shared file system's serving time enters the step: a loader that prefetches (PyTorch's
    DataLoader with workers, DALI's pipeline) reads the next batch while this one trains, so the
    step is the larger of the rest of the step and the serving time; a loader that waits for its
    batch adds the serving time to the step."""

    @property
    def overhead_s(self) -> float:
        """The framework's own per-step work beside compute (hooks, bucket copies): what a 1-rank
        cell books as communication with nothing to communicate. From 2 ranks on it cannot be
        told apart from the communication backward did not hide, and counts as that."""
        return self.exposed_s if self.reference_gpus == 1 else 0.0

    @property
    def buckets(self) -> int:
        return max(1, math.ceil(self.gradient_bytes / self.bucket_bytes))

    def with_batch(self, batch_per_gpu: int) -> "CellModel":
        """What-if: compute, data and decoding grow with the batch; the gradient and the delays
        (fixed seconds) do not."""
        scale = batch_per_gpu / self.batch_per_gpu
        return dataclasses.replace(self, batch_per_gpu=batch_per_gpu, compute_s=self.compute_s * scale,
                                   data_s=self.data_s * scale, decode_s=self.decode_s * scale)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Assumptions:
    """One corner of the band: a link speed, a latency, an overlap and a delay."""

    bandwidth: str = "value"
    """"value", "low" or "high": which of each link's bandwidths."""
    latency: str = "value"
    hidden_s: float | None = None
    """Communication backward hides; None: measured at the reference."""
    delay: RankDelay | None = None
    """None: the cell's own."""


def allreduce_s(nbytes: float, gpus: int, link: Link, *, buckets: int = 1, bandwidth: str = "value",
                latency: str = "value") -> float:
    """Seconds to all-reduce ``nbytes`` in ``buckets`` equal buckets over ``gpus`` ranks."""
    if gpus <= 1:
        return 0.0
    speed = {"value": link.bandwidth, "low": link.bandwidth_range[0], "high": link.bandwidth_range[1]}[bandwidth]
    alpha = {"value": link.latency_s, "low": link.latency_range[0], "high": link.latency_range[1]}[latency]
    bucket = nbytes / buckets
    ring = 2 * (gpus - 1) * alpha + bus_factor(gpus) * bucket / speed
    tree = 2 * math.ceil(math.log2(gpus)) * alpha + 2 * bucket / speed
    return buckets * min(ring, tree)


def hidden_at_reference(cell: CellModel, network: Network) -> float | None:
    """Communication the cell's backward hid at its reference, or None where it ran alone."""
    if cell.reference_gpus < 2:
        return None
    comm = allreduce_s(cell.gradient_bytes, cell.reference_gpus, network.link(cell.reference_gpus),
                       buckets=cell.buckets)
    return min(max(0.0, comm - cell.exposed_s), BACKWARD_SHARE * cell.compute_s)


def step_terms(cell: CellModel, network: Network, gpus: int, assumptions: Assumptions = Assumptions(), *,
               fs_bandwidth: float | None = None, image_bytes: float = 0.0) -> dict[str, float]:
    """Seconds of each of :data:`TERMS` in a step on ``gpus`` ranks; the step is their sum."""
    hidden = assumptions.hidden_s
    if hidden is None:
        hidden = hidden_at_reference(cell, network) or 0.0
    comm = allreduce_s(cell.gradient_bytes, gpus, network.link(gpus), buckets=cell.buckets,
                       bandwidth=assumptions.bandwidth, latency=assumptions.latency)
    served = gpus * cell.batch_per_gpu * image_bytes / fs_bandwidth if fs_bandwidth else 0.0
    delay = assumptions.delay or cell.delay
    compute = cell.compute_s + cell.optimizer_s + cell.overhead_s
    collision = busy_collision(cell.decode_s, compute + cell.data_s + cell.decode_s)
    decode_wait = expected_wait(collision, gpus) - expected_wait(collision, cell.reference_gpus)
    terms = {"compute": compute,
             "data": cell.data_s,
             "GPU decoding": cell.decode_s + decode_wait,
             "exposed communication": max(0.0, comm - hidden),
             "wait for the slowest rank": expected_wait(delay, gpus) - expected_wait(delay, cell.reference_gpus)}
    rest = sum(terms.values())
    terms["file system"] = max(0.0, served - rest) if cell.data_prefetched else served
    return {term: terms[term] for term in TERMS}


def step_s(cell: CellModel, network: Network, gpus: int, assumptions: Assumptions = Assumptions(), *,
           fs_bandwidth: float | None = None, image_bytes: float = 0.0) -> float:
    return sum(step_terms(cell, network, gpus, assumptions, fs_bandwidth=fs_bandwidth,
                          image_bytes=image_bytes).values())


def overlap_range(cell: CellModel, network: Network) -> tuple[float, float, float]:
    """(likely, least, most) seconds of communication backward hides. Measured where the reference
    exposed some (backward hid that much and no more); where it exposed none, backward hid all it
    was given and perhaps more; on one rank it was not measured: from none to all of backward,
    half most likely."""
    backward = BACKWARD_SHARE * cell.compute_s
    measured = hidden_at_reference(cell, network)
    if measured is None:
        return backward / 2, 0.0, backward
    if cell.exposed_s > 0:
        return measured, measured, measured
    return max(measured, backward / 2), measured, max(measured, backward)


def corners(cell: CellModel, network: Network) -> list[Assumptions]:
    """The most likely assumptions first, then the band's corners: the links' fitted values and
    interval ends, the overlap's range (:func:`overlap_range`), and the cell's other delays."""
    likely, least, most = overlap_range(cell, network)
    links = [Assumptions(hidden_s=likely), Assumptions(bandwidth="low", latency="high", hidden_s=least),
             Assumptions(bandwidth="high", latency="low", hidden_s=most)]
    return links + [dataclasses.replace(corner, delay=delay) for delay in cell.other_delays for corner in links]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Prediction:
    gpus: int
    efficiency: float
    efficiency_range: tuple[float, float]
    step_s: float
    throughput: float
    """Images per second of all G GPUs."""


def predict(cell: CellModel, network: Network, gpus: Sequence[int], *, base_gpus: int | None = None,
            fs_bandwidth: float | None = None, image_bytes: float = 0.0) -> list[Prediction]:
    """E_G at each of ``gpus`` relative to ``base_gpus`` (default: one node, as the study's G_ref = 4)."""
    base = base_gpus or network.gpus_per_node
    likely, *others = corners(cell, network)
    extra = {"fs_bandwidth": fs_bandwidth, "image_bytes": image_bytes}

    def efficiency(count: int, assumptions: Assumptions) -> float:
        return step_s(cell, network, base, assumptions, **extra) / step_s(cell, network, count, assumptions, **extra)

    out = []
    for count in gpus:
        step = step_s(cell, network, count, likely, **extra)
        values = [efficiency(count, assumptions) for assumptions in (likely, *others)]
        out.append(Prediction(gpus=count, efficiency=values[0], efficiency_range=(min(values), max(values)),
                              step_s=step, throughput=count * cell.batch_per_gpu / step))
    return out


def added_seconds(cell: CellModel, network: Network, gpus: int, *, base_gpus: int | None = None,
                  fs_bandwidth: float | None = None, image_bytes: float = 0.0) -> dict[str, float]:
    """What each term adds to the step at ``gpus`` beyond the base's (most likely assumptions)."""
    base = base_gpus or network.gpus_per_node
    likely = corners(cell, network)[0]
    extra = {"fs_bandwidth": fs_bandwidth, "image_bytes": image_bytes}
    at_base = step_terms(cell, network, base, likely, **extra)
    here = step_terms(cell, network, gpus, likely, **extra)
    return {term: here[term] - at_base[term] for term in TERMS}


def lost_efficiency(cell: CellModel, network: Network, gpus: int, *, base_gpus: int | None = None,
                    fs_bandwidth: float | None = None, image_bytes: float = 0.0) -> dict[str, float]:
    """Each term's part of 1 - E_G at ``gpus`` (most likely assumptions), in E_G units: what it
    adds to the step beyond the base's, over the step at ``gpus``. They sum to 1 - E_G; a term the
    base pays as much of (compute) loses nothing, it only dilutes the others."""
    extra = {"base_gpus": base_gpus, "fs_bandwidth": fs_bandwidth, "image_bytes": image_bytes}
    added = added_seconds(cell, network, gpus, **extra)
    step = step_s(cell, network, gpus, corners(cell, network)[0], fs_bandwidth=fs_bandwidth, image_bytes=image_bytes)
    return {term: seconds / step for term, seconds in added.items()}


def bucket_bytes_of(framework_settings: Mapping) -> int:
    """The fusion bucket a framework's recorded settings say it all-reduces gradients in."""
    if framework_settings.get("bucket_cap_mb"):
        return int(float(framework_settings["bucket_cap_mb"]) * 2**20)
    if framework_settings.get("fusion_threshold_bytes"):
        return int(framework_settings["fusion_threshold_bytes"])
    zero = ((framework_settings.get("config") or {}).get("zero_optimization") or {})
    if zero.get("reduce_bucket_size"):
        return int(float(zero["reduce_bucket_size"])) * 4  # elements of fp32
    return DEFAULT_BUCKET_BYTES


def cell_model(results: Mapping, cell_id: str) -> CellModel:
    """The model of ``cell_id`` from a dlscale results file."""
    cell = next((c for c in results.get("cells", []) if c.get("cell") == cell_id), None)
    if cell is None:
        raise ValueError(f"no cell {cell_id!r} in the results; it has: "
                         f"{', '.join(c.get('cell', '?') for c in results.get('cells', []))}")
    workload = results.get("workload") or {}
    return model_of_records(cell_id, cell.get("records") or [], batch_per_gpu=int(workload["batch_size"]),
                            num_classes=int(workload.get("num_classes") or 1000))


def all_reduced_bytes(records: Sequence[Mapping]) -> int | None:
    """The bytes a step all-reduced, as the rank counted them after its window (its record's
    ``work``), or None where it did not count them."""
    counted = (((records[0].get("work") or {}).get("collectives") or {}).get("all_reduce") or {}).get("bytes")
    return int(counted) if counted else None


def model_of_records(cell_id: str, records: Sequence[Mapping], *, batch_per_gpu: int,
                     num_classes: int = 1000) -> CellModel:
    """The model of a cell from its ranks' records of one launch."""
    parsed = scaling_cell(cell_id)
    if parsed is None or not records:
        raise ValueError(f"{cell_id}: a scaling cell with its records is needed")
    slowest = cell_breakdown(records).slowest
    return CellModel(name=cell_id, reference_gpus=parsed.ranks, batch_per_gpu=batch_per_gpu,
                     compute_s=slowest.compute, optimizer_s=slowest.optimizer, data_s=slowest.data,
                     exposed_s=slowest.communication,
                     delay=estimate_rank_delay([r["step_times"] for r in records]),
                     gradient_bytes=all_reduced_bytes(records) or gradient_bytes(parsed.model, num_classes),
                     bucket_bytes=bucket_bytes_of(records[0].get("framework_settings") or {}))


def prediction_rows(predictions: Sequence[Prediction], *, reference_note: str = "") -> list[list[str]]:
    rows = [["GPUs", "E_G", "E_G band", "step s", "img/s", "90 epochs of ImageNet-1k" + reference_note]]
    for p in predictions:
        rows.append([str(p.gpus), f"{p.efficiency:.2f}", f"[{p.efficiency_range[0]:.2f}, {p.efficiency_range[1]:.2f}]",
                     f"{p.step_s:.4f}", f"{p.throughput:,.0f}", format_duration(time_to_train_s(p.throughput))])
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.report.scaling_model",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, help="a dlscale results.json")
    parser.add_argument("--cell", required=True, help="the cell to model, e.g. ddp-synthetic-resnet50-g2")
    parser.add_argument("--intra", type=Path, required=True,
                        help="all-reduce timings within a node: dlscale collectives JSON, nccl-tests or OSU output")
    parser.add_argument("--inter", type=Path, help="all-reduce timings across nodes (default: as --intra)")
    parser.add_argument("--ranks", type=int, help="ranks of an OSU timings file (it does not say)")
    parser.add_argument("--gpus-per-node", type=int, default=4, help="ranks per node (default 4, as the study's)")
    parser.add_argument("--gpus", default=",".join(map(str, STUDY_GPUS)), help="GPU counts to predict")
    parser.add_argument("--network-speedup", type=float, default=1.0, help="what if every link were this much faster")
    parser.add_argument("--batch-per-gpu", type=int, help="what if each GPU took this batch")
    parser.add_argument("--bucket-mb", type=float, help="what if gradients were fused in buckets of this size")
    parser.add_argument("--fs-bandwidth-gbps", type=float, help="a shared file system all ranks read from, GB/s")
    parser.add_argument("--loader-waits", action="store_true",
                        help="with --fs-bandwidth-gbps: the loader waits for each batch (adds the file system's serving "
                             "time to the step) instead of prefetching (the step the larger of the two)")
    parser.add_argument("--image-kb", type=float, default=110.0,
                        help="bytes read per image, KB (default 110, ImageNet's mean JPEG)")
    args = parser.parse_args(argv)
    try:
        results = json.loads(args.results.read_text())
        cell = cell_model(results, args.cell)
        intra = read_link(args.intra, args.ranks)
        inter = read_link(args.inter, args.ranks) if args.inter else intra
        if args.network_speedup != 1:
            intra, inter = intra.scaled(args.network_speedup), inter.scaled(args.network_speedup)
        gpus = [int(part) for part in args.gpus.split(",")]
    except (OSError, ValueError, KeyError) as error:
        print(f"scaling_model: {error}", file=sys.stderr)
        return 2
    if args.batch_per_gpu:
        cell = cell.with_batch(args.batch_per_gpu)
    if args.bucket_mb:
        cell = dataclasses.replace(cell, bucket_bytes=int(args.bucket_mb * 2**20))
    if args.loader_waits:
        cell = dataclasses.replace(cell, data_prefetched=False)
    network = Network(intra=intra, inter=inter, gpus_per_node=args.gpus_per_node)
    hidden = hidden_at_reference(cell, network)
    print(f"cell {cell.name}: per step compute {cell.compute_s:.4f} s, data {cell.data_s:.4f} s, optimizer "
          f"{cell.optimizer_s:.4f} s, exposed communication {cell.exposed_s:.4f} s at {cell.reference_gpus} "
          f"rank(s); gradient {cell.gradient_bytes / 1e6:.1f} MB in {cell.buckets} bucket(s)")
    print(f"what holds a rank up (from its step times): {cell.delay.describe()}")
    print("overlap: " + ("not measured (a 1-rank reference): the band spans none to all of backward" if hidden is None
                         else f"backward hid {hidden:.4f} s of communication at the reference" if cell.exposed_s > 0
                         else f"backward hid all {hidden:.4f} s of communication at the reference, perhaps more: "
                              "the band reaches all of backward"))
    print(f"within a node: {intra.describe()}\nbetween nodes: {inter.describe()}")
    fs = args.fs_bandwidth_gbps * 1e9 if args.fs_bandwidth_gbps else None
    predictions = predict(cell, network, gpus, fs_bandwidth=fs, image_bytes=args.image_kb * 1e3)
    print(f"E_G relative to one node of {network.gpus_per_node} rank(s), as the study's to one node of 4 GPUs")
    print(format_table(prediction_rows(predictions)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
